package engine

import (
	"fmt"
	"slices"
)

// reclaimAndPreempt gives a waiting job room that takes both lower-priority work of its
// own queue and GPUs of queues above their share, in one search, where reclaim alone and
// preemption alone found none (DESIGN.md rule 4, with rule 5): a high-priority job of a
// queue below its quota would otherwise wait for good, its queue below quota and the
// borrower above, when preemption frees too little and reclaim would take its queue past
// its quota. Each victim is judged by the rule of its kind: a unit of another queue as
// reclaim judges it (reclaimRules: where the reclaimer's side and each loser end), one of
// the job's own queue as preemption does (lower priority, past its preemptMinRuntime); the
// job's queue may end where reclaim would let it, its own victims counted out of it.
func (s *session) reclaimAndPreempt(pool *candidatePool) {
	fails := map[string]bool{} // final within the action, as in reclaim and preempt
	for _, j := range s.waiting(false) {
		pods := s.item(j, passGangs)
		if pods == nil {
			continue
		}
		need := s.need(pods)
		if need[j.res] == 0 {
			continue
		}
		// Limits and non-preemptible quota as preemption gates them (what the victims of
		// its own queue hold is room); the end state is judged once the victims are known.
		if _, ok := s.admit(j, need, gatePreempt); !ok {
			continue
		}
		key := string(j.q.q.ID) + "#" + fmt.Sprint(j.j.Priority) + "#" + shapeKey(j, pods)
		if fails[key] {
			continue
		}
		// Without lower-priority work of its own queue this is reclaim alone, which failed.
		lower := func(u unit) bool { return u.job.j.Priority < j.j.Priority && u.bound() }
		if !slices.ContainsFunc(pool.byQueue[j.q], lower) {
			continue
		}
		inQuota := quotaRoom(j.q, j.res, need[j.res])
		reclaimable, preemptable := s.keepUnshielded(j, protectReclaim), s.keepUnshielded(j, protectPreempt)
		include := func(q *queueState) bool {
			if q == j.q {
				return true
			}
			a := q.alloc[j.res]
			return a > q.fair[j.res] || (inQuota && a > q.deserved[j.res])
		}
		keep := func(u unit) bool {
			if u.job.q == j.q {
				return lower(u) && preemptable(u)
			}
			return reclaimable(u)
		}
		before := s.queueAllocs(j.res)
		reclaimed, preempted := s.reclaimReason(j, need[j.res], before), preemptReason(j)
		vs := &victimSearch{job: j, pods: pods, cands: pool.from(j.res, include, keep, nil),
			reason: func(u unit) Reason {
				if u.job.q == j.q {
					return preempted(u)
				}
				return reclaimed(u)
			},
			accept: func() bool {
				ok, _ := s.reclaimRules(j.q, j.res, before)
				return ok
			},
			move: true,
			// The walk takes first from whoever is furthest over its fair share, and may
			// find room only by taking that queue below what the rules leave it, where a
			// larger unit of it, or the job's own lower-priority work listed after, would
			// have spared it: few candidates on a node are weighed set by set.
			exact: true,
		}
		ok := vs.run(s)
		if ok {
			s.commits++
		} else {
			fails[key] = true
		}
	}
}
