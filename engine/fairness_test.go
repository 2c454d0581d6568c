package engine

import (
	"strings"
	"testing"
	"time"
)

func gpuNode(id NodeID, pool, model string, gpus int) Node {
	n := Node{ID: id, Pool: pool, CPU: 64000, Memory: 512 << 30}
	for i := 0; i < gpus; i++ {
		n.GPUs = append(n.GPUs, GPU{Model: model, Memory: 80 << 30})
	}
	return n
}

func quotaQueue(id QueueID, gpus int) Queue {
	q := Queue{ID: id}
	q.Resources[ResourceGPU].Quota = int64(gpus) * int64(OneGPU)
	return q
}

// running is a one-pod job already bound to the given GPUs of a node.
func running(id JobID, q QueueID, node NodeID, gpus ...int) Job {
	return Job{ID: id, Queue: q, MinMember: 1, Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUs: len(gpus)},
		Binding: &Binding{Node: node, GPUs: gpus}}}}
}

// A job that names no pool on a cluster whose nodes all carry one is told the rule.
func TestPoollessJobOnPooledCluster(t *testing.T) {
	snap := &Snapshot{
		Nodes:  []Node{gpuNode("n1", "p1", "A100", 2), gpuNode("n2", "p2", "A100", 2)},
		Queues: []Queue{quotaQueue("a", 2)},
		Jobs:   []Job{{ID: "j", Queue: "a", MinMember: 1, Pods: []Pod{{ID: "j-0", Request: PodRequest{GPUs: 1}}}}},
	}
	r := New(Options{}).Schedule(snap).Pending["j"]
	want := "jobs without a node pool run only on nodes without the allot.dev/node-pool label; pools here: p1, p2"
	if r.Code != ReasonConstraint || r.Message != want {
		t.Fatalf("reason %v %q, want %q", r.Code, r.Message, want)
	}
}

// Reclaim and consolidation together: r (quota 2) needs both H100s of h1, where v, above
// its fair share, runs two 1-GPU jobs. One of them fits on the idle A100 of a1 and is moved
// there in the same decision rather than stopped, so v keeps its fair share.
//
//	h1 (H100 ×2): v-1 v-2        a1 (A100 ×2): v-3 ·
func TestReclaimMovesVictimsThatFitElsewhere(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := quotaQueue("v", 1)
	snap := &Snapshot{Now: now,
		Nodes:  []Node{gpuNode("h1", "", "H100", 2), gpuNode("a1", "", "A100", 2)},
		Queues: []Queue{quotaQueue("r", 2), v},
		Jobs: []Job{running("v-1", "v", "h1", 0), running("v-2", "v", "h1", 1), running("v-3", "v", "a1", 0),
			{ID: "r-1", Queue: "r", MinMember: 1, GPUTypes: []string{"H100"}, SubmitTime: now,
				Pods: []Pod{{ID: "r-1-0", Request: PodRequest{GPUs: 2}}}}},
	}
	plan := New(Options{}).Schedule(snap)
	if _, waits := plan.Pending["r-1"]; waits {
		t.Fatalf("r-1 waits: %s", plan.Pending["r-1"].Message)
	}
	moved, stopped := 0, 0
	for _, e := range plan.Evictions {
		if strings.HasPrefix(e.Reason.Message, "moved to make room for job r-1") {
			// What the pod's owner reads: no promise that this pod, or any one
			// replacement, runs on; only that its queue keeps its room.
			if want := "(a1 has room for a pod of it now); what its controller makes again is placed as any pod that waits"; !strings.HasSuffix(e.Reason.Message, want) {
				t.Errorf("move reason %q, want it to end %q", e.Reason.Message, want)
			}
			moved++
		} else {
			stopped++
		}
	}
	if moved != 1 || stopped != 1 {
		t.Fatalf("%d moved and %d stopped, want 1 and 1: %+v", moved, stopped, plan.Evictions)
	}
	if got := plan.Queues["v"].Allocated.GPU(); got != 2*OneGPU {
		t.Fatalf("v holds %s GPUs after the reclaim, want its fair share 2", got)
	}
}

// A job the adapter found invalid waits with the adapter's words; its running pod keeps
// its GPU (never lost, never double-booked), and a queue whose parents form a cycle is
// named as such.
func TestInvalidJobsWaitAndKeepTheirGPUs(t *testing.T) {
	a, b := quotaQueue("loop-a", 1), quotaQueue("loop-b", 1)
	a.Parent, b.Parent = "loop-b", "loop-a"
	bad := running("bad", "q", "n1", 0)
	bad.Invalid = "pod default/bad: allot.dev/gpu-fraction: \"banana\" is not allowed"
	snap := &Snapshot{
		Nodes:  []Node{gpuNode("n1", "", "A100", 1)},
		Queues: []Queue{quotaQueue("q", 1), a, b},
		Jobs: []Job{bad,
			{ID: "next", Queue: "q", MinMember: 1, Pods: []Pod{{ID: "next-0", Request: PodRequest{GPUs: 1}}}},
			{ID: "looped", Queue: "loop-a", MinMember: 1, Pods: []Pod{{ID: "looped-0", Request: PodRequest{GPUs: 1}}}}},
	}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Evictions) != 0 || len(plan.Binds) != 0 {
		t.Fatalf("evictions %v, binds %v: the invalid job's GPU is held", plan.Evictions, plan.Binds)
	}
	if r := plan.Pending["bad"]; r.Code != ReasonInvalid || r.Message != bad.Invalid {
		t.Fatalf("bad: %v %q", r.Code, r.Message)
	}
	if r := plan.Pending["looped"]; r.Code != ReasonInvalid || !strings.Contains(r.Message, "queue loop-a is in a cycle of parents") {
		t.Fatalf("looped: %v %q", r.Code, r.Message)
	}
}

// A job whose queue was deleted under it (an admin's forced delete) holds its GPUs until
// it goes, and they are no queue's: the fair shares of the rest add up to what is left,
// never to more than the cluster has.
//
//	n1 (×4): gone-0 gone-1 · ·      n2 (×4): · · · ·      queues a, b (quota 2 each), busy
func TestFairSharesLeaveOutAJobOfNoQueue(t *testing.T) {
	gone := running("gone", "deleted", "n1", 0, 1)
	snap := &Snapshot{
		Nodes:  []Node{gpuNode("n1", "", "A100", 4), gpuNode("n2", "", "A100", 4)},
		Queues: []Queue{quotaQueue("a", 2), quotaQueue("b", 2)},
		Jobs: []Job{gone,
			{ID: "a-1", Queue: "a", MinMember: 1, Pods: []Pod{{ID: "a-1-0", Request: PodRequest{GPUs: 8}}}},
			{ID: "b-1", Queue: "b", MinMember: 1, Pods: []Pod{{ID: "b-1-0", Request: PodRequest{GPUs: 8}}}}},
	}
	plan := New(Options{}).Schedule(snap)
	sum := plan.Queues["a"].FairShare.GPU() + plan.Queues["b"].FairShare.GPU()
	if sum != 6*OneGPU {
		t.Fatalf("fair shares add up to %v GPUs; 2 of 8 are held by a job of no queue, want 6", float64(sum)/float64(OneGPU))
	}
	if len(plan.Evictions) != 0 {
		t.Fatalf("evictions %v: the job of no queue keeps its GPUs until it goes", plan.Evictions)
	}
	if r := plan.Pending["gone"]; !strings.Contains(r.Message, "queue deleted does not exist (deleted, or never made)") {
		t.Fatalf("gone: %q", r.Message)
	}
}

// Within a queue and a priority, a notebook someone waits at goes before the team's own
// batch training that came first: non-preemptible work before preemptible.
//
//	n1 (×1): ·      queue a (quota 1): train (preemptible, 9:00), notebook (interactive, 9:05)
func TestInteractiveBeforeTrainingOfItsQueue(t *testing.T) {
	nine := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	snap := &Snapshot{Now: nine.Add(10 * time.Minute),
		Nodes:  []Node{gpuNode("n1", "", "A100", 1)},
		Queues: []Queue{quotaQueue("a", 1)},
		Jobs: []Job{
			{ID: "train", Queue: "a", MinMember: 1, SubmitTime: nine, Pods: []Pod{{ID: "train-0", Request: PodRequest{GPUs: 1}}}},
			{ID: "notebook", Queue: "a", MinMember: 1, Class: ClassInteractive, SubmitTime: nine.Add(5 * time.Minute),
				Pods: []Pod{{ID: "notebook-0", Request: PodRequest{GPUs: 1}}}}},
	}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Binds) != 1 || plan.Binds[0].Pod != "notebook-0" {
		t.Fatalf("binds %v, want the notebook's pod", plan.Binds)
	}
}

// Oversubscribed quotas go by queue priority: hi (priority 1) gets its full quota before a
// and b (priority 0) divide the rest in proportion to their quotas, in whatever order the
// queues are declared.
//
//	n1 (×5)      hi quota 3, priority 1; a quota 2; b quota 2; each wants 4
func TestOversubscribedQuotasGoByPriority(t *testing.T) {
	hi := quotaQueue("hi", 3)
	hi.Priority = 1
	queues := []Queue{hi, quotaQueue("a", 2), quotaQueue("b", 2)}
	var jobs []Job
	for _, q := range queues {
		id := JobID(q.ID + "-1")
		jobs = append(jobs, Job{ID: id, Queue: q.ID, MinMember: 1, Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUs: 4}}}})
	}
	want := map[QueueID]MilliGPU{"hi": 3 * OneGPU, "a": OneGPU, "b": OneGPU}
	for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		snap := &Snapshot{Nodes: []Node{gpuNode("n1", "", "A100", 5)}, Jobs: jobs}
		for _, i := range order {
			snap.Queues = append(snap.Queues, queues[i])
		}
		shares := FairShares(snap)
		for id, w := range want {
			if got := shares[id].GPU(); got != w {
				t.Errorf("queues in order %v: %s's fair share is %s GPUs, want %s", order, id, got, w)
			}
		}
	}
}

// A CPU-only job that finds no CPU is told that the nodes lack CPU, not that "nodes with
// free GPUs" do, whether or not any GPU is free.
//
//	n1 (×1): busy, 1 CPU free      queue a: busy (1 GPU, 15 CPU), etl (CPU only, 4 CPU)
func TestCPUOnlyJobLacksCPU(t *testing.T) {
	busy := running("busy", "a", "n1", 0)
	busy.Pods[0].Request.CPU = 15000
	snap := &Snapshot{
		Nodes:  []Node{gpuNode("n1", "", "A100", 1)},
		Queues: []Queue{quotaQueue("a", 1)},
		Jobs: []Job{busy,
			{ID: "etl", Queue: "a", MinMember: 1, Pods: []Pod{{ID: "etl-0", Request: PodRequest{CPU: 4000}}}}},
	}
	snap.Nodes[0].CPU = 16000
	r := New(Options{}).Schedule(snap).Pending["etl"]
	if want := "needs 4 CPU on one node; the nodes it may use lack CPU: needs 4, most free is 1 on n1"; r.Message != want {
		t.Fatalf("reason %q, want %q", r.Message, want)
	}
}
