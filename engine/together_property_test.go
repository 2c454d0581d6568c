package engine

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// On one node, queue a (quota qa) runs jobs of priority 0 and 100, queue b (quota qb, the
// rest of the node) runs what it may, and a's job of priority 100 asks n GPUs, n within
// a's quota. Against an exhaustive search of every set of running jobs: wherever a set
// exists that makes room with a's own lower-priority jobs and b's jobs above its quota (a
// ending within its quota, b at or above its own), the job runs; and nothing is evicted
// that the rules do not allow.
//
// go test ./engine -run TestPreemptAndReclaimFindTheAllowedSet -rapid.checks=3000
func TestPreemptAndReclaimFindTheAllowedSet(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
		g := rapid.IntRange(2, 8).Draw(t, "gpus")
		qa := rapid.IntRange(1, g-1).Draw(t, "quotaA")
		qb := g - qa
		snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", g)}, Queues: []Queue{quotaQueue("a", qa), quotaQueue("b", qb)}}
		type held struct {
			q    QueueID
			gpus int
			prio int32
		}
		var jobs []held
		next := 0
		run := func(q QueueID, k int, prio int32) {
			size := min(rapid.IntRange(1, 2).Draw(t, "size"), g-next)
			var gpus []int
			for i := 0; i < size; i++ {
				gpus = append(gpus, next+i)
			}
			next += size
			j := running(JobID(fmt.Sprintf("%s-%d", q, k)), q, "n1", gpus...)
			j.Class, j.Priority, j.StartTime, j.SubmitTime = ClassTrain, prio, now.Add(-time.Hour), now.Add(-time.Hour)
			snap.Jobs = append(snap.Jobs, j)
			jobs = append(jobs, held{q, size, prio})
		}
		for k := rapid.IntRange(0, 3).Draw(t, "aJobs"); k > 0 && next < g; k-- {
			run("a", k, rapid.SampledFrom([]int32{0, 0, 100}).Draw(t, "prio"))
		}
		for k := rapid.IntRange(0, 4).Draw(t, "bJobs"); k > 0 && next < g; k-- {
			run("b", k, 0)
		}
		n := rapid.IntRange(1, qa).Draw(t, "need")
		snap.Jobs = append(snap.Jobs, Job{ID: "high", Queue: "a", Class: ClassTrain, Priority: 100, MinMember: 1, SubmitTime: now,
			Pods: []Pod{{ID: "high-0", Request: PodRequest{GPUs: n}}}})
		var la, lb int
		for _, j := range jobs {
			if j.q == "a" {
				la += j.gpus
			} else {
				lb += j.gpus
			}
		}
		exists := ""
		for mask := 0; mask < 1<<len(jobs) && exists == ""; mask++ {
			free, aLost, bLost := g-next, 0, 0
			ok := true
			for i, j := range jobs {
				if mask&(1<<i) == 0 {
					continue
				}
				free += j.gpus
				switch {
				case j.q == "b":
					bLost += j.gpus
				case j.prio < 100:
					aLost += j.gpus
				default:
					ok = false // a job of a's at the job's own priority is not preempted
				}
			}
			if ok && free >= n && la-aLost+n <= qa && (bLost == 0 || lb > qb && lb-bLost >= qb) {
				exists = fmt.Sprintf("stopping %b frees %d GPUs (a ends at %d of %d, b at %d of %d)", mask, free, la-aLost+n, qa, lb-bLost, qb)
			}
		}
		plan := New(Options{}).Schedule(snap)
		if r, waits := plan.Pending["high"]; waits && exists != "" {
			t.Fatalf("high waits (%s) where %s", r.Message, exists)
		}
		// What it evicts is allowed: of a's, only lower priority; of b's, only while a ends
		// within its quota (the owner's due, for which a larger job of b's may go whole)
		// or b at or above its own.
		bEnd, aEnd := lb, la
		if _, waits := plan.Pending["high"]; !waits {
			aEnd += n
		}
		for _, e := range plan.Evictions {
			for i, j := range snap.Jobs[:len(jobs)] {
				switch {
				case j.ID != e.Job:
				case j.Queue == "b":
					bEnd -= jobs[i].gpus
				case j.Priority >= 100:
					t.Fatalf("%s of a's, at the job's own priority, was evicted: %v", j.ID, plan.Evictions)
				default:
					aEnd -= jobs[i].gpus
				}
			}
		}
		// (a's end is where the decision leaves it, before any idle GPU is lent to it.)
		if bEnd < lb && bEnd < qb && aEnd > qa {
			t.Fatalf("b ends at %d below its quota %d while a ends at %d past its own %d: evictions %v", bEnd, qb, aEnd, qa, plan.Evictions)
		}
	})
}
