package idle

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	allotfake "github.com/allot-dev/allot/kube/client/clientset/versioned/fake"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/stores"
)

// notebook is a StatefulSet of one with its running pod on dgx-1's GPU index.
func notebook(name, index string) (*appsv1.StatefulSet, *corev1.Pod) {
	one := int32(1)
	labels := map[string]string{v1alpha1.LabelQueue: "team-a"}
	st := &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("sts-" + name), Labels: labels},
		Spec:       appsv1.StatefulSetSpec{Replicas: &one, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}}}}
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: "ml", UID: types.UID("pod-" + name),
		Labels:          map[string]string{v1alpha1.LabelQueue: "team-a", v1alpha1.LabelClass: v1alpha1.ClassInteractive},
		Annotations:     map[string]string{v1alpha1.AnnotationGPUs: index},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: st.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "dgx-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	return st, p
}

// startStores is the controller's stores as informers of its own over these clients, as a
// controller run without the scheduler reads them.
func startStores(t *testing.T, client kubernetes.Interface, allot versioned.Interface) stores.Source {
	t.Helper()
	src, err := stores.Start(t.Context(), client, allot)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// simulated is what the embedded cluster believes: a node labelled simulated reports on
// itself (kube/stack.LocalWith).
func simulated(n *corev1.Node) bool { return n.Labels[v1alpha1.LabelSimulated] == "true" }

// TestStepStopsAtTheTimeoutByItsClock: with the controller's clock moved by hand, a
// notebook whose GPU reads 0% is marked idle from the first look, left alone at 1h59m,
// and suspended at 2h with an Event naming the time, the threshold and the policy; a
// notebook whose GPU reads 90% is never touched.
func TestStepStopsAtTheTimeoutByItsClock(t *testing.T) {
	ctx := t.Context()
	idleSet, idlePod := notebook("nb-idle", "0")
	busySet, busyPod := notebook("nb-busy", "1")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Labels: map[string]string{v1alpha1.LabelSimulated: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "0,90"}}}
	client := k8sfake.NewSimpleClientset(node, idleSet, idlePod, busySet, busyPod)
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: v1alpha1.QueueSpec{IdleTimeout: &v1alpha1.IdleTimeout{Interactive: &metav1.Duration{Duration: 2 * time.Hour}}}}
	allot := allotfake.NewSimpleClientset(q)
	dyn := dynamicfake.NewSimpleDynamicClient(scheme.Scheme, idleSet.DeepCopy(), busySet.DeepCopy())
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, meta.RESTScopeNamespace)
	rec := record.NewFakeRecorder(10)
	clk := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	sets := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}).Namespace("ml")
	get := func(name string) (int64, map[string]string) {
		t.Helper()
		u, err := sets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var st appsv1.StatefulSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &st); err != nil {
			t.Fatal(err)
		}
		return int64(*st.Spec.Replicas), st.Annotations
	}

	// A real cluster's controller believes no Node's own reading, labelled or not: only
	// an agent's fresh Lease.
	src := startStores(t, client, allot)
	if err := New(client, dyn, allot, Options{Now: clk.now, Recorder: rec, Mapper: mapper, Stores: src}).Step(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ann := get("nb-idle"); ann[inspect.AnnotationIdleSince] != "" {
		t.Fatalf("a real cluster's controller believed the node's own reading: idle since %q", ann[inspect.AnnotationIdleSince])
	}
	c := New(client, dyn, allot, Options{Now: clk.now, Recorder: rec, Mapper: mapper, Simulated: simulated, Stores: src})
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ann := get("nb-idle"); ann[inspect.AnnotationIdleSince] != "2026-01-01T09:00:00Z" {
		t.Fatalf("idle since %q, want the first look", ann[inspect.AnnotationIdleSince])
	}
	clk.step(2*time.Hour - time.Minute)
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := get("nb-idle"); n != 1 {
		t.Fatal("suspended before its timeout")
	}
	clk.step(time.Minute)
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	n, ann := get("nb-idle")
	if n != 0 || ann[inspect.AnnotationSuspendedReplicas] != "1" || !strings.Contains(ann[inspect.AnnotationIdleSuspended], `"threshold":5`) ||
		ann[inspect.AnnotationIdleSince] != "" {
		t.Fatalf("at 2h: replicas %d, annotations %v", n, ann)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "IdleTimeout suspended after 2h with every GPU it held under 5% utilisation: queue team-a's idleTimeout.interactive is 2h") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no Event")
	}
	if n, ann := get("nb-busy"); n != 1 || len(ann) != 0 {
		t.Fatalf("the busy notebook: replicas %d, annotations %v", n, ann)
	}
}

// fixture is a controller over these objects, with team-a's interactive timeout of 2h and
// a mapper that knows StatefulSets and RayClusters, so that nothing but the controller's
// own rule keeps it from stopping either.
func fixture(t *testing.T, util string, objs ...runtime.Object) (*Controller, *clock, *record.FakeRecorder, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Labels: map[string]string{v1alpha1.LabelSimulated: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: util}}}
	var typed []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); !ok {
			typed = append(typed, o)
		}
	}
	client := k8sfake.NewSimpleClientset(append(typed, node)...)
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: v1alpha1.QueueSpec{IdleTimeout: &v1alpha1.IdleTimeout{Interactive: &metav1.Duration{Duration: 2 * time.Hour}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme.Scheme,
		map[schema.GroupVersionResource]string{rayClusters: "RayClusterList"}, objs...)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayCluster"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, meta.RESTScopeNamespace)
	rec := record.NewFakeRecorder(10)
	clk := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	allot := allotfake.NewSimpleClientset(q)
	c := New(client, dyn, allot, Options{Now: clk.now, Recorder: rec, Mapper: mapper, Simulated: simulated,
		Stores: startStores(t, client, allot)})
	return c, clk, rec, dyn
}

var rayClusters = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}

// steps looks at 0 and after 2h, and once more a tick later.
func steps(t *testing.T, c *Controller, clk *clock) {
	t.Helper()
	for _, d := range []time.Duration{0, 2 * time.Hour, time.Minute} {
		clk.step(d)
		if err := c.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func replicas(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) int64 {
	t.Helper()
	u, err := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}).Namespace("ml").
		Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	return n
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestStepJudgesByThePodsLabels: a tenant who relabels a notebook's StatefulSet as a
// training job of another queue (allot.dev/type, allot.dev/queue on the owner, theirs to
// write) still has it suspended by team-a's policy, which its pods' admitted labels name;
// a StatefulSet whose pods disagree on their class (its template relabelled under
// OnDelete) is held to the strictest of its pods' policies, not let off: suspended too.
func TestStepJudgesByThePodsLabels(t *testing.T) {
	st, p := notebook("nb", "0")
	st.Labels = map[string]string{v1alpha1.LabelQueue: "team-b", "allot.dev/type": "train"}
	odd, p1 := notebook("odd", "1")
	p2 := p1.DeepCopy()
	p2.Name, p2.UID, p2.Labels[v1alpha1.LabelClass] = "odd-1", "pod-odd-1", v1alpha1.ClassInference
	c, clk, rec, dyn := fixture(t, "0,0", st, p, odd, p1, p2)
	steps(t, c, clk)
	if n := replicas(t, dyn, "nb"); n != 0 {
		t.Fatalf("the relabelled notebook has %d replicas after 2h idle, want suspended", n)
	}
	if n := replicas(t, dyn, "odd"); n != 0 {
		t.Fatalf("the StatefulSet whose pods disagree has %d replicas after 2h idle, want suspended by its interactive pod's policy", n)
	}
	told := false
	for _, e := range events(rec) {
		told = told || strings.Contains(e, "suspended after 2h")
	}
	if !told {
		t.Fatal("no Event says why the notebooks were suspended")
	}
}

// TestStepOnlyReportsARayCluster: a RayCluster (maybe a RayJob's, whose work suspending
// it would lose) whose pods are an idle notebook's is never suspended; it is told once
// per idle spell, not at every look.
func TestStepOnlyReportsARayCluster(t *testing.T) {
	yes := true
	rc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": "rc", "namespace": "ml", "uid": "rc-uid"}, "spec": map[string]any{}}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rc-head", Namespace: "ml", UID: "pod-rc",
		Labels:          map[string]string{v1alpha1.LabelQueue: "team-a", v1alpha1.LabelClass: v1alpha1.ClassInteractive},
		Annotations:     map[string]string{v1alpha1.AnnotationGPUs: "0"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "rc-uid", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "dgx-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	c, clk, rec, dyn := fixture(t, "0", rc, p)
	steps(t, c, clk)
	u, err := dyn.Resource(rayClusters).Namespace("ml").Get(context.Background(), "rc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s, found, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); found || s {
		t.Fatalf("the RayCluster's spec.suspend was set: %v", u.Object["spec"])
	}
	var told int
	for _, e := range events(rec) {
		if strings.Contains(e, "IdleTimeout") && !strings.Contains(e, "IdleTimeoutNotStoppable") {
			t.Fatalf("event %q", e)
		}
		if strings.Contains(e, "IdleTimeoutNotStoppable") {
			told++
			if !strings.Contains(e, "RayCluster") {
				t.Fatalf("event %q does not name the kind", e)
			}
		}
	}
	if told != 1 {
		t.Fatalf("told %d times, want once", told)
	}
}

// TestStepWritesNoPod: a bare notebook pod idle past its timeout is told by an Event, once,
// and nothing is written on it (the scheduler's role may not patch pods).
func TestStepWritesNoPod(t *testing.T) {
	_, p := notebook("bare", "0")
	p.OwnerReferences = nil
	c, clk, rec, dyn := fixture(t, "0", p)
	steps(t, c, clk)
	for _, a := range dyn.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Fatalf("the controller wrote: %v", a)
		}
	}
	if ev := events(rec); len(ev) != 1 || !strings.Contains(ev[0], "a bare Pod cannot be suspended") {
		t.Fatalf("events %q, want one saying the bare pod cannot be suspended", ev)
	}
}
