package engine

import (
	"testing"
	"time"
)

// A search refused for its first victim goes on: r may take 2 GPUs by fair share from v,
// above its own, only if v ends at or above its share of 4. Stopping big (listed first, the
// newest; 4 GPUs) would leave v at 2, which the rules refuse; stopping small (2 GPUs)
// leaves it at 4, which they allow.
//
//	n1 (×6): big big big big small small    v (quota 0, weight 1): big (newest), small
//	                                        r (quota 0, weight 1): rj of 2 GPUs waits
func TestReclaimGoesOnPastARefusedVictim(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	one := 1.0
	v, r := quotaQueue("v", 0), quotaQueue("r", 0)
	v.Resources[ResourceGPU].OverQuotaWeight, r.Resources[ResourceGPU].OverQuotaWeight = &one, &one
	big := running("big", "v", "n1", 0, 1, 2, 3)
	small := running("small", "v", "n1", 4, 5)
	big.StartTime, small.StartTime = now.Add(-time.Minute), now.Add(-time.Hour)
	snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 6)}, Queues: []Queue{v, r},
		Jobs: []Job{big, small, {ID: "rj", Queue: "r", MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "rj-0", Request: PodRequest{GPUs: 2}}}}}}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Evictions) != 1 || plan.Evictions[0].Job != "small" {
		t.Errorf("evictions %v (rj: %q), want small's alone, which leaves v at its share", plan.Evictions, plan.Pending["rj"].Message)
	}
}
