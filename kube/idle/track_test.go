package idle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// clock is a fake clock the tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time                 { return c.t }
func (c *clock) step(d time.Duration) time.Time { c.t = c.t.Add(d); return c.t }

func node(name, util string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: util}}}
}

func pod(nodeName, gpus, share string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{v1alpha1.AnnotationGPUs: gpus}},
		Spec: corev1.PodSpec{NodeName: nodeName}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if share != "" {
		p.Annotations[v1alpha1.AnnotationGPUShare] = share
	}
	return p
}

// look judges one pod's GPUs against the nodes' reports and records it at now.
func look(t *testing.T, tr *Tracker, now time.Time, p *corev1.Pod, trusted bool, nodes ...*corev1.Node) (State, time.Duration) {
	t.Helper()
	r := Readings{}
	for _, n := range nodes {
		if got, ok := inspect.Utilization(n, nil, now, trusted); ok {
			r.add(n.Name, got)
		}
	}
	devs, ok := PodDevices(p, nil)
	s := Judge(r, devs, ok, v1alpha1.DefaultIdleThreshold)
	return s, tr.Observe("ns/StatefulSet/nb", s, now)
}

// TestIdleSinceTheFirstLowReport: idle time counts from the first report under the
// threshold; one report above it starts the count again from zero.
func TestIdleSinceTheFirstLowReport(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	tr := NewTracker()
	p := pod("n1", "0,1", "")
	if s, d := look(t, tr, c.now(), p, true, node("n1", "0,3,90")); s != Idle || d != 0 {
		t.Fatalf("first low report: %v idle %s, want idle for 0s", s, d)
	}
	if _, d := look(t, tr, c.step(90*time.Minute), p, true, node("n1", "4,0,90")); d != 90*time.Minute {
		t.Fatalf("after 90m low: idle %s", d)
	}
	// One of its two GPUs busy once: the count starts again.
	if s, d := look(t, tr, c.step(time.Minute), p, true, node("n1", "0,55,90")); s != Busy || d != 0 {
		t.Fatalf("a GPU at 55%%: %v idle %s, want busy", s, d)
	}
	look(t, tr, c.step(time.Minute), p, true, node("n1", "0,0,90"))
	if _, d := look(t, tr, c.step(10*time.Minute), p, true, node("n1", "0,0,90")); d != 10*time.Minute {
		t.Fatalf("idle again for 10m, got %s", d)
	}
	// At the threshold is not under it.
	if s, _ := look(t, tr, c.step(time.Minute), p, true, node("n1", "5,0,0")); s != Busy {
		t.Fatalf("a GPU at exactly 5%%: %v, want busy", s)
	}
}

// TestUnknownIsNeverIdle: a GPU with no live report (no agent, a stale agent, a malformed
// report, a device beyond the report) is not idle, and neither is a workload holding it.
func TestUnknownIsNeverIdle(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	p := pod("n1", "0,1", "")
	for name, tc := range map[string]struct {
		nodes   []*corev1.Node
		trusted bool
	}{
		"no report":            {nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, trusted: true},
		"agent's Lease lapsed": {nodes: []*corev1.Node{node("n1", "0,0")}, trusted: false},
		"not a percentage":     {nodes: []*corev1.Node{node("n1", "0,x")}, trusted: true},
		"above 100":            {nodes: []*corev1.Node{node("n1", "0,101")}, trusted: true},
		"one device reported":  {nodes: []*corev1.Node{node("n1", "0")}, trusted: true},
		"another node's":       {nodes: []*corev1.Node{node("n2", "0,0")}, trusted: true},
		"a device unread":      {nodes: []*corev1.Node{node("n1", "0,-1")}, trusted: true},
	} {
		tr := NewTracker()
		for range 3 {
			s, d := look(t, tr, c.step(time.Hour), p, tc.trusted, tc.nodes...)
			if s != Unknown || d != 0 {
				t.Fatalf("%s: %v idle %s, want unknown and never idle", name, s, d)
			}
		}
	}
	// The agent could not read device 1 (-1): a pod on device 0 alone is judged by its
	// reading, and is idle.
	if s, _ := look(t, NewTracker(), c.now(), pod("n1", "0", ""), true, node("n1", "0,-1")); s != Idle {
		t.Fatalf("a pod on a read device beside an unread one: %v, want idle", s)
	}
	// A pod holding a MIG instance is not known by device index: unknown too.
	m := pod("n1", "0", "")
	m.Annotations[v1alpha1.AnnotationMIGInstances] = "0/1g.10gb@0"
	if devs, ok := PodDevices(m, nil); ok || Judge(Readings{{"n1", 0}: 0}, devs, ok, 5) != Unknown {
		t.Fatal("a MIG pod's GPU was judged")
	}
}

// TestSharedDeviceIsJudgedWhole: a fraction on a GPU another pod keeps busy is not idle
// (the report is the device's, not the pod's); on a GPU nobody uses, it is.
func TestSharedDeviceIsJudgedWhole(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	tr := NewTracker()
	half := pod("n1", "2", "500")
	// The neighbour on device 2 keeps it at 40%.
	for range 3 {
		if s, d := look(t, tr, c.step(time.Hour), half, true, node("n1", "0,0,40,0")); s != Busy || d != 0 {
			t.Fatalf("half a GPU its neighbour keeps at 40%%: %v idle %s, want busy", s, d)
		}
	}
	// The neighbour stops: the whole device is idle, so is the half.
	look(t, tr, c.step(time.Minute), half, true, node("n1", "0,0,0,0"))
	if s, d := look(t, tr, c.step(time.Hour), half, true, node("n1", "0,0,1,0")); s != Idle || d != time.Hour {
		t.Fatalf("half of an idle GPU: %v idle %s, want an hour", s, d)
	}
}

// TestDevicesTheKubeletGave: whole GPUs are the ones the agent recorded the kubelet gave,
// not the scheduler's preference; a pod not running holds none.
func TestDevicesTheKubeletGave(t *testing.T) {
	p := pod("n1", "0", "")
	p.Annotations[v1alpha1.AnnotationGPUDevices] = "GPU-c"
	devs, ok := PodDevices(p, []string{"GPU-a", "GPU-b", "GPU-c"})
	if !ok || len(devs) != 1 || devs[0] != (Device{"n1", 2}) {
		t.Fatalf("devices %v %v, want n1's device 2", devs, ok)
	}
	p.Status.Phase = corev1.PodPending
	if devs, ok := PodDevices(p, nil); !ok || len(devs) != 0 || Judge(Readings{}, devs, ok, 5) != NoGPUs {
		t.Fatalf("a pending pod holds %v", devs)
	}
}
