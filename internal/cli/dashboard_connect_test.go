package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/internal/browsertest"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// openWorkspace opens alice's notebook nb-tpl (made from a workspace template, running on
// a simulated node whose kubelet serves port-forward) with the console's Open button: a
// new tab on the notebook's own host under the connect address shows the notebook's page,
// reached through the API server's port-forward as alice. Then, from outside the browser:
// bob (edit in team-b) and carol (view in team-a: no pods/portforward) are refused in the
// API server's words, a ticket works once, a session works on its own workload's host
// only, and a workload with no port is refused.
func openWorkspace(t *testing.T, b *browsertest.Browser, c *authCluster, console, connectURL string) {
	t.Helper()
	c.WaitFor(t, "nb-tpl's pod running", func() (bool, string) {
		p, err := c.Client.CoreV1().Pods("team-a").Get(c.Ctx, "nb-tpl-0", metav1.GetOptions{})
		return err == nil && kubetest.Running(p), fmt.Sprint(err)
	})
	b.Open(t, console+"#/workloads/team-a/nb-tpl")
	b.WaitText(t, ".detail h1", "nb-tpl running", browsertest.Contains("nb-tpl", "Running"))
	tabs := chromedp.WaitNewTarget(b.Ctx, func(i *target.Info) bool {
		return i.Type == "page" && strings.Contains(i.URL, "nb-tpl--team-a-")
	})
	click(t, b, ".actions button.open")
	b.WaitText(t, ".actions .done", "the console opening nb-tpl", browsertest.Contains("nb-tpl opens in a new tab: pod nb-tpl-0 port 8888"))
	b.Screenshot(t, "alice-open")
	var id target.ID
	select {
	case id = <-tabs:
	case <-time.After(30 * time.Second):
		t.Fatal("Open made no tab on nb-tpl's host")
	}
	tctx, cancel := chromedp.NewContext(b.Ctx, chromedp.WithTargetID(id))
	defer cancel()
	tab := &browsertest.Browser{Ctx: tctx, Artifacts: b.Artifacts}
	tab.WaitText(t, "h1", "the notebook's own page in the new tab", browsertest.Contains("Workspace nb-tpl-0"))
	where := browsertest.Eval[string](t, tab, `location.host + location.pathname + " opener=" + (window.opener === null)`)
	port := connectURL[strings.LastIndex(connectURL, ":")+1:]
	if !strings.HasPrefix(where, "nb-tpl--team-a-") || !strings.HasSuffix(where, ".localhost:"+port+"/lab opener=true") {
		t.Errorf("the notebook's tab is at %s; want nb-tpl's own host under %s, at /lab, with no opener", where, connectURL)
	}
	tab.Screenshot(t, "alice-notebook-tab")
	// The notebook's kernels talk over websockets, which the connect address forwards
	// too; the workspace checks the Origin against the Host as Jupyter does.
	echoed := browsertest.Eval[string](t, tab, `new Promise((ok, fail) => {
		const ws = new WebSocket("ws://" + location.host + "`+simnode.KernelChannels+`");
		ws.onopen = () => ws.send("ping");
		ws.onmessage = (m) => { ok(m.data); ws.close(); };
		ws.onerror = () => fail(new Error("websocket failed"));
		setTimeout(() => fail(new Error("no answer in 10 s")), 10000);
	})`)
	if echoed != "echo: ping" {
		t.Errorf("the notebook's websocket answered %q, want \"echo: ping\"", echoed)
	}

	// Outside the browser: a client that takes every name under localhost to be the
	// loopback address, as browsers do, and follows no redirect.
	dial := &net.Dialer{}
	hc := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, _, _ := net.SplitHostPort(addr); host == "localhost" || strings.HasSuffix(host, ".localhost") {
				addr = "127.0.0.1:" + port
			}
			return dial.DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	do := func(method, u, user string, body any, cookie *http.Cookie) (*http.Response, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			js, _ := json.Marshal(body)
			rd = strings.NewReader(string(js))
		}
		req, _ := http.NewRequest(method, u, rd)
		if user != "" {
			req.Header.Set("X-Auth-Request-User", user)
			req.Header.Set("X-Allot-Console", "1")
			req.Header.Set("Content-Type", "application/json")
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, string(out)
	}
	open := func(user, name string) (int, map[string]any) {
		t.Helper()
		resp, body := do("POST", console+"api/connect", user, map[string]string{"namespace": "team-a", "name": name}, nil)
		var m map[string]any
		_ = json.Unmarshal([]byte(body), &m)
		return resp.StatusCode, m
	}
	if code, m := open("bob", "nb-tpl"); code != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(m["error"]), `User "bob" cannot`) {
		t.Errorf("bob opening alice's notebook: %d %v", code, m)
	}
	carol := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-view", Namespace: "team-a"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "carol"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}
	if _, err := c.Client.RbacV1().RoleBindings("team-a").Create(c.Ctx, carol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, "carol (view) refused port-forward in the API server's words", func() (bool, string) {
		code, m := open("carol", "nb-tpl")
		return code == http.StatusUnprocessableEntity && strings.Contains(fmt.Sprint(m["error"]), `User "carol" cannot create resource "pods/portforward"`), fmt.Sprint(code, m)
	})
	if code, m := open("alice", "alpha-train"); code != http.StatusConflict || !strings.Contains(fmt.Sprint(m["error"]), "declares no port to open") {
		t.Errorf("alice opening a workload with no port: %d %v", code, m)
	}

	code, m := open("alice", "nb-tpl")
	enter, _ := m["url"].(string)
	if code != http.StatusOK || !strings.Contains(enter, "/_allot/enter?ticket=") {
		t.Fatalf("alice opening nb-tpl: %d %v", code, m)
	}
	resp, body := do("GET", enter, "", nil, nil)
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "allot-connect" {
			session = ck
		}
	}
	next := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.HttpOnly || !strings.HasPrefix(next, "/lab?token=") {
		t.Fatalf("the ticket: %d, Location %q, cookie %v\n%s", resp.StatusCode, next, session, body)
	}
	if resp, _ := do("GET", enter, "", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the ticket used twice: %d, want 401", resp.StatusCode)
	}
	u, _ := url.Parse(enter)
	home := "http://" + u.Host
	if resp, body := do("GET", home+next, "", nil, session); resp.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>Workspace nb-tpl-0</h1>") {
		t.Errorf("the notebook with the session: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := do("GET", home+next, "", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the notebook's host without the session: %d, want 401", resp.StatusCode)
	}
	other := "http://alpha-train--team-a-00000000.localhost:" + port
	if resp, _ := do("GET", other+next, "", nil, session); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("nb-tpl's session on another workload's host: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do("GET", "http://localhost:"+port+"/", "", nil, session); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the connect address under no workload's host: %d, want 404", resp.StatusCode)
	}
}
