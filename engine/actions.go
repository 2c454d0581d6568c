package engine

import (
	"fmt"
	"iter"
	"math"
	"slices"
)

// candidatePool gathers the victim units once per cycle, after allocation, per queue and
// in victim order. Units evicted since are skipped when read, so a thousand pending jobs
// do not each walk and sort every running job. Jobs started later in the cycle are not
// candidates: evicting what was just placed would only undo the cycle's own work. Nor are
// units taken once this cycle and placed again (moved, or started again by a preemption
// that stopped other work for them): taking one twice would undo the move or the
// preemption that made its room, and what was stopped for it would be stopped for nothing.
type candidatePool struct {
	byQueue map[*queueState][]unit
	queues  []*queueState
	paths   map[*queueState][]*queueState // each queue's path from its root
}

func (s *session) newPool() *candidatePool {
	c := &candidatePool{byQueue: map[*queueState][]unit{}, paths: map[*queueState][]*queueState{}}
	for _, j := range s.jobs {
		if j.preemptible && j.bound > 0 {
			if _, ok := c.byQueue[j.q]; !ok {
				c.queues = append(c.queues, j.q)
				c.paths[j.q] = pathOf(j.q)
			}
			c.byQueue[j.q] = append(c.byQueue[j.q], units(j)...)
		}
	}
	for _, us := range c.byQueue {
		sortVictims(us)
	}
	return c
}

// from yields the units of the queues include accepts, always from the queue that would
// then be furthest over its fair share (so a reclaim takes from several borrowers alike
// rather than pushing one below its share), skipping units no longer running, those
// keep rejects and, with stay set, those after which their queue, left with left GPUs,
// is not one stay accepts. It is lazy: a search stops reading once it has found enough
// places.
func (c *candidatePool) from(res Resource, include func(*queueState) bool, keep func(unit) bool, stay func(q *queueState, left int64) bool) iter.Seq[unit] {
	type head struct {
		q    *queueState
		path []*queueState // from the root down to q
		next int
		left int64 // the queue's GPUs once the units yielded so far are gone
	}
	var qs []*queueState
	for _, q := range c.queues {
		if include(q) {
			qs = append(qs, q)
		}
	}
	over := func(h *head) float64 {
		if f := h.q.fair[res]; f > 0 {
			return float64(h.left) / float64(f)
		}
		return math.Inf(1)
	}
	first := func(a, b *head) bool { // a gives before b
		if x, y := over(a), over(b); x != y {
			return x > y
		}
		if pa, pb := divergingPriorities(a.path, b.path); pa != pb {
			return pa < pb // the lower queue priority gives first
		}
		if a.left != b.left {
			return a.left > b.left
		}
		return a.q.q.ID < b.q.q.ID
	}
	return func(yield func(unit) bool) {
		// Every walk starts afresh (a search may walk twice). The heads stay sorted, the
		// next to give first; only the first moves, and only down.
		hs := make([]*head, len(qs))
		for i, q := range qs {
			hs[i] = &head{q: q, path: c.paths[q], left: q.alloc[res]}
		}
		slices.SortFunc(hs, func(a, b *head) int {
			if first(a, b) {
				return -1
			}
			return 1
		})
		for len(hs) > 0 {
			h := hs[0]
			us := c.byQueue[h.q]
			if h.next >= len(us) {
				hs = hs[1:]
				continue
			}
			u := us[h.next]
			h.next++
			if u.job.res != res || !u.bound() || u.takenThisCycle() || (keep != nil && !keep(u)) || (stay != nil && !stay(h.q, h.left-u.gpu)) {
				continue
			}
			h.left -= u.gpu
			for i := 0; i+1 < len(hs) && first(hs[i+1], hs[i]); i++ {
				hs[i], hs[i+1] = hs[i+1], hs[i]
			}
			if !yield(u) {
				return
			}
		}
	}
}

// pathOf lists the queue's ancestors from the root down to the queue.
func pathOf(q *queueState) []*queueState {
	var p []*queueState
	for a := q; a != nil; a = a.parent {
		p = append(p, a)
	}
	slices.Reverse(p)
	return p
}

// divergingPriorities compares two queues as their tree does: the priorities of the
// siblings where their paths part (of the queues themselves where they are siblings).
func divergingPriorities(a, b []*queueState) (int32, int32) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i].q.Priority, b[i].q.Priority
		}
	}
	return 0, 0
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
		ok := s.inPools(j, func() bool { return s.reclaimFor(j, pool, fails) })
		for ok && j.started() {
			ok = s.reclaimFor(j, pool, fails)
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
	if need[j.res] == 0 {
		return false // only GPUs are reclaimed
	}
	if _, ok := s.admit(j, need, gateReclaim); !ok {
		return false
	}
	key := string(j.q.q.ID) + "#" + shapeKey(j, pods)
	if fails[key] {
		return false
	}
	// Within its quota (or its department's) a queue takes from any queue above its own
	// quota or fair share; beyond it, only from queues above their fair share.
	inQuota := quotaRoom(j.q, j.res, need[j.res])
	// A project whose department has room, though not for the whole need, may take part of
	// it from its siblings (which leaves the department where it was) and the rest from
	// outside: queues above their quota are candidates for it too, and the rules judge
	// where everyone ends. Otherwise neither the search from outside (by fair share alone)
	// nor the one within the department found a set that takes from both.
	byQuota := inQuota || (j.q.parent != nil && quotaRoom(j.q.parent, j.res, 0))
	keep := s.keepUnshielded(j, protectReclaim)
	cands := pool.from(j.res, func(q *queueState) bool {
		a := q.alloc[j.res]
		return q != j.q && (a > q.fair[j.res] || (byQuota && a > q.deserved[j.res])) && mayGainFrom(j.q, q, j.res)
	}, keep, nil)
	victimsShort := false // a trial was refused by quota only for where its victims ended
	before := s.queueAllocs(j.res)
	vs := &victimSearch{job: j, pods: pods, cands: cands,
		reason: s.reclaimReason(j, need[j.res], before),
		accept: func(stopped []unit) bool {
			ok, short := s.reclaimRules(j.q, j.res, before, stopped)
			victimsShort = victimsShort || short
			return ok
		},
		move: true,
		// Where the walks in victim order find no set the rules allow on a node, its few
		// candidates are weighed set by set (tryExact).
		exact: true,
		// Beyond its quota a queue reclaims GPUs, not the CPU of a node whose GPUs it
		// could use as they are.
		gpusOnly: !inQuota,
	}
	ok := vs.run(s)
	if !ok && inQuota && victimsShort {
		// By quota: the walk above takes first from whoever is furthest over its fair
		// share, and a trial on a node evicts in that order, so a block the rules allow
		// (from a queue above its quota that stays at or above it, even at its fair
		// share) may have been passed over for one they do not. Look for that one alone
		// where a trial found room and was refused only for taking a queue below its quota.
		vs.cands = pool.from(j.res, func(q *queueState) bool {
			return q != j.q && q.alloc[j.res] > q.deserved[j.res] && mayGainFrom(j.q, q, j.res)
		}, keep, func(q *queueState, left int64) bool { return left >= q.deserved[j.res] })
		ok = vs.run(s)
	}
	if !ok && j.q.parent != nil && quotaRoom(j.q.parent, j.res, 0) {
		// Within its department: taking from a sibling leaves the department where it was,
		// so its own quota is not in question, where a victim outside it may have been
		// refused for taking the department past its quota (a project whose quota its
		// department's does not cover), or where the need, were it all taken from outside,
		// would pass the department's quota (inQuota) though the part from its own
		// projects would not. Look among the department's queues alone; the rules judge
		// where everyone ends.
		dept := j.q.parent
		vs.cands = pool.from(j.res, func(q *queueState) bool {
			return q != j.q && q.alloc[j.res] > q.deserved[j.res] && within(q, dept)
		}, keep, func(q *queueState, left int64) bool { return left >= q.deserved[j.res] })
		ok = vs.run(s)
	}
	if !ok {
		fails[key] = true
		return false
	}
	s.commits++
	return true
}

// mayGainFrom reports whether a reclaim for queue r may take from queue v at all. Every
// queue on r's path below where the two paths meet gains what is taken from v, and the
// rules allow a reclaim only where each queue that gained ends within its fair share or
// its quota (reclaimRules). One already at its fair share, with no quota room left on its
// way up, can end within neither: v's units need not be read. (A set in which that queue
// does not gain, its own subtree losing as much as the reclaimer takes, would stop v's
// work beside GPUs its side already gives up; such sets are not looked for.) On a large
// cluster most candidates are of other departments, and a department past its
// share and its quota would otherwise try them all, node by node, to see every set
// refused.
func mayGainFrom(r, v *queueState, res Resource) bool {
	for a := r; a != nil && !within(v, a); a = a.parent {
		if a.alloc[res] >= a.fair[res] && !quotaRoom(a, res, 1) {
			return false
		}
	}
	return true
}

// reclaimReason names, for a unit reclaimed for job j (needing need of its resource), the
// rule that allowed it: the reclaimer's quota or its fair share, and the victim's.
func (s *session) reclaimReason(j *jobState, need int64, before allocs) func(unit) Reason {
	return func(u unit) Reason {
		mine, what := MilliGPU(j.q.fair[j.res]), "fair share"
		if before[j.q.idx]+need > j.q.fair[j.res] {
			mine, what = MilliGPU(j.q.deserved[j.res]), "quota"
		}
		v := u.job.q
		theirs, whatV := MilliGPU(v.fair[j.res]), "fair share"
		if before[v.idx] <= v.fair[j.res] {
			theirs, whatV = MilliGPU(v.deserved[j.res]), "quota"
		}
		unit := s.unitName(j.res)
		return reasonf(ReasonReclaimed, "reclaimed by queue %s for job %s: %s is below its %s (%s/%s %s), %s is above its %s (%s/%s %s)",
			j.q.q.ID, j.j.ID, j.q.q.ID, what, MilliGPU(before[j.q.idx]), mine, unit,
			v.q.ID, whatV, MilliGPU(before[v.idx]), theirs, unit)
	}
}

// preemptReason names, for a unit of its own queue preempted for job j, the priorities.
func preemptReason(j *jobState) func(unit) Reason {
	return func(u unit) Reason {
		return reasonf(ReasonPreempted, "preempted by higher-priority job %s (priority %d > %d) in queue %s",
			j.j.ID, j.j.Priority, u.job.j.Priority, j.q.q.ID)
	}
}

// within reports whether queue q is in the subtree of dept.
func within(q, dept *queueState) bool {
	for ; q != nil; q = q.parent {
		if q == dept {
			return true
		}
	}
	return false
}

// quotaRoom reports whether the queue stays within its quota with gpu more: its own
// (min(quota, demand, limit)), or its department's, which is owed to its projects
// whether or not they carry quotas of their own.
func quotaRoom(q *queueState, res Resource, gpu int64) bool {
	for ; q != nil; q = q.parent {
		if q.alloc[res]+gpu <= q.deserved[res] {
			return true
		}
	}
	return false
}

// endsWithinQuota reports whether a queue that gained in a reclaim ends within its
// quota: its own, or, where its department gained too, the department's. A
// department's quota is owed to its projects whether or not they carry quotas of their
// own, and is reclaimed for them from borrowers outside it; between the projects of a
// department, which does not gain, each project's own quota is the bound.
func endsWithinQuota(q *queueState, res Resource, before allocs) bool {
	for ; q != nil; q = q.parent {
		if q.alloc[res] <= q.deserved[res] {
			return true
		}
		if q.parent == nil || q.parent.alloc[res] <= before[q.parent.idx] {
			return false
		}
	}
	return false
}

// reclaimRules judge the end state of a reclaim by where each queue ends (DESIGN.md
// 3.4). A reclaim between siblings leaves their department where it was, so the
// department is not judged. It is allowed by one of three rules:
//   - owed: every queue on the reclaimer's side that gained ends within both its quota
//     (min(quota, demand, limit); a project with none, its department's: endsWithinQuota)
//     and its fair share, and every queue that lost was above both; a victim may then
//     fall below them, trading a large job for a smaller one (below its own quota only
//     where it could not take the GPUs back by quota: ownQuotaBinds);
//   - by fair share: the gainers end within their fair shares, and every queue that
//     lost was above its own and ends no lower, or lower only where it could not take
//     the GPUs back and is left less short than the gainer was (mayEndBelowShare);
//   - by quota: the gainers end within their quotas, and every queue that lost was above
//     its quota and ends no lower, even where it was within its fair share.
//
// Under the last two, a sibling that lost must not end below its fair share where the
// gainer ends above its own (cannotTakeBack): a queue can then never take back what was
// reclaimed from it, so reclaim never loops, also when the rules alternate. (KAI-Scheduler
// asks more, that the gainer end no fuller than the loser, which refuses a queue its
// quota whenever taking it leaves the gainer fuller, as a block taken from a queue at its
// fair share does.)
//
// It also reports whether the rule by quota failed only on the victims' side: the
// gainers end within their quotas, but a queue that lost was not above its quota or
// ends below it.
//
// Only the queues on the stopped units' paths can have lost (a moved unit keeps its
// queue's GPUs, and the reclaimer's side only gains): those alone are read, not every queue.
func (s *session) reclaimRules(reclaimer *queueState, res Resource, before allocs, stopped []unit) (ok, victimsShort bool) {
	chain := map[*queueState]bool{}
	owed, byFair, byQuota := true, true, true
	for q := reclaimer; q != nil; q = q.parent {
		chain[q] = true
		if a := q.alloc[res]; a > before[q.idx] {
			inFair, inQuota := a <= q.fair[res], endsWithinQuota(q, res, before)
			owed = owed && inFair && inQuota
			byFair = byFair && inFair
			byQuota = byQuota && inQuota
		}
	}
	gainersInQuota := byQuota
	var losers []*queueState
	for _, u := range stopped {
		for q := u.job.q; q != nil && !chain[q]; q = q.parent {
			if !slices.Contains(losers, q) {
				losers = append(losers, q)
			}
		}
	}
	for _, q := range losers {
		a, b := q.alloc[res], before[q.idx]
		if a >= b {
			continue
		}
		fair, quota := q.fair[res], q.deserved[res]
		owed = owed && b > fair && b > quota && (a >= quota || s.ownQuotaBinds(q, res, chain, before))
		byFair = byFair && b > fair && (a >= fair || s.mayEndBelowShare(q, res, chain, before))
		byQuota = byQuota && b > quota && a >= quota
		if (byFair || byQuota) && !s.cannotTakeBack(q, res, chain, before) {
			byFair, byQuota = false, false
		}
	}
	ok = owed || byFair || byQuota
	return ok, !ok && gainersInQuota && !byQuota
}

// cannotTakeBack reports whether the losing queue v, where it ends, cannot take back what
// its sibling on the reclaimer's side gained: it could by fair share only if it ends
// below its fair share while that sibling ends above its own. As owed or by quota it
// cannot: it ends at or above its quota (by quota), or at or above its fair share (by
// fair share), and where quotas oversubscribe a level every fair share there is within
// its quota, the gainer's too.
func (s *session) cannotTakeBack(v *queueState, res Resource, chain map[*queueState]bool, before allocs) bool {
	r := s.gainingSibling(v, res, chain, before)
	return r == nil || r.alloc[res] <= r.fair[res] || v.alloc[res] >= v.fair[res]
}

// gainingSibling is the sibling of the losing queue v on the reclaimer's side that gained
// (nil where v's level has none): where v ends is judged against it.
func (s *session) gainingSibling(v *queueState, res Resource, chain map[*queueState]bool, before allocs) *queueState {
	siblings := s.roots
	if v.parent != nil {
		siblings = v.parent.children
	}
	for _, r := range siblings {
		if chain[r] && r.alloc[res] > before[r.idx] {
			return r
		}
	}
	return nil
}

// ownQuotaBinds reports whether the losing queue v, falling below its own quota as owed to
// the reclaimer, could not take the GPUs back by quota: its sibling on the reclaimer's side
// ends within its own quota, or no job of v that waits fits v's quota (a gang larger than
// the quota went). Otherwise a project of quota 0 in a department of quota 5, taking a
// sibling's job under the department's quota once idle GPUs let the department gain, would
// lose it again to the sibling by quota, and the two traded the job every cycle.
func (s *session) ownQuotaBinds(v *queueState, res Resource, chain map[*queueState]bool, before allocs) bool {
	r := s.gainingSibling(v, res, chain, before)
	return r == nil || r.alloc[res] <= r.deserved[res] || !s.waitsWithin(v, res, v.deserved[res]-v.alloc[res])
}

// waitsWithin reports whether a job in v's subtree has pods waiting whose next step (a
// gang's minimum to start, one pod to grow) costs no more than room of res. It is asked
// only where a reclaim would take a queue below its own quota, which is rare.
func (s *session) waitsWithin(v *queueState, res Resource, room int64) bool {
	for _, j := range s.jobs {
		if j.res != res || j.bound >= len(j.pods) || !within(j.q, v) {
			continue
		}
		n := 1
		if !j.started() {
			n = max(j.j.MinMember-j.bound, 1)
		}
		var next []*podState
		for _, p := range j.pods {
			if len(next) < n && p.node == nil {
				next = append(next, p)
			}
		}
		if s.need(next)[res] <= room {
			return true
		}
	}
	return false
}

// mayEndBelowShare reports whether the losing queue v may end below its fair share in a
// reclaim by fair share (rule 4 as written): where it could not take the GPUs back
// without pushing its sibling on the reclaimer's side below that sibling's own share,
// and the gap it is left with is narrower than the one the sibling started from. It
// could take them back by fair share only from a sibling ending above its share, and by
// quota only where it ends below its quota and the sibling above its own. The narrower
// gap keeps a reclaim from trading one queue's shortfall for a larger one, or for one as
// large (two queues would then trade a job back and forth): a queue 1 GPU short may not
// take a 3-GPU job that leaves its owner 2 short, while a queue at 0 of its share of 7
// may take a 2-GPU job that leaves its owner 1 short of 9.
func (s *session) mayEndBelowShare(v *queueState, res Resource, chain map[*queueState]bool, before allocs) bool {
	r := s.gainingSibling(v, res, chain, before)
	if r == nil {
		return false
	}
	if a := r.alloc[res]; a > r.fair[res] || (v.alloc[res] < v.deserved[res] && a > r.deserved[res]) {
		return false // v could take it back
	}
	// Shares rounded to whole GPUs move with who holds what (the odd GPU goes where it
	// lets a job start), each within one grain of the exact division, which does not:
	// the gaps are compared with a grain's margin on each side, so that the exact gap
	// narrows and the next cycle's shares cannot make the reverse a narrowing too.
	gap := v.fair[res] - v.alloc[res]
	// Nor may v be left shorter than the sibling gains: a fifth of a GPU bought with a
	// 4-GPU job would leave two queues short of their shares, the GPUs between idle.
	return gap+v.grain[res]+r.grain[res] <= r.fair[res]-before[r.idx] && gap <= r.alloc[res]-before[r.idx]
}

// preempt lets a pending job evict lower-priority preemptible work of its own queue
// (DESIGN.md 3.5), without the queue growing past its fair share.
func (s *session) preempt(pool *candidatePool) {
	fails := map[string]bool{} // final within the action, as in reclaim
	for _, j := range s.waiting(false) {
		s.inPools(j, func() bool { return s.preemptFor(j, pool, fails) })
	}
}

// preemptFor tries to start the job by stopping lower-priority work of its own queue; it
// reports success.
func (s *session) preemptFor(j *jobState, pool *candidatePool, fails map[string]bool) bool {
	pods := s.item(j, passGangs)
	if pods == nil {
		return false
	}
	need := s.need(pods)
	if _, ok := s.admit(j, need, gatePreempt); !ok {
		return false
	}
	key := string(j.q.q.ID) + "#" + fmt.Sprint(j.j.Priority) + "#" + shapeKey(j, pods)
	if fails[key] {
		return false
	}
	shielded := s.keepUnshielded(j, protectPreempt)
	cands := pool.from(j.res, func(q *queueState) bool { return q == j.q },
		func(u unit) bool { return u.job.j.Priority < j.j.Priority && shielded(u) }, nil)
	before := s.queueAllocs(j.res)
	vs := &victimSearch{job: j, pods: pods, cands: cands,
		reason: preemptReason(j),
		accept: func([]unit) bool {
			for q := j.q; q != nil; q = q.parent {
				if a := q.alloc[j.res]; a > before[q.idx] && a > q.fair[j.res] {
					return false
				}
			}
			return true
		},
		// Beyond its quota, as in reclaim, a queue's higher-priority work takes its
		// lower-priority work's GPUs, not its CPU: a victim of a reclaim, started again by
		// stopping more of its own queue for the CPU, left that queue below its share to
		// take it all back the next cycle, every cycle.
		gpusOnly: !quotaRoom(j.q, j.res, need[j.res]),
	}
	if vs.run(s) {
		s.commits++
		return true
	}
	fails[key] = true
	return false
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
		if need[j.res] == 0 || s.freeFor(j) < need[j.res] {
			continue
		}
		if _, ok := s.admit(j, need, gateFairShare); !ok {
			continue
		}
		key := shapeKey(j, pods)
		if c, ok := fails[key]; ok && c == s.commits {
			continue
		}
		// A pod bursting past its request is not moved to make room: moving it would
		// stop it, which only the rules for bursts (reclaimBursts) may do.
		// A move restarts the job, so it is held to the minimum runtime as an eviction
		// is: a job of another queue to its reclaimMinRuntime, one of the mover's own
		// queue to its preemptMinRuntime (else a tenant within its share could have other
		// teams' jobs restarted again and again while free GPUs are scattered).
		reclaimShield, preemptShield := s.keepUnshielded(j, protectReclaim), s.keepUnshielded(j, protectPreempt)
		steady := func(u unit) bool {
			if slices.ContainsFunc(u.pods, func(p *podState) bool { return p.share.over > 0 }) {
				return false
			}
			if u.job.q == j.q {
				return preemptShield(u)
			}
			return reclaimShield(u)
		}
		vs := &victimSearch{job: j, pods: pods, cands: pool.from(j.res, func(*queueState) bool { return true }, steady, nil), replace: true,
			reason: func(Unit unit) Reason {
				return reasonf(ReasonConsolidated, "moved to make room for job %s (%s needs contiguous GPUs)", j.j.ID, j.q.q.ID)
			},
			accept: func([]unit) bool { return true },
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
