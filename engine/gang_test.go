package engine

import (
	"strings"
	"testing"
	"time"
)

// A gang running partly keeps its pod through the grace period, loses it after, and at
// once when its other members are being evicted (a whole-gang eviction cut short).
func TestPartlyRunningGang(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	snap := func(since time.Duration, evicted bool) *Snapshot {
		return &Snapshot{Now: now,
			Nodes:  []Node{{ID: "dgx-1", CPU: 64000, Memory: 512 << 30, GPUs: make([]GPU, 4)}},
			Queues: []Queue{{ID: "q", Resources: [3]QueueResource{ResourceGPU: {Quota: 4 * int64(OneGPU)}}}},
			// g-1 is gone: no pod to place, so the gang cannot be completed.
			Jobs: []Job{{ID: "g", Queue: "q", MinMember: 2, PartialSince: now.Add(-since), MembersEvicted: evicted,
				Pods: []Pod{{ID: "g-0", Request: PodRequest{GPUs: 1}, Binding: &Binding{Node: "dgx-1", GPUs: []int{0}}}}}}}
	}
	eng := New(Options{})
	if p := eng.Schedule(snap(4*time.Second, false)); len(p.Evictions) != 0 {
		t.Fatalf("stopped within the grace period: %+v", p.Evictions)
	}
	p := eng.Schedule(snap(5*time.Second, false))
	if len(p.Evictions) != 1 || !strings.Contains(p.Evictions[0].Reason.Message, "gang g ran 1 of its 2 pods for 5s: the rest were stopped so that it starts again whole") {
		t.Fatalf("after the grace period: %+v", p.Evictions)
	}
	p = eng.Schedule(snap(0, true))
	if len(p.Evictions) != 1 || !strings.Contains(p.Evictions[0].Reason.Message, "the others evicted: the rest are stopped too") {
		t.Fatalf("with its other members evicted: %+v", p.Evictions)
	}
	if p := New(Options{GangGrace: -1}).Schedule(snap(time.Hour, true)); len(p.Evictions) != 0 {
		t.Fatalf("stopped with the rule turned off: %+v", p.Evictions)
	}
}
