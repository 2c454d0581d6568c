package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/internal/browsertest"
	"github.com/allot-dev/allot/kube/dashboard"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// authCluster is a cluster with two tenants: team-a runs alpha-train and alpha-eval in
// queue-a, team-b runs bravo-train in queue-b, all on dgx-1. alice may edit team-a, bob
// team-b (the edit ClusterRole bound in their namespace), admin is cluster-admin; each is
// both a user (for a proxy to name) and a ServiceAccount of namespace people (for tokens).
type authCluster struct {
	*kubetest.Env
	kubeconfig string
	// out is what the last allot dashboard printed.
	out *syncBuffer
}

var tenants = map[string]string{"alice": "team-a", "bob": "team-b"}

func startAuthCluster(t *testing.T) *authCluster {
	t.Helper()
	e := kubetest.Start(t, 1, 8)
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "queue-a", 4, nil)
	e.Queue(t, "queue-b", 4, nil)
	for _, ns := range []string{"team-a", "team-b", "people"} {
		if _, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	subjects := func(who string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: who}, {Kind: "ServiceAccount", Name: who, Namespace: "people"}}
	}
	for _, who := range []string{"alice", "bob", "admin"} {
		if _, err := e.Client.CoreV1().ServiceAccounts("people").Create(e.Ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: who}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for who, ns := range tenants {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: who + "-edit", Namespace: ns}, Subjects: subjects(who),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}}
		if _, err := e.Client.RbacV1().RoleBindings(ns).Create(e.Ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "admin-cluster-admin"}, Subjects: subjects("admin"),
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}}
	if _, err := e.Client.RbacV1().ClusterRoleBindings().Create(e.Ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []kubetest.PodSpec{{Name: "alpha-train", Namespace: "team-a", Queue: "queue-a", GPUs: 2},
		{Name: "alpha-eval", Namespace: "team-a", Queue: "queue-a", GPUs: 1}, {Name: "bravo-train", Namespace: "team-b", Queue: "queue-b", GPUs: 1}} {
		e.MustPod(t, p)
	}
	e.WaitFor(t, "the three pods running", func() (bool, string) {
		n := e.Count(t, "team-a", kubetest.Running) + e.Count(t, "team-b", kubetest.Running)
		return n == 3, fmt.Sprintf("%d running", n)
	})
	kc := filepath.Join(e.Dir, "kubeconfig")
	if err := e.Cluster.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	return &authCluster{Env: e, kubeconfig: kc}
}

// dashboard runs `allot dashboard` with args (as the kubeconfig's admin) until the test
// ends, and returns its address.
func (c *authCluster) dashboard(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(c.Ctx)
	out := &syncBuffer{}
	c.out = out
	cmd := NewRoot()
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(append([]string{"dashboard", "--kubeconfig", c.kubeconfig, "--address", "127.0.0.1:0"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("allot dashboard stopped with %v", err)
		}
	})
	var url string
	c.WaitFor(t, "allot dashboard ready", func() (bool, string) {
		m := regexp.MustCompile(`dashboard: (http://\S+)`).FindStringSubmatch(out.String())
		if m == nil {
			return false, out.String()
		}
		url = m[1]
		resp, err := http.Get(url + "healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return url
}

// token is a ServiceAccount token of namespace people, from the TokenRequest API.
func (c *authCluster) token(t *testing.T, who string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts("people").CreateToken(c.Ctx, who,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", who, err)
	}
	return tr.Status.Token
}

// headers sets the headers the browser adds to each request from now on (what a proxy in
// front would add for the person signed in), and leaves the page, so that the next one
// opens its stream anew.
func headers(t *testing.T, b *browsertest.Browser, h map[string]any) {
	t.Helper()
	err := chromedp.Do(b.Ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h})
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	b.Open(t, "about:blank")
}

// fetchStatus is the HTTP status the page gets for a path of the dashboard.
func fetchStatus(t *testing.T, b *browsertest.Browser, path string) int {
	t.Helper()
	return browsertest.Eval[int](t, b, fmt.Sprintf(`fetch(%q, {cache: "no-store"}).then(r => r.status)`, path))
}

// sees checks, in the browser, the workloads page and the nodes page as one person: the
// workloads listed, the others' names nowhere in the page's text.
func sees(t *testing.T, b *browsertest.Browser, url, who string, want, hidden []string) {
	t.Helper()
	b.Open(t, url+"#/workloads")
	b.WaitText(t, "table.workloads tbody", who+"'s workloads", func(s string) bool {
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return strings.Count(s, "\n")+1 == len(want)
	})
	for _, page := range []string{"#/workloads", "#/nodes", "#/queues", "#/"} {
		b.Open(t, url+page)
		b.WaitText(t, "main", who+"'s "+page, func(s string) bool { return s != "" && !strings.Contains(s, "Connecting to Allot") })
		text := browsertest.Eval[string](t, b, `document.body.innerText`)
		for _, h := range hidden {
			if strings.Contains(text, h) {
				b.Screenshot(t, who+"-sees-"+h)
				t.Errorf("%s's %s page shows %q:\n%s", who, page, h, text)
			}
		}
	}
}

// TestDashboardAuthProxy runs `allot dashboard --auth=proxy` and reads it in Chromium as
// alice, bob and an admin, the user named in the header a proxy would add: each sees their
// namespace's workloads and not the other's (not on the nodes page either, where the
// other's GPU reads "in use by another namespace"), the admin both; alice's request for
// team-b's workload is answered 404; a request with no user is refused with 401.
func TestDashboardAuthProxy(t *testing.T) {
	b := browsertest.Start(t, 1280, 900)
	c := startAuthCluster(t)
	url := c.dashboard(t, "--auth=proxy", "--proxy-user-header=X-Auth-Request-User")

	headers(t, b, map[string]any{})
	b.Open(t, url)
	b.WaitText(t, "body", "the page without a user", browsertest.Contains("sign-in proxy"))
	if code := fetchStatus(t, b, "api/state"); code != http.StatusUnauthorized {
		t.Errorf("api/state with no user: %d, want 401", code)
	}

	headers(t, b, map[string]any{"X-Auth-Request-User": "alice"})
	sees(t, b, url, "alice", []string{"alpha-train", "alpha-eval"}, []string{"bravo-train", "team-b", "queue-b"})
	b.Open(t, url+"#/nodes")
	b.WaitText(t, ".gpu-part", "bravo-train's GPU unnamed", browsertest.Contains("another namespace", "alpha-train"))
	if parts := browsertest.Eval[string](t, b, `Array.from(document.querySelectorAll(".gpu-part")).map(p => p.innerText).join(" | ")`); strings.Contains(parts, "not Allot's") {
		t.Errorf("a GPU of another namespace's pod reads as not Allot's: %s", parts)
	}
	b.WaitText(t, "header .who", "who the page is shown as", browsertest.Contains("alice"))
	if strings.Contains(browsertest.Eval[string](t, b, `document.querySelector("header").innerText`), "sign out") {
		t.Errorf("behind a proxy the page offers to sign out, which only the proxy can do")
	}
	b.Screenshot(t, "alice-nodes")
	b.Open(t, url+"#/queues")
	b.WaitText(t, "table.queue-tree", "alice's queues", browsertest.Contains("queue-a", dashboard.OtherQueues))
	b.Screenshot(t, "alice-queues")
	if code := fetchStatus(t, b, "api/workloads/team-b/bravo-train"); code != http.StatusNotFound {
		t.Errorf("alice asking for team-b's bravo-train: %d, want 404", code)
	}
	if code := fetchStatus(t, b, "api/workloads/team-a/alpha-train"); code != http.StatusOK {
		t.Errorf("alice asking for her alpha-train: %d, want 200", code)
	}
	// A queue's page: hers, not team-b's.
	if code := fetchStatus(t, b, "api/queues/queue-a"); code != http.StatusOK {
		t.Errorf("alice asking for queue-a's page: %d, want 200", code)
	}
	if code := fetchStatus(t, b, "api/queues/queue-b"); code != http.StatusNotFound {
		t.Errorf("alice asking for queue-b's page: %d, want 404", code)
	}
	b.Open(t, url+"#/workloads/team-a/alpha-train")
	b.WaitText(t, ".detail", "alpha-train's detail", browsertest.Contains("alpha-train", "Events"))
	b.Open(t, url+"#/consumption")
	b.WaitText(t, ".consumption .error", "GPU consumption refused to alice", browsertest.Contains("GPU consumption is for those who may list ConfigMaps in allot-system", "alice may not"))

	headers(t, b, map[string]any{"X-Auth-Request-User": "bob"})
	sees(t, b, url, "bob", []string{"bravo-train"}, []string{"alpha-train", "alpha-eval", "team-a", "queue-a"})
	b.Screenshot(t, "bob-overview")

	headers(t, b, map[string]any{"X-Auth-Request-User": "admin"})
	sees(t, b, url, "admin", []string{"alpha-train", "alpha-eval", "bravo-train"}, []string{dashboard.OtherNamespace, dashboard.OtherQueues})
	b.Open(t, url+"#/consumption")
	b.WaitText(t, ".consumption", "the admin's Consumption page", browsertest.Contains("UTC days"))

	// The page's figures are those of a history the test writes (writeHistory, as the
	// scheduler's recorder writes it, across a restart) and works out itself: each queue's
	// GPUs held from the first look to the last, and the busy part of those measured.
	writeHistory(t, c.Ctx, c.Client)
	span := history.looks[len(history.looks)-1].Sub(history.looks[0]).Hours()
	b.Open(t, url+"#/workloads") // the Consumption page anew, with the period in its address
	b.Open(t, url+"#/consumption?from=2026-11-01&to=2026-11-30&by=queue")
	for _, u := range history.uses {
		given := float64(u.GPUs) * span
		used, util := 0.0, "-"
		if u.Measured {
			used, util = given*u.Util/100, fmt.Sprintf("%.0f%%", u.Util)
		}
		want := fmt.Sprintf("%s %.2f %.2f %s", u.Queue, given, used, util)
		b.WaitText(t, "tr[data-line="+u.Queue+"]", u.Queue+"'s line: "+want, func(s string) bool {
			return strings.Join(strings.Fields(s), " ") == want
		})
	}
}

// TestDashboardAuthToken runs `allot dashboard --auth=token` and signs in on its page in
// Chromium with alice's and then bob's ServiceAccount token (TokenRequest API): each sees
// their own namespace's workloads only; a bearer token works without the page; no token
// and a forged one are refused with 401.
func TestDashboardAuthToken(t *testing.T) {
	b := browsertest.Start(t, 1280, 900)
	c := startAuthCluster(t)
	url := c.dashboard(t, "--auth=token")

	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", url+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("api/state", ""); code != http.StatusUnauthorized || !json.Valid([]byte(body)) {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, body := get("api/state", "forged"); code != http.StatusUnauthorized {
		t.Errorf("a forged token: %d %s", code, body)
	}
	code, body := get("api/state", c.token(t, "bob"))
	var st dashboard.State
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil || len(st.Workloads) != 1 || st.Workloads[0].Name != "bravo-train" {
		t.Errorf("bob's bearer token: %d %v %s", code, err, body)
	}
	if code, _ := get("api/workloads/team-a/alpha-train", c.token(t, "bob")); code != http.StatusNotFound {
		t.Errorf("bob asking for team-a's alpha-train: %d, want 404", code)
	}
	// A Deployment of bob's own with no pods, labelled with team-a's queue, shows him
	// nothing of queue-a: a queue is seen for the pods admitted to it, not an owner's label.
	rc := rest.CopyConfig(c.Cluster.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "bob", Groups: []string{"system:authenticated"}}
	zero := int32(0)
	peek := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "peek", Namespace: "team-b", Labels: map[string]string{"allot.dev/queue": "queue-a"}},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "peek"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "peek"}},
				Spec: corev1.PodSpec{SchedulerName: "allot", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if _, err := kubernetes.NewForConfigOrDie(rc).AppsV1().Deployments("team-b").Create(c.Ctx, peek, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, "bob's podless Deployment listed, queue-a not", func() (bool, string) {
		_, body := get("api/state", c.token(t, "bob"))
		var st dashboard.State
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return false, err.Error()
		}
		listed := false
		for _, w := range st.Workloads {
			listed = listed || w.Name == "peek"
		}
		for _, q := range st.Queues {
			if q.Name == "queue-a" {
				t.Fatalf("bob's state shows queue-a, named only by his podless Deployment's label")
			}
		}
		return listed, body
	})
	// (Gone again: the pages below show bob's own workloads only.)
	if err := kubernetes.NewForConfigOrDie(rc).AppsV1().Deployments("team-b").Delete(c.Ctx, "peek", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, "peek gone from bob's state", func() (bool, string) {
		_, body := get("api/state", c.token(t, "bob"))
		return !strings.Contains(body, `"peek"`), body
	})

	signIn := func(who string) {
		t.Helper()
		b.Open(t, url+"login")
		b.WaitText(t, "form", "the sign-in form", browsertest.Contains("Sign in"))
		browsertest.Eval[bool](t, b, fmt.Sprintf(`(document.querySelector("#token").value = %q, document.querySelector("form").submit(), true)`, c.token(t, who)))
		b.WaitText(t, "nav, main", "the dashboard after signing in", func(s string) bool { return len(s) > 20 && !strings.Contains(s, "Sign in") })
	}
	b.Open(t, url)
	b.WaitText(t, "body", "the sign-in page", browsertest.Contains("Sign in", "kubectl create token"))
	b.Screenshot(t, "sign-in")
	signIn("alice")
	sees(t, b, url, "alice", []string{"alpha-train", "alpha-eval"}, []string{"bravo-train", "team-b", "queue-b"})
	b.Screenshot(t, "alice-overview")
	if code := fetchStatus(t, b, "api/workloads/team-b/bravo-train"); code != http.StatusNotFound {
		t.Errorf("alice asking for team-b's bravo-train: %d, want 404", code)
	}
	// The header names who the page is shown as and offers to sign out; signing out
	// forgets the token and the page asks again.
	b.Open(t, url)
	b.WaitText(t, "header .who", "alice named in the header", browsertest.Contains("alice", "sign out"))
	browsertest.Eval[bool](t, b, `(document.querySelector("header .who a").click(), true)`)
	b.WaitText(t, "form", "the sign-out form", browsertest.Contains("Sign"))
	browsertest.Eval[bool](t, b, `(document.querySelector("form").submit(), true)`)
	b.WaitText(t, "body", "the sign-in page after signing out", browsertest.Contains("Sign in"))
	if code := fetchStatus(t, b, "api/state"); code != http.StatusUnauthorized {
		t.Errorf("api/state after signing out: %d, want 401", code)
	}
	signIn("bob")
	sees(t, b, url, "bob", []string{"bravo-train"}, []string{"alpha-train", "alpha-eval", "team-a", "queue-a"})
}
