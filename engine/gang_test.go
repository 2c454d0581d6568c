package engine

import "testing"

// A gang of three whose third pod is not created yet waits, even on an empty node, and
// says why; once the third pod exists all three start.
func TestGangWaitsForAllItsPods(t *testing.T) {
	node := Node{ID: "dgx-1", CPU: 64000, Memory: 512 << 30}
	for i := 0; i < 8; i++ {
		node.GPUs = append(node.GPUs, GPU{Model: "A100", Memory: 80 << 30})
	}
	q := Queue{ID: "team-a"}
	q.Resources[ResourceGPU].Quota = 8 * int64(OneGPU)
	pod := func(id PodID) Pod { return Pod{ID: id, Request: PodRequest{GPUs: 1}} }
	job := Job{ID: "train", Queue: "team-a", MinMember: 3, Pods: []Pod{pod("train-0"), pod("train-1")}}
	snap := &Snapshot{Nodes: []Node{node}, Queues: []Queue{q}, Jobs: []Job{job}}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Binds) != 0 {
		t.Fatalf("%d pods of an incomplete gang bound", len(plan.Binds))
	}
	if r := plan.Pending["train"]; r.Code != ReasonGangIncomplete || r.Message != "gang of 3 pods has 2 so far; it starts when all are created" {
		t.Fatalf("reason %v %q", r.Code, r.Message)
	}
	snap.Jobs[0].Pods = append(snap.Jobs[0].Pods, pod("train-2"))
	if plan := New(Options{}).Schedule(snap); len(plan.Binds) != 3 {
		t.Fatalf("%d of the complete gang's 3 pods bound", len(plan.Binds))
	}
}
