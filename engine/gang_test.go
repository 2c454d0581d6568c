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
			Queues: []Queue{{ID: "q", Resources: [numResources]QueueResource{ResourceGPU: {Quota: 4 * int64(OneGPU)}}}},
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

// The grace period comes from the gang's own setting, else its queue's or the nearest
// ancestor's, else the engine's; the reason names the members the gang lost.
//
//	org (grace 60s) ── research ── gang a (own grace 10s)   lost a-1 on dgx-2
//	                            └─ gang b                   lost b-1 on dgx-2
func TestGangGraceFromGangQueueOrEngine(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	minute, ten := time.Minute, 10*time.Second
	gang := func(id JobID, own *time.Duration, since time.Duration, gpu int) Job {
		return Job{ID: id, Queue: "research", MinMember: 2, PartialSince: now.Add(-since), GangGrace: own,
			Lost: []string{string(id) + "-1 on dgx-2"},
			Pods: []Pod{{ID: PodID(id) + "-0", Request: PodRequest{GPUs: 1}, Binding: &Binding{Node: "dgx-1", GPUs: []int{gpu}}}}}
	}
	stopped := func(since time.Duration, engineGrace time.Duration) map[JobID]string {
		snap := &Snapshot{Now: now,
			Nodes: []Node{{ID: "dgx-1", CPU: 64000, Memory: 512 << 30, GPUs: make([]GPU, 4)}},
			Queues: []Queue{{ID: "org", GangGrace: &minute, Resources: [numResources]QueueResource{ResourceGPU: {Quota: 4 * int64(OneGPU)}}},
				{ID: "research", Parent: "org", Resources: [numResources]QueueResource{ResourceGPU: {Quota: 4 * int64(OneGPU)}}}},
			Jobs: []Job{gang("a", &ten, since, 0), gang("b", nil, since, 1)}}
		out := map[JobID]string{}
		for _, e := range New(Options{GangGrace: engineGrace}).Schedule(snap).Evictions {
			out[e.Job] = e.Reason.Message
		}
		return out
	}
	if got := stopped(9*time.Second, time.Second); len(got) != 0 {
		t.Errorf("at 9s: %v stopped, want none (a's own 10s, b's queue's 60s over the engine's 1s)", got)
	}
	got := stopped(30*time.Second, time.Second)
	if len(got) != 1 || !strings.Contains(got["a"], "gang a ran 1 of its 2 pods for 30s (lost: a-1 on dgx-2)") {
		t.Errorf("at 30s: %v, want a stopped with its lost member named", got)
	}
	if got := stopped(61*time.Second, time.Hour); len(got) != 2 || !strings.Contains(got["b"], "(lost: b-1 on dgx-2)") {
		t.Errorf("at 61s: %v, want both stopped (b by org's 60s)", got)
	}
}
