package idle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// A workload whose pods disagree on class or queue is held to the strictest policy among
// them, never let off: a notebook StatefulSet whose template was relabelled train under
// OnDelete, one pod of each, is judged as the interactive notebook it still is.
func TestMixedPodsAreJudgedByTheStrictest(t *testing.T) {
	pod := func(uid, class, queue string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Labels: map[string]string{v1alpha1.LabelClass: class, v1alpha1.LabelQueue: queue}}}
	}
	pods := map[string]*corev1.Pod{"a": pod("a", v1alpha1.ClassInteractive, "team-a"), "b": pod("b", v1alpha1.ClassTrain, "team-a"),
		"c": pod("c", v1alpha1.ClassInference, "team-b")}
	w := &inspect.Workload{Kind: "StatefulSet", Pods: []inspect.Pod{{UID: "a"}, {UID: "b"}}}
	pols := map[string]policy{
		"team-a": {queue: "team-a", threshold: 5, timeout: map[string]time.Duration{v1alpha1.ClassInteractive: 2 * time.Hour}},
		"team-b": {queue: "team-b", threshold: 5, timeout: map[string]time.Duration{v1alpha1.ClassInference: 30 * time.Minute}},
	}
	if class, pol, ok := strictest(podLabels(w, pods), pols); !ok || class != v1alpha1.ClassInteractive || pol.queue != "team-a" {
		t.Errorf("interactive and train pods: judged %q in %q (%v), want interactive in team-a", class, pol.queue, ok)
	}
	w.Pods = append(w.Pods, inspect.Pod{UID: "c"})
	if class, pol, _ := strictest(podLabels(w, pods), pols); class != v1alpha1.ClassInference || pol.queue != "team-b" {
		t.Errorf("with an inference pod of team-b (30m): judged %q in %q, want the shorter timeout's", class, pol.queue)
	}
	w.Pods = []inspect.Pod{{UID: "b"}}
	if _, _, ok := strictest(podLabels(w, pods), pols); ok {
		t.Error("a training pod alone was judged")
	}
}

// A notebook on a MIG instance is never judged idle (no agent reads an instance's
// utilisation): its queue and the notebook are told so, once, rather than left to believe
// the queue's idle timeout holds it.
func TestUnmeasuredGPUsAreSaid(t *testing.T) {
	st, p := notebook("nb-mig", "0")
	p.Annotations[v1alpha1.AnnotationMIGInstances] = "GPU-x@0"
	c, clk, rec, dyn := fixture(t, "0", st, p)
	steps(t, c, clk)
	if n := replicas(t, dyn, "nb-mig"); n != 1 {
		t.Fatalf("the MIG notebook has %d replicas, want untouched (its GPU is not measured)", n)
	}
	var told []string
	for _, e := range events(rec) {
		if strings.Contains(e, ReasonIdleNotMeasured) {
			told = append(told, e)
		}
	}
	if len(told) != 2 || !strings.Contains(told[0], "queue team-a's idleTimeout.interactive does not apply to StatefulSet ml/nb-mig: its GPUs are MIG instances") {
		t.Errorf("events %q, want one on the notebook and one on its queue, once", told)
	}
}
