package engine

import (
	"testing"
	"time"
)

// A job whose pool has nodes, but none of its kind of device, is told so, not that the
// pool lacks a GPU model it never asked for.
//
//	pool other: ascend-1 [ascend ×8]      default pool: dgx [GPU ×8]
//	wants: four (4 ascend devices, default pool), two (2 GPUs, pool other)
func TestNoNodeOfTheKindIsNamed(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	asc := gpuNode("ascend-1", "other", "910B3", 8)
	asc.Accelerator = "ascend"
	q := quotaQueue("q", 8)
	q.Resources[AcceleratorResource(0)].Quota = 8 * int64(OneGPU)
	two := oneGPUJob("two", "q", now)
	two.NodePool, two.Pods[0].Request.GPUs = "other", 2
	snap := &Snapshot{Now: now, Accelerators: []string{"ascend"}, Nodes: []Node{asc, gpuNode("dgx", "", "H100", 8)}, Queues: []Queue{q},
		Jobs: []Job{{ID: "four", Queue: "q", MinMember: 1, SubmitTime: now, Accelerator: "ascend",
			Pods: []Pod{{ID: "four-0", Request: PodRequest{GPUs: 4}}}}, two}}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Binds) != 0 {
		t.Fatalf("bound %v: neither pool has the kind its job asks", plan.Binds)
	}
	for job, want := range map[JobID]string{
		"four": "needs ascend devices, and none of the 1 node it may use has them (their devices are of another kind)",
		"two":  "needs NVIDIA GPUs, and none of the 1 node it may use has them (their devices are of another kind)",
	} {
		if r := plan.Pending[job]; r.Code != ReasonConstraint || r.Message != want {
			t.Errorf("%s waits with %v %q,\nwant %q", job, r.Code, r.Message, want)
		}
	}
}
