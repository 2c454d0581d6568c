package engine

import (
	"strings"
	"testing"
	"time"
)

// A job younger than its queue's reclaimMinRuntime is not reclaimed: the owner waits, told
// which job is protected and until when, and takes its GPUs once the time has passed. The
// setting is inherited from the department.
//
//	n1 (×4): b-1 b-1 b-1 b-1      dept (reclaimMinRuntime 10m) ⊃ b (quota 0), borrowing
//	                              a (quota 4) submits a-1 of 4 GPUs
func TestReclaimWaitsForMinRuntime(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	ten := 10 * time.Minute
	dept := quotaQueue("dept", 0)
	dept.ReclaimMinRuntime = &ten
	b := quotaQueue("b", 0)
	b.Parent = "dept"
	snap := func(now time.Time) *Snapshot {
		borrowed := running("b-1", "b", "n1", 0, 1, 2, 3)
		borrowed.StartTime = start
		return &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 4)}, Queues: []Queue{quotaQueue("a", 4), dept, b},
			Jobs: []Job{borrowed, {ID: "a-1", Queue: "a", MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "a-1-0", Request: PodRequest{GPUs: 4}}}}}}
	}
	plan := New(Options{}).Schedule(snap(start.Add(4 * time.Minute)))
	if len(plan.Evictions) != 0 {
		t.Fatalf("evicted %v four minutes into a ten-minute protection", plan.Evictions)
	}
	want := "b-1 protected from reclaim by a minimum runtime, the first until 2026-01-01T09:10:00Z (in 6m0s)"
	if r := plan.Pending["a-1"]; !strings.Contains(r.Message, want) {
		t.Fatalf("a-1 waits with %q, want it to say %q", r.Message, want)
	}
	plan = New(Options{}).Schedule(snap(start.Add(10 * time.Minute)))
	if len(plan.Evictions) != 1 || plan.Evictions[0].Job != "b-1" {
		t.Fatalf("evictions %v once the protection ended, want b-1's", plan.Evictions)
	}
}

// preemptMinRuntime shields a job from a higher-priority job of its own queue the same way,
// and only from that: reclaim by another queue is not held back by it.
//
//	n1 (×2): low low      q (quota 2, preemptMinRuntime 5m): high (priority 10) of 2 GPUs
func TestPreemptWaitsForMinRuntime(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	five := 5 * time.Minute
	q := quotaQueue("q", 2)
	q.PreemptMinRuntime = &five
	snap := func(now time.Time) *Snapshot {
		low := running("low", "q", "n1", 0, 1)
		low.StartTime = start
		return &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 2)}, Queues: []Queue{q},
			Jobs: []Job{low, {ID: "high", Queue: "q", Priority: 10, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "high-0", Request: PodRequest{GPUs: 2}}}}}}
	}
	plan := New(Options{}).Schedule(snap(start.Add(time.Minute)))
	if len(plan.Evictions) != 0 {
		t.Fatalf("preempted %v one minute into a five-minute protection", plan.Evictions)
	}
	if r := plan.Pending["high"]; !strings.Contains(r.Message, "low protected from preemption by a minimum runtime, the first until 2026-01-01T09:05:00Z (in 4m0s)") {
		t.Fatalf("high waits with %q", r.Message)
	}
	plan = New(Options{}).Schedule(snap(start.Add(6 * time.Minute)))
	if len(plan.Evictions) != 1 || plan.Evictions[0].Job != "low" {
		t.Fatalf("evictions %v after the protection, want low's", plan.Evictions)
	}
}

// Consolidation moves a job only under the protection reclaim and preemption give it: a
// job of another queue younger than its reclaimMinRuntime stays where it is (a tenant
// within its share could otherwise have other teams' jobs restarted again and again while
// the free GPUs are scattered), and moves once the time has passed.
//
//	n1 (×2): keep ·      a (quota 4): keep (inference, not preemptible), pair of 2 GPUs waits
//	n2 (×2): b-1  ·      b (quota 0, reclaimMinRuntime 10m): b-1, started at 9:00
func TestConsolidationWaitsForMinRuntime(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	ten := 10 * time.Minute
	b := quotaQueue("b", 0)
	b.ReclaimMinRuntime = &ten
	snap := func(now time.Time) *Snapshot {
		keep := running("keep", "a", "n1", 0)
		keep.Class = ClassInference
		moved := running("b-1", "b", "n2", 0)
		moved.Class, moved.StartTime = ClassTrain, start
		return &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 2), gpuNode("n2", "", "A100", 2)}, Queues: []Queue{quotaQueue("a", 4), b},
			Jobs: []Job{keep, moved, {ID: "pair", Queue: "a", MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "pair-0", Request: PodRequest{GPUs: 2}}}}}}
	}
	plan := New(Options{}).Schedule(snap(start.Add(4 * time.Minute)))
	if len(plan.Evictions) != 0 || len(plan.Binds) != 0 {
		t.Fatalf("four minutes into a ten-minute protection: evicted %v, bound %v", plan.Evictions, plan.Binds)
	}
	if r := plan.Pending["pair"]; !strings.Contains(r.Message, "b-1 protected") {
		t.Errorf("pair waits with %q, want it to name b-1's protection", r.Message)
	}
	plan = New(Options{}).Schedule(snap(start.Add(10 * time.Minute)))
	if len(plan.Evictions) != 1 || plan.Evictions[0].Job != "b-1" {
		t.Fatalf("evictions %v once the protection ended, want b-1 moved", plan.Evictions)
	}
}
