package engine

import (
	"fmt"
	"iter"
	"sort"
)

// candidatePool gathers the victim units once per cycle, after allocation, per queue and
// in victim order. Units evicted since are skipped when read, so a thousand pending jobs
// do not each walk and sort every running job. Jobs started later in the cycle are not
// candidates: evicting what was just placed would only undo the cycle's own work.
type candidatePool struct {
	byQueue map[*queueState][]unit
	queues  []*queueState
}

func (s *session) newPool() *candidatePool {
	c := &candidatePool{byQueue: map[*queueState][]unit{}}
	for _, j := range s.jobs {
		if j.preemptible && j.bound > 0 {
			if _, ok := c.byQueue[j.q]; !ok {
				c.queues = append(c.queues, j.q)
			}
			c.byQueue[j.q] = append(c.byQueue[j.q], units(j)...)
		}
	}
	for _, us := range c.byQueue {
		sortVictims(us)
	}
	return c
}

// from yields the units of the queues include accepts, the queue furthest over its fair
// share first, skipping units no longer running and those keep rejects. It is lazy: a
// search stops reading once it has found enough places to try.
func (c *candidatePool) from(include func(*queueState) bool, keep func(unit) bool) iter.Seq[unit] {
	var qs []*queueState
	for _, q := range c.queues {
		if include(q) {
			qs = append(qs, q)
		}
	}
	sort.SliceStable(qs, func(a, b int) bool { return shareRatio(qs[a]) > shareRatio(qs[b]) })
	return func(yield func(unit) bool) {
		for _, q := range qs {
			for _, u := range c.byQueue[q] {
				if u.bound() && (keep == nil || keep(u)) && !yield(u) {
					return
				}
			}
		}
	}
}

// reclaim lets a queue below its fair share take GPUs back from queues above theirs
// (DESIGN.md 3.4). Within the reclaimer's quota the victims may fall below their fair
// share (a large job may have to make way for the owner); beyond quota they may not.
func (s *session) reclaim(pool *candidatePool) {
	// Within this action a failure is final: reclaimers only gain and victims only lose,
	// so what could not be reclaimed once cannot be later.
	fails := map[string]bool{}
	for _, j := range s.waiting(true) {
		// An elastic job reclaims its growth too, one pod at a time, so that its queue
		// reaches its fair share whatever the size of its other jobs.
		for s.reclaimFor(j, pool, fails) && j.started() {
		}
	}
}

// reclaimFor tries to start the job's next pods by reclaiming; it reports success.
func (s *session) reclaimFor(j *jobState, pool *candidatePool, fails map[string]bool) bool {
	pods := s.item(j, passGangs)
	if j.started() {
		pods = s.item(j, passGrow)
	}
	if pods == nil {
		return false
	}
	need := s.need(pods)
	if need[ResourceGPU] == 0 {
		return false // only GPUs are reclaimed
	}
	if _, ok := s.admit(j, need, gateFairShare); !ok {
		return false
	}
	key := string(j.q.q.ID) + "#" + shapeKey(j, pods)
	if fails[key] {
		return false
	}
	cands := pool.from(func(q *queueState) bool {
		return q != j.q && q.alloc[ResourceGPU] > q.fair[ResourceGPU]
	}, nil)
	before := s.queueAllocs()
	vs := &victimSearch{job: j, pods: pods, cands: cands,
		reason: func(u unit) Reason {
			return reasonf(ReasonReclaimed, "reclaimed by queue %s for job %s: %s is below its fair share (%s/%s GPUs), %s is above (%s/%s GPUs)",
				j.q.q.ID, j.j.ID, j.q.q.ID, MilliGPU(before[j.q]), j.q.fair.GPU(),
				u.job.q.q.ID, MilliGPU(before[u.job.q]), u.job.q.fair.GPU())
		},
		accept: func() bool { return s.reclaimRules(j.q, before) },
	}
	if !vs.run(s) {
		fails[key] = true
		return false
	}
	s.commits++
	return true
}

// reclaimRules judge the end state of a reclaim: the reclaimer's side ends at or below
// its fair share; every victim queue was above its own; and unless the reclaimer is only
// taking its quota, no victim queue ends below its fair share. Together these mean no
// queue can reclaim back, so reclaim never loops.
func (s *session) reclaimRules(reclaimer *queueState, before map[*queueState]int64) bool {
	chain := map[*queueState]bool{}
	inQuota := true
	for q := reclaimer; q != nil; q = q.parent {
		chain[q] = true
		a := q.alloc[ResourceGPU]
		if a > before[q] {
			if a > q.fair[ResourceGPU] {
				return false
			}
			if a > q.deserved[ResourceGPU] {
				inQuota = false
			}
		}
	}
	for _, q := range s.queues {
		a, b := q.alloc[ResourceGPU], before[q]
		if chain[q] || a >= b {
			continue
		}
		if b <= q.fair[ResourceGPU] || (!inQuota && a < q.fair[ResourceGPU]) {
			return false
		}
	}
	return true
}

// preempt lets a pending job evict lower-priority preemptible work of its own queue
// (DESIGN.md 3.5), without the queue growing past its fair share.
func (s *session) preempt(pool *candidatePool) {
	fails := map[string]bool{} // final within the action, as in reclaim
	for _, j := range s.waiting(false) {
		pods := s.item(j, passGangs)
		if pods == nil {
			continue
		}
		need := s.need(pods)
		if _, ok := s.admit(j, need, gateIdle); !ok {
			continue
		}
		key := string(j.q.q.ID) + "#" + fmt.Sprint(j.j.Priority) + "#" + shapeKey(j, pods)
		if fails[key] {
			continue
		}
		cands := pool.from(func(q *queueState) bool { return q == j.q },
			func(u unit) bool { return u.job.j.Priority < j.j.Priority })
		before := s.queueAllocs()
		vs := &victimSearch{job: j, pods: pods, cands: cands,
			reason: func(u unit) Reason {
				return reasonf(ReasonPreempted, "preempted by higher-priority job %s (priority %d > %d) in queue %s",
					j.j.ID, j.j.Priority, u.job.j.Priority, j.q.q.ID)
			},
			accept: func() bool {
				for q := j.q; q != nil; q = q.parent {
					if a := q.alloc[ResourceGPU]; a > before[q] && a > q.fair[ResourceGPU] {
						return false
					}
				}
				return true
			},
		}
		if vs.run(s) {
			s.commits++
		} else {
			fails[key] = true
		}
	}
}

// consolidate starts a job that failed only because free GPUs are scattered, by moving
// preemptible jobs elsewhere in the same decision (DESIGN.md 3.7): every moved job is
// placed again at once, and no more GPUs move than the pending job gains.
func (s *session) consolidate(pool *candidatePool) {
	fails := map[string]int{}
	for _, j := range s.waiting(false) {
		if j.reason.Code != ReasonNoFit && j.reason.Code != ReasonGangPartial {
			continue
		}
		pods := s.item(j, passGangs)
		if pods == nil {
			continue
		}
		need := s.need(pods)
		if need[ResourceGPU] == 0 || s.freeFor(j) < need[ResourceGPU] {
			continue
		}
		if _, ok := s.admit(j, need, gateFairShare); !ok {
			continue
		}
		key := shapeKey(j, pods)
		if c, ok := fails[key]; ok && c == s.commits {
			continue
		}
		vs := &victimSearch{job: j, pods: pods, cands: pool.from(func(*queueState) bool { return true }, nil), replace: true,
			reason: func(Unit unit) Reason {
				return reasonf(ReasonConsolidated, "moved to make room for job %s (%s needs contiguous GPUs)", j.j.ID, j.q.q.ID)
			},
			accept: func() bool { return true },
		}
		if vs.run(s) {
			s.commits++
		} else {
			fails[key] = s.commits
		}
	}
}

// freeFor is the free GPU capacity on nodes the job may use.
func (s *session) freeFor(j *jobState) int64 {
	var f int64
	for _, n := range s.nodes {
		if s.eligible(j, n) {
			f += int64(freeMilli(n))
		}
	}
	return f
}
