package dashboard

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

func queue(name, parent string, quota int32, allocated string) *v1alpha1.Queue {
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{Parent: parent, GPU: v1alpha1.GPUQuota{Quota: quota}}}
	q.Status.Allocated = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse(allocated)}
	return q
}

// A department's row comes before its projects and counts their workloads; a queue
// beyond its quota shows what it borrows.
func TestQueueTree(t *testing.T) {
	qs := []*v1alpha1.Queue{queue("research", "", 8, "6"), queue("vision", "research", 4, "5"), queue("nlp", "research", 4, "1"), queue("ops", "", 2, "0")}
	rows := queueTree(qs, map[string]int{"vision": 2, "nlp": 1}, map[string]int{"nlp": 3})
	var got []string
	for _, r := range rows {
		got = append(got, r.Name)
	}
	if want := []string{"ops", "research", "nlp", "vision"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if r := rows[1]; r.Running != 3 || r.Pending != 3 || r.Depth != 0 {
		t.Errorf("research: %+v, want its projects' 3 running and 3 pending", r)
	}
	if r := rows[3]; r.Borrowed != 1 || r.Depth != 1 {
		t.Errorf("vision: %+v, want 1 borrowed at depth 1", r)
	}
}

// The story of a gang reclaimed and resumed: its pods' steps of one kind are one step.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	ev := func(sec int, reason, msg string) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))}
	}
	steps := Timeline(inspect.Workload{Created: t0}, []corev1.Event{
		ev(1, "FailedScheduling", "needs 2 GPUs"), ev(1, "FailedScheduling", "needs 2 GPUs"),
		ev(5, "Scheduled", "a"), ev(5, "Scheduled", "b"),
		ev(9, "Evicted", "reclaimed by queue team-d"), ev(9, "Evicted", "reclaimed by queue team-d"),
		ev(20, "Scheduled", "a"), ev(20, "Scheduled", "b"),
	})
	want := []struct {
		what string
		pods int
	}{{"Submitted", 0}, {"Waiting", 2}, {"Started", 2}, {"Preempted", 2}, {"Resumed", 2}}
	if len(steps) != len(want) {
		t.Fatalf("steps %+v", steps)
	}
	for i, w := range want {
		if steps[i].What != w.what || steps[i].Pods != w.pods {
			t.Errorf("step %d: %+v, want %s of %d pods", i, steps[i], w.what, w.pods)
		}
	}
}

// A notebook suspended for being idle and resumed: stopped, then resumed, not started anew.
func TestTimelineOfAnIdleNotebook(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	ev := func(sec int, reason, msg string) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))}
	}
	steps := Timeline(inspect.Workload{Created: t0}, []corev1.Event{
		ev(1, "Scheduled", "nb-0"), ev(7300, "IdleTimeout", "suspended after 2h"), ev(9000, "Scheduled", "nb-0"),
	})
	var what []string
	for _, s := range steps {
		what = append(what, s.What)
	}
	if strings.Join(what, ",") != "Submitted,Started,Stopped,Resumed" {
		t.Fatalf("steps %v", what)
	}
}

// Two nodes; dgx-1's agent reports, dgx-2's does not:
//
//	dgx-1  GPU 0: nb (whole, 0%)   GPU 1: train (97%)   GPU 2: half-a + half-b (2%)   GPU 3: free (0%)
//	dgx-2  GPU 0: other            GPU 1: free          (no report)
//
// Idle allocated: GPU 0 and GPU 2 of dgx-1, 2 GPUs; a free GPU is idle, not idle-allocated.
func TestIdleAllocated(t *testing.T) {
	node := func(name string, gpus int64, report string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		n.Status.Allocatable = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
		if report != "" {
			n.Annotations[v1alpha1.AnnotationGPUUtilization] = report
		}
		return n
	}
	pod := func(name, node, gpus, share string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Annotations: map[string]string{v1alpha1.AnnotationGPUs: gpus}}, Spec: corev1.PodSpec{NodeName: node}}
		p.Status.Phase = corev1.PodRunning
		if share != "" {
			p.Annotations[v1alpha1.AnnotationGPUShare] = share
		}
		return p
	}
	st := Build(Input{Nodes: []*corev1.Node{node("dgx-1", 4, "0,97,2,0"), node("dgx-2", 2, "")},
		Objects: inspect.Objects{Pods: []*corev1.Pod{pod("nb", "dgx-1", "0", ""), pod("train", "dgx-1", "1", ""), pod("half-a", "dgx-1", "2", "500"),
			pod("half-b", "dgx-1", "2", "500"), pod("other", "dgx-2", "0", "")}}})
	if tt := st.Totals; tt.IdleAllocated != 2 || tt.Reporting != 4 || tt.Allocated != 4 || tt.Idle != 2 {
		t.Fatalf("totals %+v, want 2 idle-allocated of 4 allocated, 4 GPUs reporting, 2 idle", tt)
	}
	if u := st.Nodes[0].GPUs[1].Utilization; u == nil || *u != 97 {
		t.Errorf("dgx-1 GPU 1 utilisation %v, want 97", u)
	}
	if u := st.Nodes[1].GPUs[0].Utilization; u != nil {
		t.Errorf("dgx-2 has no report, yet GPU 0 shows %d%%", *u)
	}
	// A report that does not cover every device is not believed.
	st = Build(Input{Nodes: []*corev1.Node{node("dgx-1", 4, "0,97")}, Objects: inspect.Objects{Pods: []*corev1.Pod{pod("nb", "dgx-1", "0", "")}}})
	if st.Totals.Reporting != 0 || st.Totals.IdleAllocated != 0 {
		t.Errorf("a 2-device report for 4 GPUs counted: %+v", st.Totals)
	}
}
