package dashboard

import (
	"slices"
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
