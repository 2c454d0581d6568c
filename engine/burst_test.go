package engine

import (
	"testing"
	"time"
)

// A burster stopped frees its request as well as its burst: on an 80Gi GPU holding A (10Gi,
// using 30Gi), B (10Gi, using 25Gi) and C (10Gi), a 40Gi request needs A stopped, not B too.
func TestBurstersStoppedAreNoMoreThanNeeded(t *testing.T) {
	held := func(id string, usedGi int64) Job {
		return Job{ID: JobID(id), Queue: "q", MinMember: 1, Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUMemory: 10 << 30, GPUMemoryLimit: 40 << 30},
			Binding: &Binding{Node: "n1", GPUs: []int{0}, Share: 125, Memory: 10 << 30, MemoryUsed: usedGi << 30}}}}
	}
	snap := &Snapshot{Now: time.Now(), Nodes: []Node{{ID: "n1", CPU: 64000, Memory: 256 << 30, GPUs: []GPU{{Model: "A100", Memory: 80 << 30}}}},
		Queues: []Queue{{ID: "q", Resources: [numResources]QueueResource{{Quota: 1000}}}},
		Jobs: []Job{held("a", 30), held("b", 25), held("c", 10),
			{ID: "new", Queue: "q", MinMember: 1, Pods: []Pod{{ID: "new-0", Request: PodRequest{GPUMemory: 40 << 30}}}}}}
	p := New(Options{}).Schedule(snap)
	if len(p.Evictions) != 1 || p.Evictions[0].Pod != "a-0" || len(p.Binds) != 1 || p.Binds[0].Pod != "new-0" {
		t.Fatalf("evictions %+v, binds %+v: want a stopped alone and new placed", p.Evictions, p.Binds)
	}
}
