package engine

import (
	"testing"
	"time"
)

// Growth takes only what is free, and two elastic workloads share it:
//
//	dgx-1 [8 GPUs]   a (quota 4): el-a runs 1 of up to 8    b (quota 4): el-b runs 1 of up to 8
//	                 c (quota 0): borrowed 4, over its fair share of 0 once a and b want more
//
// A member not yet made is no demand: it stops nothing, c's GPUs stay c's, and only the 2
// free GPUs are offered, one to each in turn. With c gone, the 6 free GPUs go 3 and 3. No
// queue's books hold the members not yet made.
func TestGrowthTakesOnlyFreeCapacityAndIsShared(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	quota := func(id QueueID, gpus int64) Queue {
		return Queue{ID: id, Resources: [numResources]QueueResource{ResourceGPU: {Quota: gpus * int64(OneGPU)}}}
	}
	one := PodRequest{GPUs: 1}
	running := func(id JobID, q QueueID, gpus ...int) Job {
		j := Job{ID: id, Queue: q, MinMember: 1}
		for k, g := range gpus {
			j.Pods = append(j.Pods, Pod{ID: PodID(string(id) + "-" + string(rune('0'+k))), Request: one,
				Binding: &Binding{Node: "dgx-1", GPUs: []int{g}}})
		}
		return j
	}
	snap := func(borrower bool) *Snapshot {
		a, b := running("el-a", "a", 0), running("el-b", "b", 1)
		a.Growth, b.Growth = &Growth{Max: 7, Pod: one}, &Growth{Max: 7, Pod: one}
		s := &Snapshot{Now: now, Nodes: []Node{{ID: "dgx-1", CPU: 64000, Memory: 512 << 30, GPUs: make([]GPU, 8)}},
			Queues: []Queue{quota("a", 4), quota("b", 4), quota("c", 0)}, Jobs: []Job{a, b}}
		if borrower {
			s.Jobs = append(s.Jobs, running("c-job", "c", 2, 3, 4, 5))
		}
		return s
	}
	p := New(Options{}).Schedule(snap(true))
	if len(p.Evictions) != 0 || len(p.Binds) != 0 {
		t.Fatalf("growth evicted or bound: %+v %+v", p.Evictions, p.Binds)
	}
	if p.Grow["el-a"].Members != 1 || p.Grow["el-b"].Members != 1 {
		t.Fatalf("with 2 GPUs free: grow %+v, want one member each", p.Grow)
	}
	p = New(Options{}).Schedule(snap(false))
	if p.Grow["el-a"].Members != 3 || p.Grow["el-b"].Members != 3 {
		t.Fatalf("with 6 GPUs free: grow %+v, want three members each", p.Grow)
	}
	if q := p.Queues["a"]; q.Allocated[ResourceGPU] != int64(OneGPU) {
		t.Fatalf("queue a's books hold the members not yet made: %+v", q.Allocated)
	}
}
