package metricsapi

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/stores"
)

// TestPodUtilization: a pod's value is the mean of its devices' readings, from its node's
// agent's Lease while the agent renews it, else from the node (a simulated node's kubelet);
// a stale agent reading, an unreadable device, a pod without devices or not running count
// for nothing.
func TestPodUtilization(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "10,20,30,40",
		v1alpha1.AnnotationGPUUUIDs: "GPU-a,GPU-b,GPU-c,GPU-d"}}}
	lease := func(renewed time.Time, util string) *coordinationv1.Lease {
		secs := int32(40)
		at := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: util}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &at, LeaseDurationSeconds: &secs}}
	}
	pod := func(indices string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationGPUs: indices}}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, c := range []struct {
		name  string
		lease *coordinationv1.Lease
		pod   *corev1.Pod
		want  float64
		ok    bool
	}{
		{"the node's, devices 1 and 3", nil, pod("1,3", corev1.PodRunning), 30, true},
		{"the live agent's over the node's", lease(now.Add(-10*time.Second), "90,80,70,60"), pod("0,1", corev1.PodRunning), 85, true},
		{"a stale agent's is not taken", lease(now.Add(-time.Minute), "90,80,70,60"), pod("0", corev1.PodRunning), 10, true},
		{"a device its agent could not read is left out", lease(now, "90,-1,70,60"), pod("0,1", corev1.PodRunning), 90, true},
		{"a report not all percentages says nothing", lease(now, "90,x,70,60"), pod("0", corev1.PodRunning), 0, false},
		{"nor one of fractions", lease(now, "90.5,80,70,60"), pod("0", corev1.PodRunning), 0, false},
		{"a device the node does not have", nil, pod("7", corev1.PodRunning), 0, false},
		{"no devices", nil, pod("", corev1.PodRunning), 0, false},
		{"the devices the kubelet gave, as the agent recorded them", nil, recorded(pod("0", corev1.PodRunning), "GPU-d, GPU-c"), 35, true},
		{"a record of devices the node does not list: the bind's", nil, recorded(pod("0", corev1.PodRunning), "GPU-z"), 10, true},
		{"not running", nil, pod("0", corev1.PodPending), 0, false},
		{"a fraction: its device's reading is its neighbours' too", nil, shared(pod("1", corev1.PodRunning)), 0, false},
	} {
		got, ok := podUtilization(c.pod, heldDevices(c.pod, node), deviceUtilization(node, c.lease, now, true))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
	// A node an agent marked is read from the agent's Lease alone: what an older agent left
	// on the Node stands for nobody once the Lease goes stale.
	marked := node.DeepCopy()
	marked.Annotations[v1alpha1.AnnotationAgent] = "v1"
	if got := deviceUtilization(marked, lease(now.Add(-time.Minute), "90,80,70,60"), now, true); got != nil {
		t.Errorf("a marked node with a stale Lease reads %v, want nothing", got)
	}
	// On a real cluster (no node reports on itself) a Node's own annotation is no reading.
	if got := deviceUtilization(node, nil, now, false); got != nil {
		t.Errorf("a real cluster's node without an agent reads %v, want nothing", got)
	}
	if got := deviceUtilization(node, lease(now, "90,80,70,60"), now, false); fmt.Sprint(got) != "[90 80 70 60]" {
		t.Errorf("a real cluster's node with a live agent reads %v, want the agent's", got)
	}
}

func shared(p *corev1.Pod) *corev1.Pod {
	p.Annotations[v1alpha1.AnnotationGPUShare] = "50"
	return p
}

// TestDeploymentValueHoldsWithoutReadings: a Deployment's value is the mean of its pods
// that have run past the warm-up with a reading; with replicas asked for and none such
// (pending, loading its model, its agent gone) there is no value, so that its autoscaler
// holds instead of scaling it to zero; at rest at zero replicas the value is 0.
func TestDeploymentValueHoldsWithoutReadings(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "0,0"}}}
	podAt := func(name string, started time.Time) *corev1.Pod {
		st := metav1.NewTime(started)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "svc"},
			Annotations: map[string]string{v1alpha1.AnnotationGPUs: "0"}},
			Spec: corev1.PodSpec{NodeName: "dgx-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &st}}
	}
	value := func(replicas int32, pods ...*corev1.Pod) (float64, error) {
		pi := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, p := range pods {
			_ = pi.Add(p)
		}
		ni := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		_ = ni.Add(node)
		di := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		_ = di.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: "ns"},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "svc"}}}})
		li := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		st := stores.Stores{Pods: corelisters.NewPodLister(pi), Nodes: corelisters.NewNodeLister(ni),
			Leases: coordinationlisters.NewLeaseLister(li).Leases(v1alpha1.SystemNamespace)}
		s := &Server{stores: func() (stores.Stores, bool) { return st, true }, deployments: appslisters.NewDeploymentLister(di),
			now: func() time.Time { return now }, Warmup: time.Minute,
			Simulated: func(*corev1.Node) bool { return true }} // the node reports on itself, as a simulated one does
		v, err := s.deploymentValue("ns", "svc")
		if err != nil {
			return 0, err
		}
		return float64(v[0].Value.MilliValue()) / 1000, nil
	}
	if v, err := value(1, podAt("loading", now.Add(-10*time.Second))); err == nil {
		t.Errorf("a pod 10s into a 1m warm-up: value %v, want none", v)
	}
	if v, err := value(1); err == nil {
		t.Errorf("one replica asked, no pod yet: value %v, want none", v)
	}
	if v, err := value(1, shared(podAt("half", now.Add(-time.Hour)))); err == nil {
		t.Errorf("a fraction only: value %v, want none", v)
	}
	if v, err := value(1, podAt("idle", now.Add(-time.Hour))); err != nil || v != 0 {
		t.Errorf("a pod idle past its warm-up: %v %v, want 0", v, err)
	}
	if v, err := value(0); err != nil || v != 0 {
		t.Errorf("at rest at zero: %v %v, want 0", v, err)
	}
}

func recorded(p *corev1.Pod, uuids string) *corev1.Pod {
	p.Annotations[v1alpha1.AnnotationGPUDevices] = uuids
	return p
}
