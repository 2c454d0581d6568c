package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/dashboard"
	"github.com/allot-dev/allot/kube/kubetest"
)

// TestDashboardAuthRolesAreEnough installs the chart's dashboard account with
// dashboard.auth.mode=token (its read-only role and system:auth-delegator) on a real API
// server and runs the dashboard as that account in token mode: it reviews a
// ServiceAccount's token and asks what it may read, so that the account, which may edit
// team-a only, sees team-a's pod and not team-b's; the dashboard's account still reads no
// Secret and changes nothing.
func TestDashboardAuthRolesAreEnough(t *testing.T) {
	objs := deploy.Render(t, "--set", "dashboard.auth.mode=token")
	e := kubetest.Start(t, 1, 8)
	e.Queue(t, "team-a", 4, nil)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.MustPod(t, kubetest.PodSpec{Name: "waiting-in-" + ns, Namespace: ns, Queue: "team-a", GPUs: 1})
	}
	if _, err := e.Client.CoreV1().ServiceAccounts("team-a").Create(e.Ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "alice"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-edit", Namespace: "team-a"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "alice", Namespace: "team-a"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}}
	if _, err := e.Client.RbacV1().RoleBindings("team-a").Create(e.Ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := e.Client.CoreV1().ServiceAccounts("team-a").CreateToken(e.Ctx, "alice",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	install(t, e, objs, "ServiceAccount/allot-dashboard", "ClusterRole/allot-dashboard", "ClusterRoleBinding/allot-dashboard",
		"ClusterRoleBinding/allot-dashboard-auth-delegator", "Role/allot-dashboard-consumption", "RoleBinding/allot-dashboard-consumption")
	rc := serviceAccount(e, "allot-dashboard")
	base := serveDashboardAs(t, e, rc, dashboard.Options{Auth: dashboard.Auth{Mode: dashboard.AuthToken}})
	get := func(path, token string) (int, string) { return httpGet(t, base+path, token) }
	e.WaitFor(t, "the dashboard ready as its ServiceAccount", func() (bool, string) {
		code, body := get("/healthz", "")
		return code == http.StatusOK, fmt.Sprint(code, " ", body)
	})
	if code, body := get("/api/state", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", code, body)
	}
	e.WaitFor(t, "alice's namespace on her page, and only hers", func() (bool, string) {
		code, body := get("/api/state", tr.Status.Token)
		var st dashboard.State
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			return false, fmt.Sprint(code, " ", err, " ", body)
		}
		var names []string
		for _, w := range st.Workloads {
			names = append(names, w.Namespace+"/"+w.Name)
		}
		return fmt.Sprint(names) == "[team-a/waiting-in-team-a]", fmt.Sprint(names)
	})
	if code, body := get("/api/workloads/team-b/waiting-in-team-b", tr.Status.Token); code != http.StatusNotFound {
		t.Errorf("alice asking for team-b's pod: %d %s", code, body)
	}
	// What teams consumed is an admin's: alice, who may not list allot-system's ConfigMaps,
	// is told so; the dashboard itself may read them there, and nowhere else.
	if code, body := get("/api/consumption", tr.Status.Token); code != http.StatusForbidden || !strings.Contains(body, "system:serviceaccount:team-a:alice may not") {
		t.Errorf("alice asking for GPU consumption: %d %s", code, body)
	}
	refused(t, e, rc,
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "team-a"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "team-a"},
		authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"},
		authorizationv1.ResourceAttributes{Verb: "update", Group: "allot.dev", Resource: "queues"})
}

// TestDashboardProxyWritesWithTheChartsRights installs the chart's dashboard account with
// dashboard.auth.mode=proxy (writes auto: the right to impersonate) on a real API server
// and runs the dashboard as that account: alice, named by the proxy, submits into team-a,
// where she may edit, and is refused in team-b in the API server's words, also when the
// proxy names her in system:masters (Kubernetes' own groups are never impersonated). The
// account itself still creates nothing. With writes=off the chart grants no impersonation,
// and writes=on with auth none is refused at install.
func TestDashboardProxyWritesWithTheChartsRights(t *testing.T) {
	objs := deploy.Render(t, "--set", "dashboard.auth.mode=proxy", "--set", "dashboard.auth.proxy.secretName=proxy-secret")
	e := kubetest.Start(t, 1, 8)
	e.Queue(t, "team-a", 4, nil)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-edit", Namespace: "team-a"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}}
	if _, err := e.Client.RbacV1().RoleBindings("team-a").Create(e.Ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	install(t, e, objs, "ServiceAccount/allot-dashboard", "ClusterRole/allot-dashboard", "ClusterRoleBinding/allot-dashboard",
		"ClusterRoleBinding/allot-dashboard-auth-delegator", "ClusterRole/allot-dashboard-impersonate", "ClusterRoleBinding/allot-dashboard-impersonate")
	rc := serviceAccount(e, "allot-dashboard")
	base := serveDashboardAs(t, e, rc, dashboard.Options{Auth: dashboard.Auth{Mode: dashboard.AuthProxy}})
	e.WaitFor(t, "the dashboard ready as its ServiceAccount", func() (bool, string) {
		code, body := httpGet(t, base+"/healthz", "")
		return code == http.StatusOK, fmt.Sprint(code, " ", body)
	})
	submit := func(name, ns, groups string) (int, string) {
		body := fmt.Sprintf(`{"name": %q, "namespace": %q, "queue": "team-a", "image": "busybox", "gpu": "1"}`, name, ns)
		req, _ := http.NewRequest("POST", base+"/api/submit", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Allot-Console", "1")
		req.Header.Set("X-Forwarded-User", "alice")
		if groups != "" {
			req.Header.Set("X-Forwarded-Groups", groups)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	e.WaitFor(t, "alice's submission into team-a made as her", func() (bool, string) {
		code, body := submit("train-a", "team-a", "")
		return code == http.StatusCreated, fmt.Sprint(code, " ", body)
	})
	if _, err := e.Client.BatchV1().Jobs("team-a").Get(e.Ctx, "train-a", metav1.GetOptions{}); err != nil {
		t.Errorf("alice's Job: %v", err)
	}
	for _, groups := range []string{"", "system:masters"} {
		if code, body := submit("sneak", "team-b", groups); code != http.StatusUnprocessableEntity || !strings.Contains(body, `User \"alice\" cannot`) {
			t.Errorf("alice (groups %q) into team-b: %d %s", groups, code, body)
		}
	}
	refused(t, e, rc,
		authorizationv1.ResourceAttributes{Verb: "create", Group: "batch", Resource: "jobs", Namespace: "team-a"},
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"})

	if objs := deploy.Render(t, "--set", "dashboard.auth.mode=proxy", "--set", "dashboard.auth.proxy.secretName=proxy-secret", "--set", "dashboard.writes=off"); objs["ClusterRole/allot-dashboard-impersonate"] != nil {
		t.Errorf("writes=off: the dashboard may still impersonate")
	}
	if objs := deploy.Render(t, "--set", "dashboard.auth.mode=token"); objs["ClusterRole/allot-dashboard-impersonate"] != nil {
		t.Errorf("token mode: the dashboard may impersonate (it acts with each person's own token)")
	}
}
