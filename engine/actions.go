package engine

import "fmt"

// candidatePool gathers victim units once and again only after a committed move, so
// that a thousand pending jobs do not each walk every running job.
type candidatePool struct {
	s       *session
	commits int
	units   []unit
	filter  func(j *jobState) bool
}

func (c *candidatePool) get() []unit {
	if c.units != nil && c.commits == c.s.commits {
		return c.units
	}
	c.units, c.commits = []unit{}, c.s.commits
	for _, j := range c.s.jobs {
		if j.preemptible && j.bound > 0 && c.filter(j) {
			c.units = append(c.units, units(j)...)
		}
	}
	sortVictims(c.units)
	return c.units
}

// reclaim lets a queue below its fair share take GPUs back from queues above theirs
// (DESIGN.md 3.4). Within the reclaimer's quota the victims may fall below their fair
// share (a large job may have to make way for the owner); beyond quota they may not.
func (s *session) reclaim() {
	pool := &candidatePool{s: s, filter: func(j *jobState) bool {
		return j.q.alloc[ResourceGPU] > j.q.fair[ResourceGPU]
	}}
	fails := map[string]int{}
	for _, j := range s.waiting(true) {
		// An elastic job reclaims its growth too, one pod at a time, so that its queue
		// reaches its fair share whatever the size of its other jobs.
		for s.reclaimFor(j, pool, fails) && j.started() {
		}
	}
}

// reclaimFor tries to start the job's next pods by reclaiming; it reports success.
func (s *session) reclaimFor(j *jobState, pool *candidatePool, fails map[string]int) bool {
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
	if c, ok := fails[key]; ok && c == s.commits {
		return false
	}
	var cands []unit
	for _, u := range pool.get() {
		if u.job.q != j.q {
			cands = append(cands, u)
		}
	}
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
		fails[key] = s.commits
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
func (s *session) preempt() {
	pool := &candidatePool{s: s, filter: func(*jobState) bool { return true }}
	fails := map[string]int{}
	for _, j := range s.waiting(false) {
		pods := s.item(j, passGangs)
		if pods == nil {
			continue
		}
		need := s.need(pods)
		if _, ok := s.admit(j, need, gateIdle); !ok {
			continue
		}
		var cands []unit
		for _, u := range pool.get() {
			if u.job.q == j.q && u.job.j.Priority < j.j.Priority {
				cands = append(cands, u)
			}
		}
		if len(cands) == 0 {
			continue
		}
		key := string(j.q.q.ID) + "#" + fmt.Sprint(j.j.Priority) + "#" + shapeKey(j, pods)
		if c, ok := fails[key]; ok && c == s.commits {
			continue
		}
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
			fails[key] = s.commits
		}
	}
}

// consolidate starts a job that failed only because free GPUs are scattered, by moving
// preemptible jobs elsewhere in the same decision (DESIGN.md 3.7): every moved job is
// placed again at once, and no more GPUs move than the pending job gains.
func (s *session) consolidate() {
	pool := &candidatePool{s: s, filter: func(*jobState) bool { return true }}
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
		vs := &victimSearch{job: j, pods: pods, cands: pool.get(), replace: true,
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
