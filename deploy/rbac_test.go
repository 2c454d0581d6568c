package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/dashboard"
	"github.com/allot-dev/allot/kube/idle"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
	"github.com/allot-dev/allot/kube/submit"
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

// install creates the rendered objects named kind/name (ServiceAccounts, ClusterRoles,
// Roles and their bindings) in the namespaces the chart puts them.
func install(t *testing.T, e *kubetest.Env, objs map[string]deploy.Rendered, keys ...string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "allot-system"}}
	if _, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, key := range keys {
		o := objs[key]
		if o == nil {
			t.Fatalf("the chart renders no %s", key)
		}
		var err error
		switch kind, _, _ := strings.Cut(strings.TrimPrefix(key, "kube-system/"), "/"); kind {
		case "ServiceAccount":
			_, err = e.Client.CoreV1().ServiceAccounts("allot-system").Create(e.Ctx, as[corev1.ServiceAccount](t, o), metav1.CreateOptions{})
		case "ClusterRole":
			_, err = e.Client.RbacV1().ClusterRoles().Create(e.Ctx, as[rbacv1.ClusterRole](t, o), metav1.CreateOptions{})
		case "ClusterRoleBinding":
			_, err = e.Client.RbacV1().ClusterRoleBindings().Create(e.Ctx, as[rbacv1.ClusterRoleBinding](t, o), metav1.CreateOptions{})
		case "Role":
			r := as[rbacv1.Role](t, o)
			_, err = e.Client.RbacV1().Roles(r.Namespace).Create(e.Ctx, r, metav1.CreateOptions{})
		case "RoleBinding":
			r := as[rbacv1.RoleBinding](t, o)
			_, err = e.Client.RbacV1().RoleBindings(r.Namespace).Create(e.Ctx, r, metav1.CreateOptions{})
		case "ValidatingAdmissionPolicy":
			_, err = e.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(e.Ctx, as[admissionregistrationv1.ValidatingAdmissionPolicy](t, o), metav1.CreateOptions{})
		case "ValidatingAdmissionPolicyBinding":
			_, err = e.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(e.Ctx, as[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, o), metav1.CreateOptions{})
		default:
			t.Fatalf("install: %s", key)
		}
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
}

// serviceAccount is a client config that the API server treats exactly as the pod's own
// token for that ServiceAccount.
func serviceAccount(e *kubetest.Env, name string) *rest.Config {
	rc := rest.CopyConfig(e.Cluster.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:allot-system:" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:allot-system", "system:authenticated"}}
	return rc
}

// refused checks that rc's identity may do none of attrs.
func refused(t *testing.T, e *kubetest.Env, rc *rest.Config, attrs ...authorizationv1.ResourceAttributes) {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(rc)
	for _, attr := range attrs {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(e.Ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed {
			t.Errorf("%s may %s %s%s", rc.Impersonate.UserName, attr.Verb, attr.Resource, strings.TrimSpace(" "+attr.Subresource))
		}
	}
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
	install(t, e, objs, "ServiceAccount/allot-dashboard", "ClusterRole/allot-dashboard", "ClusterRoleBinding/allot-dashboard")
	rc := serviceAccount(e, "allot-dashboard")
	base := serveDashboardAs(t, e, rc, dashboard.Options{})
	get := func(path string) (int, string) { return httpGet(t, base+path, "") }
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

	refused(t, e, rc,
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "allot-system"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "update", Group: "allot.dev", Resource: "queues"},
		authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes"},
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"})
}

// TestSchedulerRoleIsEnough runs the whole stack (webhooks, workload controller, scheduler
// with leader election) as the chart's ServiceAccount with the chart's roles, on one node
// of four GPUs: a Job's gang of 2 binds, then two half-GPU notebooks share a GPU through
// their ConfigMaps and a reservation, a pod of 4 GPUs waits with its reason, and the queue's
// status is written. The account reads no Secrets.
func TestSchedulerRoleIsEnough(t *testing.T) {
	objs := deploy.Render(t, "--set", "customMetrics.enabled=true")
	e := kubetest.Start(t, 1, 4)
	install(t, e, objs, "ServiceAccount/allot", "ClusterRole/allot", "ClusterRoleBinding/allot",
		"kube-system/Role/allot-leader-election", "kube-system/RoleBinding/allot-leader-election",
		"ClusterRoleBinding/allot-auth-delegator", "kube-system/RoleBinding/allot-authentication-reader")
	rc := serviceAccount(e, "allot")
	if _, err := stack.LocalWith(e.Ctx, e.Cluster.Config, rc, e.Dir, "", stack.Options{Scheduler: scheduler.Options{Interval: 200 * time.Millisecond,
		LeaderElection: true, Identity: "rbac-test"}, Idle: idle.Options{Tick: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 4, nil)
	two := int32(2)
	tmpl := kubetest.PodSpec{GPUs: 1}.Pod()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{Parallelism: &two, Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
	if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the Job's gang running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 2, fmt.Sprintf("%d running", n)
	})
	for _, name := range []string{"nb-1", "nb-2"} {
		e.MustPod(t, kubetest.PodSpec{Name: name, Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}})
	}
	e.MustPod(t, kubetest.PodSpec{Name: "huge", Queue: "team-a", GPUs: 4})
	e.WaitFor(t, "the gang and the notebooks running, huge waiting with a reason", func() (bool, string) {
		pods := e.Pods(t, "default")
		running := 0
		for _, p := range pods {
			if kubetest.Running(p) {
				running++
			}
		}
		var reason string
		if h := pods["huge"]; h != nil {
			for _, c := range h.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					reason = c.Message
				}
			}
		}
		nb := pods["nb-1"]
		configured := nb != nil && nb.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"] != ""
		var seen []string
		for name, p := range pods {
			seen = append(seen, fmt.Sprintf("%s %s on %q", name, p.Status.Phase, p.Spec.NodeName))
		}
		return running == 4 && reason != "" && configured, fmt.Sprintf("%d running (%s), huge's reason %q, nb-1 configured %v", running, strings.Join(seen, ", "), reason, configured)
	})
	if _, err := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Get(e.Ctx, "train", metav1.GetOptions{}); err != nil {
		t.Errorf("no PodGroup for the Job: %v", err)
	}
	e.WaitFor(t, "the queue's status", func() (bool, string) {
		u, err := e.Dyn.Resource(kubetest.Queues).Get(e.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		alloc, _, _ := unstructured.NestedString(u.Object, "status", "allocated", "nvidia.com/gpu")
		return alloc == "3", fmt.Sprintf("allocated %q", alloc)
	})
	if evs := e.Events(t, "default", "huge"); len(evs) == 0 {
		t.Error("no Event on the waiting pod")
	}
	// The idle controller: a notebook of allot submit idle past its queue's idleTimeout is
	// suspended (the StatefulSet read, marked and scaled to zero).
	e.Queue(t, "team-b", 1, map[string]any{"idleTimeout": map[string]any{"interactive": "1s"}})
	nb, err := submit.Spec{Name: "notebook", Namespace: "default", Queue: "team-b", Image: "jupyter", GPUs: "1", Interactive: true}.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.AppsV1().StatefulSets("default").Create(e.Ctx, nb[0].(*appsv1.StatefulSet), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the idle notebook suspended", func() (bool, string) {
		st, err := e.Client.AppsV1().StatefulSets("default").Get(e.Ctx, "notebook", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *st.Spec.Replicas == 0 && st.Annotations[inspect.AnnotationIdleSuspended] != "", fmt.Sprintf("replicas %d", *st.Spec.Replicas)
	})
	// The custom metrics API, served as the chart's ServiceAccount (its informers, the front
	// proxy's settings, TokenReview and SubjectAccessReview), answers through the aggregator.
	e.WaitFor(t, "the custom metrics API", func() (bool, string) {
		b, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/gpu-utilization").DoRaw(e.Ctx)
		return err == nil && strings.Contains(string(b), `"kind":"MetricValueList"`), fmt.Sprint(err, string(b))
	})
	refused(t, e, rc,
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "allot-system"},
		authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"},
		authorizationv1.ResourceAttributes{Verb: "update", Group: "allot.dev", Resource: "queues"},
		// No pod's labels or annotations: the idle controller tells a bare pod by an Event.
		authorizationv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: "default"})
}

// TestAgentRoleIsEnough runs the real agent on a simulated GPU node (go-nvml's mock, a
// device plugin, the kubelet's PodResources socket) as the chart's agent ServiceAccount
// with the chart's role and admission policy: it writes the node's inventory, records a
// pod's devices, reports a failed GPU and tells the pod on it; it may write no other node
// nor pods bound elsewhere, read no Secret, change no pod's spec and delete nothing.
func TestAgentRoleIsEnough(t *testing.T) {
	objs := deploy.Render(t)
	ds := objs["DaemonSet/allot-agent-gpu"]
	if ds == nil {
		t.Fatal("the chart renders no agent DaemonSet for its default pool")
	}
	e, devices := kubetest.StartWithDevices(t, 1, 4, "")
	install(t, e, objs, "ServiceAccount/allot-agent", "ClusterRole/allot-agent", "ClusterRoleBinding/allot-agent",
		"Role/allot-agent-heartbeat", "RoleBinding/allot-agent-heartbeat",
		"ValidatingAdmissionPolicy/allot-agent-own-node", "ValidatingAdmissionPolicyBinding/allot-agent-own-node",
		// The chart's, naming the agent's account as the one that records devices.
		"ValidatingAdmissionPolicy/allot-pod-fields", "ValidatingAdmissionPolicyBinding/allot-pod-fields")
	rc := serviceAccount(e, "allot-agent")
	// As the token of the agent's pod on dgx-1 says (a bound token's node claim).
	rc.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {"dgx-1"}}
	if err := devices.RunAgents(e.Ctx, kubernetes.NewForConfigOrDie(rc), nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 4, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "train", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "the inventory and train's devices recorded", func() (bool, string) {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		p := e.Pods(t, "default")["train"]
		return n.Annotations[v1alpha1.AnnotationGPUInventory] != "" && p != nil && p.Annotations[v1alpha1.AnnotationGPUDevices] != "",
			fmt.Sprint(n.Annotations, p.Annotations)
	})
	held, _ := convertHeld(t, e, "train")
	patch := []byte(`{"metadata":{"annotations":{"allot.dev/sim-fail-gpu":"` + fmt.Sprint(held) + `"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the failure reported and train told", func() (bool, string) {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		ev := strings.Join(e.Events(t, "default", "train"), "\n")
		return n.Annotations[v1alpha1.AnnotationGPUUnhealthy] != "" && strings.Contains(ev, "GPUUnhealthy"), ev
	})
	// Its own node only: another Node, and a pod bound to it, are refused by the chart's
	// admission policy (RBAC alone cannot say "its own node").
	agentClient := kubernetes.NewForConfigOrDie(rc)
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	if _, err := e.Client.CoreV1().Nodes().Create(e.Ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	elsewhere := kubetest.PodSpec{Name: "elsewhere"}.Pod()
	elsewhere.Spec.NodeName, elsewhere.Spec.SchedulerName = "other", ""
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	note := []byte(`{"metadata":{"annotations":{"allot.dev/gpu-devices":"GPU-x"}}}`)
	e.WaitFor(t, "the admission policy in force", func() (bool, string) {
		_, err := agentClient.CoreV1().Nodes().Patch(e.Ctx, "other", "application/merge-patch+json", note, metav1.PatchOptions{})
		return err != nil && strings.Contains(err.Error(), "the allot agent may write only its own node and the pods on it (dgx-1)"), fmt.Sprint(err)
	})
	if _, err := agentClient.CoreV1().Pods("default").Patch(e.Ctx, "elsewhere", "application/merge-patch+json", note, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "only its own node") {
		t.Errorf("the agent of dgx-1 annotated a pod on another node: %v", err)
	}
	if err := agentClient.CoreV1().Pods("default").Delete(e.Ctx, "elsewhere", metav1.DeleteOptions{}); err == nil ||
		!strings.Contains(err.Error(), "only its own node") {
		t.Errorf("the agent of dgx-1 deleted a pod on another node: %v", err)
	}
	if _, err := agentClient.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent of dgx-1 may not annotate dgx-1: %v", err)
	}
	// Its heartbeat: its own node's Lease, renewed; another node's is refused.
	e.WaitFor(t, "dgx-1's agent Lease", func() (bool, string) {
		l, err := e.Client.CoordinationV1().Leases("allot-system").Get(e.Ctx, v1alpha1.AgentLeaseName("dgx-1"), metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil, fmt.Sprint(err)
	})
	fake := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName("other"), Namespace: "allot-system",
		Labels: map[string]string{v1alpha1.LabelAgentLease: "other"}}}
	if _, err := agentClient.CoordinationV1().Leases("allot-system").Create(e.Ctx, fake, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "only its own node") {
		t.Errorf("the agent of dgx-1 wrote node other's heartbeat: %v", err)
	}
	refused(t, e, rc,
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		authorizationv1.ResourceAttributes{Verb: "update", Resource: "pods", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"},
		authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Subresource: "status"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default"})
}

// convertHeld is the index of the device the kubelet gave a one-GPU pod.
func convertHeld(t *testing.T, e *kubetest.Env, pod string) (int, string) {
	t.Helper()
	n, err := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uuid := e.Pods(t, "default")[pod].Annotations[v1alpha1.AnnotationGPUDevices]
	for i, u := range strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ",") {
		if u == uuid {
			return i, uuid
		}
	}
	t.Fatalf("%s's device %s is not among the node's", pod, uuid)
	return -1, ""
}

// serveDashboardAs runs the dashboard's server with rc's identity on a loopback port until
// the test ends, and returns its base address.
func serveDashboardAs(t *testing.T, e *kubetest.Env, rc *rest.Config, opts dashboard.Options) string {
	t.Helper()
	srv, err := dashboard.New(rc, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(e.Ctx, ln) }()
	return "http://" + ln.Addr().String()
}

// httpGet answers a GET's status and body, with a bearer token when one is given (a
// request that got no answer: status 0 and the error).
func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSchedulerRoleAllocatesClaims runs the scheduler as the chart's ServiceAccount on a
// node that publishes its GPUs through DRA: a pod's claim from a template is allocated and
// reserved, and the pod runs. The account may not create, delete or free claims (the
// resource claim controller does), nor write ResourceSlices.
func TestSchedulerRoleAllocatesClaims(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.StartNodes(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 2, DRA: true})
	install(t, e, objs, "ServiceAccount/allot", "ClusterRole/allot", "ClusterRoleBinding/allot",
		"kube-system/Role/allot-leader-election", "kube-system/RoleBinding/allot-leader-election")
	rc := serviceAccount(e, "allot")
	if _, err := stack.LocalAs(e.Ctx, e.Cluster.Config, rc, e.Dir, "", scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 2, nil)
	e.ClaimTemplate(t, "two", kubetest.DeviceClaim(simnode.DRAClass, 2))
	e.MustPod(t, kubetest.PodSpec{Name: "train", Queue: "team-a", Claims: kubetest.FromTemplate("two")})
	e.WaitFor(t, "the pod runs on its allocated claim", func() (bool, string) {
		p := e.Pods(t, "default")["train"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase, " ", p.Status.Conditions)
	})
	refused(t, e, rc,
		authorizationv1.ResourceAttributes{Verb: "create", Group: "resource.k8s.io", Resource: "resourceclaims", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "delete", Group: "resource.k8s.io", Resource: "resourceclaims", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "update", Group: "resource.k8s.io", Resource: "resourceslices"})
}
