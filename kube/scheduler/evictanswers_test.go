package scheduler

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// What the API server answers an eviction decides whether the pod is taken for leaving
// (its devices free to the engine, its queue no longer charged) until the informer shows
// it: accepted, or answered Conflict for a pod that is gone, yes; Conflict for the pod
// still running (a contended PodDisruptionBudget), a budget's 429 or another error, no.
func TestEvictionAnswersDecideWhatIsAssumed(t *testing.T) {
	pdb := schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}
	for _, c := range []struct {
		name        string
		answer      error
		podThere    bool
		wantAssumed bool
	}{
		{"accepted", nil, true, true},
		{"conflict, the pod still running", apierrors.NewConflict(pdb, "budget", nil), true, false},
		{"conflict, the pod gone", apierrors.NewConflict(pdb, "budget", nil), false, true},
		{"not found", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a-0"), false, true},
		{"a budget's 429", apierrors.NewTooManyRequests("the disruption budget does not allow it", 10), true, false},
		{"another error", apierrors.NewInternalError(context.DeadlineExceeded), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-0", Namespace: "default", UID: types.UID("uid-a-0")}}
			var objs []runtime.Object
			if c.podThere {
				objs = append(objs, p.DeepCopy())
			}
			client := fake.NewClientset(objs...)
			client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				return true, nil, c.answer
			})
			s := &Scheduler{client: client, recorder: record.NewFakeRecorder(10), opts: Options{Now: time.Now},
				evicted: map[types.UID]time.Time{p.UID: time.Now()}, evicting: map[types.UID]time.Time{p.UID: time.Now()}}
			s.carryOut(context.Background(), []eviction{{p: p, why: "reclaimed by queue b"}})
			if _, assumed := s.evicted[p.UID]; assumed != c.wantAssumed {
				t.Errorf("taken for leaving: %v, want %v", assumed, c.wantAssumed)
			}
		})
	}
}
