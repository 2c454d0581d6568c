package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/engine"
)

// A job placed where pods are leaving keeps the reason it was given while the pod that
// reason names is still leaving, wherever the cycle placed it this time: each change is a
// status write and an Event per pod. Once that pod is gone it names another, one still
// leaving.
func TestWaitingReasonStaysWhileItsPodLeaves(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-0", Namespace: "default", UID: types.UID("r-0")}}
	idx := &index{jobs: map[engine.JobID][]*corev1.Pod{"default/r": {pod}}}
	s := &Scheduler{reasons: map[types.UID]string{}}
	said := "placed on n1, waiting for default/v-1 to leave it (terminating)"
	now := []string{"placed on n2, waiting for default/v-7 to leave it (terminating)", "placed on n3, waiting for default/v-9 to leave it (terminating)"}

	if got := s.stillWaitingFor("default/r", now, idx, map[string]bool{"default/v-7": true, "default/v-9": true}); got != now[1] {
		t.Errorf("first told %q, want the last placement's %q", got, now[1])
	}
	s.reasons[pod.UID] = said
	if got := s.stillWaitingFor("default/r", now, idx, map[string]bool{"default/v-1": true, "default/v-7": true, "default/v-9": true}); got != said {
		t.Errorf("told %q while default/v-1 still leaves, want it kept: %q", got, said)
	}
	if got := s.stillWaitingFor("default/r", now, idx, map[string]bool{"default/v-7": true, "default/v-9": true}); got != now[1] {
		t.Errorf("told %q once default/v-1 is gone, want %q", got, now[1])
	}
	s.reasons[pod.UID] = "queue q is at its limit"
	if got := s.stillWaitingFor("default/r", now, idx, map[string]bool{"default/v-7": true}); got != now[1] {
		t.Errorf("told %q after another kind of reason, want %q", got, now[1])
	}
}
