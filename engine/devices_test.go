package engine

import (
	"testing"
	"time"
)

func oneGPUJob(id JobID, q QueueID, now time.Time) Job {
	return Job{ID: id, Queue: q, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUs: 1}}}}
}

func sharedJob(id JobID, q QueueID, r PodRequest, now time.Time) Job {
	return Job{ID: id, Queue: q, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: PodID(id + "-0"), Request: r}}}
}

// A failed GPU takes nothing new, whole or shared; the pod already on it keeps running;
// the reason of a job left waiting says which GPU failed and why.
//
//	n1: [a] [X] [ ] [ ]     a: running on GPU 0; X: GPU 1 failed (XID 79)
//	n2: [ ] [ ]
//	wants: b (1 GPU), half (0.5 GPU), then big (3 GPUs on one node; a is not preemptible)
func TestFailedGPUTakesNothingNew(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n1 := gpuNode("n1", "", "A100", 4)
	n1.GPUs[1].Unhealthy = "XID 79 (GPU has fallen off the bus)"
	onA := running("x", "q", "n1", 1) // was on GPU 1 when it failed
	snap := &Snapshot{Now: now, Nodes: []Node{n1}, Queues: []Queue{quotaQueue("q", 4)},
		Jobs: []Job{running("a", "q", "n1", 0), onA, oneGPUJob("b", "q", now),
			sharedJob("half", "q", PodRequest{GPUFraction: OneGPU / 2}, now.Add(time.Second))}}
	plan := New(Options{}).Schedule(snap)
	for _, e := range plan.Evictions {
		t.Errorf("evicted %s: a failed device never makes anyone leave", e.Pod)
	}
	if len(plan.Binds) != 2 {
		t.Fatalf("bound %d pods, want b and half beside the failed GPU (pending: %v)", len(plan.Binds), plan.Pending)
	}
	for _, b := range plan.Binds {
		if b.Binding.GPUs[0] == 1 {
			t.Errorf("%s placed on the failed GPU 1", b.Pod)
		}
	}

	n2 := gpuNode("n2", "", "A100", 2)
	a := running("a", "q", "n1", 0)
	a.Preemptible = PreemptibleNo // not moved to n2 to make room
	snap = &Snapshot{Now: now, Nodes: []Node{n1, n2}, Queues: []Queue{quotaQueue("q", 6)},
		Jobs: []Job{a, {ID: "big", Queue: "q", MinMember: 1, SubmitTime: now,
			Pods: []Pod{{ID: "big-0", Request: PodRequest{GPUs: 3}}}}}}
	plan = New(Options{}).Schedule(snap)
	if len(plan.Binds) != 0 {
		t.Fatalf("big bound %v: no node has 3 healthy free GPUs", plan.Binds)
	}
	want := "needs 3 GPUs on one node; largest free block is 2 GPUs on n1; 1 GPU failed, not counted (n1 GPU 1: XID 79 (GPU has fallen off the bus))"
	if r := plan.Pending["big"]; r.Message != want {
		t.Errorf("big waits with %q,\nwant %q", r.Message, want)
	}
}

// A pod that asks for a hard GPU memory cap is never put where nothing enforces one; a
// fraction may share there, and the memory-capped pod goes to the node running MPS.
//
//	plain (sharing: none): [ ] [ ]      mps (sharing: mps): [ ]
func TestMemoryCapOnlyWhereEnforced(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	plain, mps := gpuNode("plain", "", "A100", 2), gpuNode("mps", "", "A100", 1)
	plain.Sharing, mps.Sharing = SharingNone, "mps"
	capped := sharedJob("capped", "q", PodRequest{GPUMemory: 20 << 30}, now)
	snap := &Snapshot{Now: now, Nodes: []Node{plain}, Queues: []Queue{quotaQueue("q", 3)},
		Jobs: []Job{capped, sharedJob("frac", "q", PodRequest{GPUFraction: OneGPU / 2}, now)}}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Binds) != 1 || plan.Binds[0].Job != "frac" {
		t.Fatalf("binds %v: only frac may share on a node that enforces nothing", plan.Binds)
	}
	want := "asks for a hard GPU memory cap (allot.dev/gpu-memory), and the 1 node it may use cannot enforce one (allot.dev/gpu-sharing=none): ask for allot.dev/gpu-fraction instead, or use nodes sharing with mps or hami-core"
	if r := plan.Pending["capped"]; r.Code != ReasonConstraint || r.Message != want {
		t.Errorf("capped waits with %v %q,\nwant %q", r.Code, r.Message, want)
	}

	snap.Nodes = []Node{plain, mps}
	snap.Jobs = []Job{capped}
	plan = New(Options{}).Schedule(snap)
	if len(plan.Binds) != 1 || plan.Binds[0].Binding.Node != "mps" {
		t.Errorf("binds %v, want capped on mps", plan.Binds)
	}
}
