package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/dashboard"
	"github.com/allot-dev/allot/kube/kubetest"
)

// as converts a rendered object to its typed form.
func as[T any](t *testing.T, o map[string]any) *T {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

// TestDashboardRoleIsEnoughAndReadOnly installs the chart's dashboard ServiceAccount,
// ClusterRole and binding on a real API server and runs the dashboard as that account: it
// becomes ready and shows the cluster, and the account can neither read Secrets nor change
// anything.
func TestDashboardRoleIsEnoughAndReadOnly(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 2, 8)
	e.Queue(t, "team-a", 4, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "waiting", Queue: "team-a", GPUs: 1})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "allot-system"}}
	if _, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := as[corev1.ServiceAccount](t, objs["ServiceAccount/allot-dashboard"])
	if _, err := e.Client.CoreV1().ServiceAccounts("allot-system").Create(e.Ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.RbacV1().ClusterRoles().Create(e.Ctx, as[rbacv1.ClusterRole](t, objs["ClusterRole/allot-dashboard"]), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.RbacV1().ClusterRoleBindings().Create(e.Ctx, as[rbacv1.ClusterRoleBinding](t, objs["ClusterRoleBinding/allot-dashboard"]), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The API server treats the impersonated name exactly as the pod's own token.
	rc := rest.CopyConfig(e.Cluster.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:allot-system:allot-dashboard",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:allot-system", "system:authenticated"}}
	srv, err := dashboard.New(rc, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(e.Ctx, ln) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	e.WaitFor(t, "the dashboard ready as its ServiceAccount", func() (bool, string) {
		code, body := get("/healthz")
		return code == http.StatusOK, fmt.Sprint(code, " ", body)
	})
	e.WaitFor(t, "the cluster on the page", func() (bool, string) {
		_, body := get("/api/state")
		var st dashboard.State
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return false, err.Error()
		}
		return st.Totals.GPUs == 16 && len(st.Nodes) == 2 && len(st.Queues) == 1 && len(st.Workloads) == 1, body
	})

	client := kubernetes.NewForConfigOrDie(rc)
	for _, attr := range []authorizationv1.ResourceAttributes{
		{Verb: "list", Resource: "secrets"},
		{Verb: "get", Resource: "secrets", Namespace: "allot-system"},
		{Verb: "create", Resource: "pods", Namespace: "default"},
		{Verb: "delete", Resource: "pods", Namespace: "default"},
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
		{Verb: "update", Group: "allot.dev", Resource: "queues"},
		{Verb: "patch", Resource: "nodes"},
		{Verb: "list", Resource: "configmaps"},
	} {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(e.Ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed {
			t.Errorf("the dashboard's account may %s %s%s", attr.Verb, attr.Resource, strings.TrimSpace(" "+attr.Subresource))
		}
	}
}
