package scheduler

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// startCounting runs a scheduler with a cycle at least every interval, until the test
// ends, and returns how many cycles it has run so far.
func (e *env) startCounting(t *testing.T, interval time.Duration) (cycles func() uint64) {
	t.Helper()
	m := NewMetrics()
	t.Cleanup(e.run(t, Options{Interval: interval, Metrics: m}))
	return func() uint64 {
		var d dto.Metric
		if err := m.cycle.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
}

// A Queue's status and a waiting pod's are the scheduler's own record (its accounting,
// its reason): writing them wakes no cycle (each write would otherwise bring one more:
// under a stream of binds a queue's comes every second, and a backlog that cannot fit
// has one per pod), while a change of the queue or the pod itself does.
//
//	dgx-0  8 GPUs     team-a  quota 8    huge  16 GPUs: never fits, waits with a reason
//	periodic cycle an hour away: only news wakes the scheduler
func TestStatusWritesDoNotWake(t *testing.T) {
	e := newEnv(t, 1, 8)
	e.queue(t, "team-a", 8)
	e.pod(t, "huge", "team-a", 16, nil)
	cycles := e.startCounting(t, time.Hour)
	get := func() *unstructured.Unstructured {
		q, err := e.dyn.Resource(queuesGVR).Get(e.ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	e.waitFor(t, "the scheduler's first status of team-a and huge's reason", func() (bool, string) {
		q := get()
		_, ok, _ := unstructured.NestedMap(q.Object, "status", "fairShare")
		p := e.pods(t)["huge"]
		return ok && cycles() > 0 && len(p.Status.Conditions) > 0, fmt.Sprintf("%d cycles, status %v, huge %v", cycles(), q.Object["status"], p.Status.Conditions)
	})
	// Settled: no cycle for half a second.
	var before uint64
	e.waitFor(t, "no cycle for 500ms", func() (bool, string) {
		before = cycles()
		time.Sleep(500 * time.Millisecond)
		return cycles() == before, fmt.Sprintf("%d cycles", cycles())
	})

	// Another writer of the status (a former leader, kubectl edit --subresource status).
	q := get()
	if err := unstructured.SetNestedField(q.Object, int64(3), "status", "pending"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dyn.Resource(queuesGVR).UpdateStatus(e.ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// And of the waiting pod's (a former leader's reason, or kube-scheduler's).
	p := e.pods(t)["huge"]
	p.Status.Conditions[0].Message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
	if _, err := e.client.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := cycles(); n != before {
		t.Fatalf("status writes woke %d cycle(s)", n-before)
	}

	// The quota halved: that is news.
	q = get()
	if err := unstructured.SetNestedField(q.Object, int64(4), "spec", "gpu", "quota"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dyn.Resource(queuesGVR).Update(e.ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "a cycle after the quota changed", func() (bool, string) {
		return cycles() > before, fmt.Sprintf("%d cycles", cycles())
	})
	// A change of its labels wakes one too: only the status is the scheduler's own.
	before = cycles()
	q = get()
	q.SetLabels(map[string]string{"team": "vision"})
	if _, err := e.dyn.Resource(queuesGVR).Update(e.ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "a cycle after a label changed", func() (bool, string) {
		return cycles() > before, fmt.Sprintf("%d cycles", cycles())
	})
	// The waiting pod's labels too.
	before = cycles()
	p = e.pods(t)["huge"]
	p.Labels["tier"] = "batch"
	if _, err := e.client.CoreV1().Pods("default").Update(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "a cycle after the pod's label changed", func() (bool, string) {
		return cycles() > before, fmt.Sprintf("%d cycles", cycles())
	})
}

// A node update wakes the scheduler unless it only carries the occupancy or utilisation
// reports, which the engine does not read.
func TestReportOnlyNodeUpdates(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", ResourceVersion: "1",
		Labels:      map[string]string{v1alpha1.LabelGPUProduct: "H100"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUUIDs: "GPU-a,GPU-b", v1alpha1.AnnotationGPUUtilization: "0,0"}}}
	for _, c := range []struct {
		name   string
		change func(n *corev1.Node)
		report bool
	}{
		{"utilisation report", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationGPUUtilization] = "95,0" }, true},
		{"occupancy written", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationOccupancy] = "{}" }, true},
		{"utilisation report gone", func(n *corev1.Node) { delete(n.Annotations, v1alpha1.AnnotationGPUUtilization) }, true},
		{"GPU UUIDs changed", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationGPUUUIDs] = "GPU-a" }, false},
		{"label changed", func(n *corev1.Node) { n.Labels[v1alpha1.LabelNodePool] = "big" }, false},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false},
		{"not ready", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, false},
	} {
		n := base.DeepCopy()
		n.ResourceVersion = "2"
		c.change(n)
		if got := reportOnly(base, n); got != c.report {
			t.Errorf("%s: reportOnly %v, want %v", c.name, got, c.report)
		}
	}
}
