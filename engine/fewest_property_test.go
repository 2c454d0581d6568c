package engine

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// On one full node, queue b holds every GPU in jobs of 1 to 3 GPUs, above its quota and
// its fair share, and queue a, holding nothing, asks n GPUs within its quota: any set of
// b's jobs that frees n GPUs is owed to a (rule 4). Against an exhaustive search of those
// sets, the reclaim stops no more GPUs than the fewest that make room, whatever order
// b's jobs were started in (the newest is the first victim in order).
//
// go test ./engine -run TestReclaimStopsTheFewestGPUs -rapid.checks=3000
func TestReclaimStopsTheFewestGPUs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
		g := rapid.IntRange(2, 8).Draw(t, "gpus")
		qa := rapid.IntRange(1, g-1).Draw(t, "quotaA")
		n := rapid.IntRange(1, qa).Draw(t, "need")
		free := rapid.IntRange(0, n-1).Draw(t, "free")
		snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", g)}, Queues: []Queue{quotaQueue("a", qa), quotaQueue("b", g-qa)}}
		var sizes []int
		for next := free; next < g; {
			size := min(rapid.IntRange(1, 3).Draw(t, "size"), g-next)
			var gpus []int
			for i := 0; i < size; i++ {
				gpus = append(gpus, next+i)
			}
			next += size
			j := running(JobID(fmt.Sprintf("b-%d", len(sizes))), "b", "n1", gpus...)
			age := time.Duration(rapid.IntRange(1, 100).Draw(t, "ageMinutes")) * time.Minute
			j.Class, j.StartTime, j.SubmitTime = ClassTrain, now.Add(-age), now.Add(-age)
			snap.Jobs = append(snap.Jobs, j)
			sizes = append(sizes, size)
		}
		snap.Jobs = append(snap.Jobs, Job{ID: "a-job", Queue: "a", Class: ClassTrain, MinMember: 1, SubmitTime: now,
			Pods: []Pod{{ID: "a-job-0", Request: PodRequest{GPUs: n}}}})
		fewest := g + 1
		for mask := 1; mask < 1<<len(sizes); mask++ {
			freed := free
			for i, s := range sizes {
				if mask&(1<<i) != 0 {
					freed += s
				}
			}
			if freed >= n {
				fewest = min(fewest, freed-free)
			}
		}
		plan := New(Options{}).Schedule(snap)
		if r, waits := plan.Pending["a-job"]; waits {
			t.Fatalf("a-job waits (%s) where stopping %d GPUs of b's makes room", r.Message, fewest)
		}
		// A victim placed again at once (moved, to pack the node) keeps its GPUs.
		placed := map[JobID]bool{}
		for _, b := range plan.Binds {
			placed[b.Job] = true
		}
		stopped := 0
		for _, e := range plan.Evictions {
			for i, j := range snap.Jobs[:len(sizes)] {
				if j.ID == e.Job && !placed[j.ID] {
					stopped += sizes[i]
				}
			}
		}
		if stopped != fewest {
			t.Fatalf("the reclaim stopped %d GPUs (%v) where %d make room", stopped, plan.Evictions, fewest)
		}
	})
}
