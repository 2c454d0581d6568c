package engine

import (
	"fmt"
	"slices"
)

// triesPerQueue bounds the searches of a queue's jobs that find no room, per cycle: each
// weighs two kinds of victims, and a cluster of many waiting jobs none of which can start
// (each asking devices no node has) would otherwise pay one for every job.
const triesPerQueue = 8

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
	// A queue's jobs are tried in its order (priority first) until triesPerQueue of them
	// found no room: the ones after have less of their own queue below them to take.
	failed := map[*queueState]int{}
	// The lowest priority of each queue's running preemptible work: without work below a
	// job's priority in its own queue this is reclaim alone, which failed.
	lowest := map[*queueState]int32{}
	for q, us := range pool.byQueue {
		for i, u := range us {
			if p := u.job.j.Priority; i == 0 || p < lowest[q] {
				lowest[q] = p
			}
		}
	}
	for _, j := range s.waiting(false) {
		// Only for a queue below its quota: the guarantee this carries out. Above it, what
		// a queue's work has beyond that is its fair share's to give, which reclaim and
		// preemption each judge alone (and trying both for every waiting job of a loaded
		// cluster cost a tenth of its cycle).
		if low, ok := lowest[j.q]; !ok || low >= j.j.Priority || j.q.alloc[j.res] >= j.q.deserved[j.res] {
			continue
		}
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
		if fails[key] || failed[j.q] >= triesPerQueue {
			continue
		}
		lower := func(u unit) bool { return u.job.j.Priority < j.j.Priority && u.bound() }
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
		// Without another queue to take from this is preemption alone, which failed.
		if !slices.ContainsFunc(pool.queues, func(q *queueState) bool { return q != j.q && include(q) }) {
			continue
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
			accept: func(stopped []unit) bool {
				ok, _ := s.reclaimRules(j.q, j.res, before, stopped)
				return ok
			},
			// Victims stop, as preemption's do: moving them is reclaim's, whose own search
			// failed, and re-placing every trial's victims doubled a loaded cycle.
			// The walk takes first from whoever is furthest over its fair share, and may
			// find room only by taking that queue below what the rules leave it, where a
			// larger unit of it, or the job's own lower-priority work listed after, would
			// have spared it: few candidates on a node are weighed set by set.
			exact: true,
			// A gang too large for one node is left to reclaim and preemption alone: a
			// search across the cluster for every such job of a loaded cluster is dear.
			oneNode: true,
		}
		ok := vs.run(s)
		if ok {
			s.commits++
		} else {
			fails[key] = true
			failed[j.q]++
		}
	}
}
