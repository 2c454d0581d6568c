package scheduler

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// lagging is a pod informer whose store shows what the test set, not what the watch
// brought since: an informer that has not caught up yet.
type lagging struct {
	cache.SharedIndexInformer
	store cache.Store
}

func (l lagging) GetStore() cache.Store { return l.store }

// An eviction the API server accepted counts as the pod leaving from then on, also in a
// cycle whose informer does not show it terminating yet; such a cycle plans no further
// victims, and in the end the reclaim has evicted exactly what it needed.
//
//	dgx-1: [a][a][a][a]   dgx-2: [a][a][a][a]   team-a (quota 0) borrows all 8
//	team-b (quota 4) asks one pod of 4 GPUs
//	cycle 1: evicts 4 pods of team-a on one node
//	cycle 2, its informer showing 2 of them terminating and 2 still running: no eviction
func TestAcceptedEvictionCountsAsLeaving(t *testing.T) {
	e := newEnv(t, 2, 4)
	e.queue(t, "team-a", 0)
	e.queue(t, "team-b", 4)
	stop := e.startScheduler(t)
	for i := 0; i < 8; i++ {
		e.pod(t, fmt.Sprintf("a-%d", i), "team-a", 1, nil)
	}
	e.waitFor(t, "team-a borrows all 8", func() (bool, string) {
		n := e.count(t, running)
		return n == 8, fmt.Sprintf("%d running", n)
	})
	stop()

	m := NewMetrics()
	s, err := New(e.c.Config, Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	if err := s.start(ctx); err != nil {
		t.Fatal(err)
	}
	e.pod(t, "b-0", "team-b", 4, nil)
	e.waitFor(t, "the informer shows b-0", func() (bool, string) {
		_, ok, _ := s.pods.GetStore().GetByKey("default/b-0")
		return ok, ""
	})
	before := map[string]*corev1.Pod{}
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		before[p.Name] = p
	}
	live := s.pods
	evicted := func() float64 { return testutil.ToFloat64(m.evicted.WithLabelValues("Reclaimed")) }

	if err := s.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := evicted(); n != 4 {
		t.Fatalf("cycle 1 evicted %v pods, want 4", n)
	}
	var victims []string
	e.waitFor(t, "the API server shows the victims leaving", func() (bool, string) {
		victims = victims[:0]
		now := e.pods(t)
		for name := range before {
			if p, ok := now[name]; strings.HasPrefix(name, "a-") && (!ok || p.DeletionTimestamp != nil) {
				victims = append(victims, name)
			}
		}
		return len(victims) == 4, fmt.Sprint(victims)
	})
	sort.Strings(victims)
	// The informer has caught up with the first two victims only.
	stale := cache.NewStore(cache.MetaNamespaceKeyFunc)
	now := e.pods(t)
	for name, p := range before {
		if name == victims[0] || name == victims[1] {
			if p = now[name]; p == nil {
				continue // gone
			}
		}
		if err := stale.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	s.pods = lagging{live, stale}
	if err := s.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := evicted(); n != 4 {
		t.Errorf("cycle 2, its informer behind, planned %v evictions more, want none beyond the 4 of cycle 1", n-4)
	}
	cancel()

	defer e.startScheduler(t)()
	e.waitFor(t, "b-0 runs", func() (bool, string) {
		ps := e.pods(t)
		return running(ps["b-0"]), ""
	})
	if n := e.count(t, func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "a-") }); n != 4 {
		t.Errorf("%d pods of team-a left, want 4: only what b-0 needed is evicted", n)
	}
	noDoubleBooking(t, e.pods(t))
}
