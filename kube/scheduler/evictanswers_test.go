package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/engine"
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

// A cycle's evictions go a job at a time: every Event of a job's pods is written before any
// of them is evicted (a gang's eviction cut short is then readable on its running pods),
// and a job whose Events are written is evicted without waiting for the other jobs'
// Events. Here the last job's Events are answered only once some pod has been evicted:
// writing every Event of the cycle first never gets there.
//
//	victims: gang g (g-0, g-1, g-2; g-2's Event held until a-0 is evicted),
//	         solo a-0, solo b-0 (its Event held until a pod is evicted)
func TestEvictionsGoAJobAtATime(t *testing.T) {
	var planned []eviction
	var objs []runtime.Object
	for _, v := range []struct{ pod, job string }{{"g-0", "g"}, {"g-1", "g"}, {"g-2", "g"}, {"a-0", "a"}, {"b-0", "b"}} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v.pod, Namespace: "default", UID: types.UID("uid-" + v.pod)}}
		objs = append(objs, p.DeepCopy())
		planned = append(planned, eviction{p: p, why: "reclaimed by queue q", job: engine.JobID("default/" + v.job)})
	}
	client := fake.NewClientset(objs...)
	var mu sync.Mutex
	var order []string // "event g-0", "evict a-0", …
	firstEviction, soloEvicted := make(chan struct{}), make(chan struct{})
	var once, soloOnce sync.Once
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		mu.Lock()
		order = append(order, "event "+ev.InvolvedObject.Name)
		mu.Unlock()
		return true, ev, nil
	})
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name
		mu.Lock()
		order = append(order, "evict "+name)
		mu.Unlock()
		once.Do(func() { close(firstEviction) })
		if name == "a-0" {
			soloOnce.Do(func() { close(soloEvicted) })
		}
		return true, nil, nil
	})
	// b-0's Event is held back before it reaches the fake (which answers one request at a
	// time) until a pod has been evicted, and g-2's until a-0 has: a scheduler evicting each
	// pod as soon as its own Event is written evicts g-0 and g-1 before g-2's Event. Each
	// waits 5 s at most.
	held := func(ev *corev1.Event) error {
		wait := map[string]chan struct{}{"b-0": firstEviction, "g-2": soloEvicted}[ev.InvolvedObject.Name]
		if wait == nil {
			return nil
		}
		select {
		case <-wait:
			return nil
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%s's Event waited in vain", ev.InvolvedObject.Name)
		}
	}
	s := &Scheduler{client: heldEvents{client, held}, recorder: record.NewFakeRecorder(10), opts: Options{Now: time.Now},
		evicted: map[types.UID]time.Time{}, evicting: map[types.UID]time.Time{}}
	s.carryOut(context.Background(), planned)

	at := map[string]int{}
	for i, o := range order {
		at[o] = i
	}
	for _, p := range []string{"g-0", "g-1", "g-2", "a-0", "b-0"} {
		if _, ok := at["evict "+p]; !ok {
			t.Fatalf("%s was not evicted; requests in order: %v", p, order)
		}
	}
	for _, member := range []string{"g-0", "g-1", "g-2"} {
		for _, other := range []string{"g-0", "g-1", "g-2"} {
			if at["evict "+member] < at["event "+other] {
				t.Errorf("%s was evicted before %s's Event was written: %v", member, other, order)
			}
		}
	}
}

// heldEvents is a client whose Event writes first pass hold, which may keep them waiting
// or refuse them.
type heldEvents struct {
	*fake.Clientset
	hold func(*corev1.Event) error
}

func (c heldEvents) CoreV1() typedcorev1.CoreV1Interface {
	return heldCore{c.Clientset.CoreV1(), c.hold}
}

type heldCore struct {
	typedcorev1.CoreV1Interface
	hold func(*corev1.Event) error
}

func (c heldCore) Events(ns string) typedcorev1.EventInterface {
	return heldEventWrites{c.CoreV1Interface.Events(ns), c.hold}
}

type heldEventWrites struct {
	typedcorev1.EventInterface
	hold func(*corev1.Event) error
}

func (e heldEventWrites) Create(ctx context.Context, ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	if err := e.hold(ev); err != nil {
		return nil, err
	}
	return e.EventInterface.Create(ctx, ev, opts)
}
