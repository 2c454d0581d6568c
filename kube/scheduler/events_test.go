package scheduler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/engine"
)

// TestEveryBindOfABurstGetsItsScheduledEvent binds (as the bind workers report them) more
// pods at once than client-go's recorder can hold: it queues 1,000 Events, writes one at a
// time and drops the rest. Every pod must still get its Scheduled Event, with its node and
// devices, on a real API server.
func TestEveryBindOfABurstGetsItsScheduledEvent(t *testing.T) {
	e := newEnv(t, 1, 8)
	s, err := New(e.c.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for w := 0; w < eventWriters; w++ {
		go s.writeEvents(ctx)
	}
	const burst = 2500
	for i := 0; i < burst; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%d", i), Namespace: "default",
			UID: types.UID(fmt.Sprintf("uid-%d", i)), ResourceVersion: "1"}}
		s.scheduled(&bindJob{p: p, b: engine.Binding{Node: engine.NodeID(fmt.Sprintf("gpu-%d", i%300)), GPUs: []int{i % 8}}})
	}
	e.waitFor(t, fmt.Sprintf("%d Scheduled Events", burst), func() (bool, string) {
		evs, err := e.client.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "reason=Scheduled"})
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			i := 0
			if _, err := fmt.Sscanf(ev.InvolvedObject.Name, "burst-%d", &i); err != nil {
				continue
			}
			if want := fmt.Sprintf("assigned default/burst-%d to gpu-%d, preferred GPUs %d (the device plugin picks)", i, i%300, i%8); ev.Message != want || ev.Source.Component != SchedulerName {
				return false, fmt.Sprintf("%s's Event from %q says %q, want %q", ev.InvolvedObject.Name, ev.Source.Component, ev.Message, want)
			}
			seen[ev.InvolvedObject.Name] = true
		}
		return len(seen) == burst, fmt.Sprintf("%d of %d pods have theirs", len(seen), burst)
	})
	if n := s.events.dropped.Load(); n != 0 {
		t.Errorf("%d Events dropped", n)
	}
}
