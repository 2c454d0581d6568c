package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"
)

// apiServer is a fake API server's authentication and authorization: tokens by person,
// and the namespaces each may list pods in ("*": all); it counts the reviews asked.
type apiServer struct {
	client       *fake.Clientset
	tokenReviews atomic.Int32
	accessReview atomic.Int32
}

var people = map[string]struct {
	token      string
	namespaces []string
}{
	"alice": {"alice-token", []string{"team-a"}},
	"bob":   {"bob-token", []string{"team-b"}},
	"root":  {"root-token", []string{"*"}},
}

func newAPIServer() *apiServer {
	a := &apiServer{client: fake.NewClientset()}
	a.client.PrependReactor("create", "tokenreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		a.tokenReviews.Add(1)
		tr := act.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		for name, p := range people {
			if p.token == tr.Spec.Token {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name, UID: "uid-" + name,
					Groups: []string{"system:authenticated"}, Extra: map[string]authenticationv1.ExtraValue{"scope": {"x"}}}}
			}
		}
		if !tr.Status.Authenticated {
			tr.Status.Error = "invalid bearer token"
		}
		return true, tr, nil
	})
	a.client.PrependReactor("create", "subjectaccessreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		a.accessReview.Add(1)
		sar := act.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		ra := sar.Spec.ResourceAttributes
		ns := people[sar.Spec.User].namespaces
		if sar.Spec.User == "carol" && slices.Contains(sar.Spec.Groups, "team-b-devs") {
			ns = []string{"team-b"}
		}
		sar.Status.Allowed = slices.Contains(ns, "*") || ra.Resource == "pods" && ra.Verb == "list" && ra.Namespace != "" && slices.Contains(ns, ra.Namespace)
		return true, sar, nil
	})
	return a
}

// testServer serves st (cluster's) as the dashboard would, without informers: a workload's
// detail is looked up in empty caches.
func testServer(t *testing.T, auth Auth, api *apiServer, clk *testclock.FakeClock) *httptest.Server {
	t.Helper()
	opts := Options{Auth: auth, Clock: clk}
	opts.defaults()
	f := informers.NewSharedInformerFactory(api.client, 0)
	s := &Server{opts: opts, changed: make(chan struct{}), assets: http.NotFoundHandler(),
		pods: f.Core().V1().Pods().Informer(), events: f.Core().V1().Events().Informer(), nodes: f.Core().V1().Nodes().Informer(),
		jobs: f.Batch().V1().Jobs().Informer(), deps: f.Apps().V1().Deployments().Informer(), rss: f.Apps().V1().ReplicaSets().Informer(), sts: f.Apps().V1().StatefulSets().Informer()}
	s.auth = newAuthenticator(opts.Auth, api.client, clk)
	if opts.Auth.Mode != AuthNone {
		s.access = newAccess(api.client, clk, opts.Auth.CacheFor)
	}
	s.st = cluster(t)
	s.state, _ = json.Marshal(s.st)
	s.synced.Store(true)
	web := httptest.NewServer(s)
	t.Cleanup(web.Close)
	return web
}

type reply struct {
	code int
	body string
	resp *http.Response
}

func do(t *testing.T, web *httptest.Server, method, path string, header http.Header, form url.Values) reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, web.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp}
}

func bearerHeader(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

func workloadNames(t *testing.T, body string) []string {
	t.Helper()
	var st State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var out []string
	for _, w := range st.Workloads {
		out = append(out, w.Name)
	}
	return out
}

// --auth=token: no token is 401 (JSON for the API, the sign-in page otherwise), /healthz
// stays open, each person sees their namespaces, a bad token is refused, and reviews are
// asked once per 30 s.
func TestAuthToken(t *testing.T) {
	api := newAPIServer()
	clk := testclock.NewFakeClock(time.Unix(1000, 0))
	web := testServer(t, Auth{Mode: AuthToken}, api, clk)
	if r := do(t, web, "GET", "/healthz", nil, nil); r.code != 200 {
		t.Errorf("/healthz: %d %s", r.code, r.body)
	}
	r := do(t, web, "GET", "/api/state", nil, nil)
	if r.code != 401 || !strings.Contains(r.body, `"error":"sign in`) || r.resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("/api/state without a token: %d %s", r.code, r.body)
	}
	if r := do(t, web, "GET", "/", nil, nil); r.code != 401 || !strings.Contains(r.body, `<form method="post" action="./login">`) {
		t.Errorf("/ without a token: %d %s", r.code, r.body)
	}
	if r := do(t, web, "GET", "/api/stream", bearerHeader("forged"), nil); r.code != 401 || !strings.Contains(r.body, "does not accept this token") {
		t.Errorf("a bad token: %d %s", r.code, r.body)
	}
	for who, want := range map[string]string{"alice": "[train-a]", "bob": "[train-b]", "root": "[train-a train-b]"} {
		r := do(t, web, "GET", "/api/state", bearerHeader(people[who].token), nil)
		if got := workloadNames(t, r.body); r.code != 200 || strings.Join(got, " ") != strings.Trim(want, "[]") {
			t.Errorf("%s sees %v (%d), want %s", who, got, r.code, want)
		}
	}
	tr, sar := api.tokenReviews.Load(), api.accessReview.Load()
	for range 3 {
		do(t, web, "GET", "/api/state", bearerHeader("alice-token"), nil)
	}
	if api.tokenReviews.Load() != tr || api.accessReview.Load() != sar {
		t.Errorf("reviews asked again within 30 s: %d token reviews, %d access reviews, after %d and %d", api.tokenReviews.Load(), api.accessReview.Load(), tr, sar)
	}
	clk.Step(31 * time.Second)
	do(t, web, "GET", "/api/state", bearerHeader("alice-token"), nil)
	if api.tokenReviews.Load() != tr+1 || api.accessReview.Load() <= sar {
		t.Errorf("reviews not asked again after 30 s")
	}
	// Alice asking for team-b's workload is told it does not exist, as for one that does not.
	hidden := do(t, web, "GET", "/api/workloads/team-b/train-b", bearerHeader("alice-token"), nil)
	absent := do(t, web, "GET", "/api/workloads/team-a/train-b", bearerHeader("alice-token"), nil)
	if hidden.code != 404 || absent.code != 404 || strings.ReplaceAll(hidden.body, "team-b", "team-a") != absent.body {
		t.Errorf("alice's detail of team-b's workload: %d %q; of a missing one: %d %q", hidden.code, hidden.body, absent.code, absent.body)
	}
}

// The sign-in page: a token posted once is checked and kept in an HttpOnly, SameSite=Strict
// cookie that then stands for it; a bad one is refused with the form; a post from another
// site is refused; signing out forgets it.
func TestAuthLogin(t *testing.T) {
	api := newAPIServer()
	web := testServer(t, Auth{Mode: AuthToken}, api, testclock.NewFakeClock(time.Unix(1000, 0)))
	if r := do(t, web, "GET", "/login", nil, nil); r.code != 200 || !strings.Contains(r.body, `name="token"`) {
		t.Errorf("GET /login: %d %s", r.code, r.body)
	}
	if r := do(t, web, "POST", "/login", nil, url.Values{"token": {"forged"}}); r.code != 401 || !strings.Contains(r.body, "does not accept this token") ||
		len(r.resp.Cookies()) != 0 {
		t.Errorf("a bad token: %d %s", r.code, r.body)
	}
	if r := do(t, web, "POST", "/login", http.Header{"Sec-Fetch-Site": {"cross-site"}}, url.Values{"token": {"alice-token"}}); r.code != 403 {
		t.Errorf("a sign-in posted from another site: %d %s", r.code, r.body)
	}
	r := do(t, web, "POST", "/login", http.Header{"Sec-Fetch-Site": {"same-origin"}}, url.Values{"token": {"alice-token"}})
	if r.code != http.StatusSeeOther || r.resp.Header.Get("Location") != "./" || len(r.resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d %v", r.code, r.resp.Header)
	}
	c := r.resp.Cookies()[0]
	if c.Name != CookieName || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Value != "alice-token" {
		t.Errorf("cookie %+v", c)
	}
	r = do(t, web, "GET", "/api/state", http.Header{"Cookie": {c.String()}}, nil)
	if got := workloadNames(t, r.body); strings.Join(got, " ") != "train-a" {
		t.Errorf("alice's cookie shows %v", got)
	}
	r = do(t, web, "POST", "/logout", nil, url.Values{})
	if r.code != http.StatusSeeOther || len(r.resp.Cookies()) != 1 || r.resp.Cookies()[0].MaxAge >= 0 {
		t.Errorf("sign-out: %d %v", r.code, r.resp.Header)
	}
	if r := do(t, web, "POST", "/api/state", nil, url.Values{}); r.code != 405 {
		t.Errorf("POST elsewhere: %d", r.code)
	}
	// Without token mode there is no sign-in page.
	none := testServer(t, Auth{}, api, testclock.NewFakeClock(time.Unix(1000, 0)))
	if r := do(t, none, "POST", "/login", nil, url.Values{"token": {"x"}}); r.code != 405 {
		t.Errorf("--auth=none POST /login: %d", r.code)
	}
}

// --auth=proxy: the user and groups come from the proxy's headers (names configurable);
// no user is 401; with a shared secret, a request without it is 401 whatever it claims.
func TestAuthProxy(t *testing.T) {
	api := newAPIServer()
	web := testServer(t, Auth{Mode: AuthProxy, UserHeader: "X-Auth-Request-User", GroupsHeader: "X-Auth-Request-Groups"}, api, testclock.NewFakeClock(time.Unix(1000, 0)))
	if r := do(t, web, "GET", "/api/state", http.Header{"X-Forwarded-User": {"root"}}, nil); r.code != 401 || !strings.Contains(r.body, "X-Auth-Request-User") {
		t.Errorf("another header than the one configured: %d %s", r.code, r.body)
	}
	if r := do(t, web, "GET", "/", nil, nil); r.code != 401 || !strings.Contains(r.body, "sign-in proxy") {
		t.Errorf("/ without a user: %d %s", r.code, r.body)
	}
	r := do(t, web, "GET", "/api/state", http.Header{"X-Auth-Request-User": {"alice"}}, nil)
	if got := workloadNames(t, r.body); strings.Join(got, " ") != "train-a" {
		t.Errorf("alice sees %v", got)
	}
	// carol may read team-b through a group only.
	r = do(t, web, "GET", "/api/state", http.Header{"X-Auth-Request-User": {"carol"}, "X-Auth-Request-Groups": {"devs, team-b-devs"}}, nil)
	if got := workloadNames(t, r.body); strings.Join(got, " ") != "train-b" {
		t.Errorf("carol in team-b-devs sees %v", got)
	}
	r = do(t, web, "GET", "/api/state", http.Header{"X-Auth-Request-User": {"carol"}}, nil)
	if got := workloadNames(t, r.body); len(got) != 0 {
		t.Errorf("carol without her groups sees %v", got)
	}
	// A proxy that appends its header to the client's: two users, neither believed.
	if r := do(t, web, "GET", "/api/state", http.Header{"X-Auth-Request-User": {"root", "alice"}}, nil); r.code != 401 || !strings.Contains(r.body, "more than one") {
		t.Errorf("two user headers: %d %s", r.code, r.body)
	}

	secret := testServer(t, Auth{Mode: AuthProxy, Secret: "s3cret"}, api, testclock.NewFakeClock(time.Unix(1000, 0)))
	if r := do(t, secret, "GET", "/api/state", http.Header{"X-Forwarded-User": {"root"}}, nil); r.code != 401 || !strings.Contains(r.body, "did not come through") {
		t.Errorf("no secret: %d %s", r.code, r.body)
	}
	r = do(t, secret, "GET", "/api/state", http.Header{"X-Forwarded-User": {"root"}, "X-Allot-Proxy-Secret": {"s3cret"}}, nil)
	if got := workloadNames(t, r.body); r.code != 200 || len(got) != 2 {
		t.Errorf("root through the proxy: %d %v", r.code, got)
	}
}

// --auth=none serves everything with no identity and asks nothing.
func TestAuthNone(t *testing.T) {
	api := newAPIServer()
	web := testServer(t, Auth{}, api, testclock.NewFakeClock(time.Unix(1000, 0)))
	r := do(t, web, "GET", "/api/state", nil, nil)
	if got := workloadNames(t, r.body); len(got) != 2 || api.tokenReviews.Load()+api.accessReview.Load() != 0 {
		t.Errorf("--auth=none: %v, %d reviews", got, api.tokenReviews.Load()+api.accessReview.Load())
	}
	if _, err := ParseAuthMode("oidc"); err == nil {
		t.Error("ParseAuthMode took oidc")
	}
}
