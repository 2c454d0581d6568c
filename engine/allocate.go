package engine

import (
	"math"
	"strconv"
	"strings"
)

// pass is one sweep of the allocate action.
type pass int

const (
	// passGangs starts pending jobs (their MinMember pods) within fair share.
	passGangs pass = iota
	// passGrow adds elastic pods beyond MinMember, one at a time, within fair share.
	passGrow
	// passIdleGangs and passIdleGrow lend what is still free after reclaim to whoever can
	// use it, over fair share; such work is preemptible and is taken back by reclaim when
	// owners need it. Whole jobs go first so that small elastic pods do not fragment
	// the free GPUs a pending gang could use.
	passIdleGangs
	passIdleGrow
)

func (p pass) starts() bool { return p == passGangs || p == passIdleGangs }

// item is the pods a job needs next: its gang (MinMember) if it has not started, or one
// elastic pod if it has.
func (s *session) item(j *jobState, p pass) []*podState {
	if j.stopped {
		return nil
	}
	unbound := j.unboundPods()
	if len(unbound) == 0 {
		return nil
	}
	if !j.started() {
		if !p.starts() || len(j.pods) < j.j.MinMember {
			// A gang whose pods are not all created yet (a Job controller creating them one
			// by one) must not start with those that are.
			return nil
		}
		need := max(j.j.MinMember-j.bound, 1)
		return unbound[:min(need, len(unbound))]
	}
	if p.starts() {
		return nil
	}
	return unbound[:1]
}

// hasItem reports whether item would return pods, without building the list: queue
// order asks it for every queue at every pick.
func (s *session) hasItem(j *jobState, p pass) bool {
	if j.bound >= len(j.pods) || j.stopped {
		return false
	}
	if !j.started() {
		return p.starts() && len(j.pods) >= j.j.MinMember
	}
	return !p.starts()
}

func (s *session) need(pods []*podState) Resources {
	var r Resources
	for _, p := range pods {
		r = r.Add(s.pendingCost(p.p.Request, p.job.res))
	}
	return r
}

// allocate places pending work on free capacity, queue by queue: always from the queue
// furthest below its fair share, inside it by priority and submission time.
func (s *session) allocate(p pass) {
	cursor := make(map[*queueState]int, len(s.queues))
	order := &queueOrder{s: s, p: p, cursor: cursor, memo: make([]orderMemo, len(s.queues))}
	fails := failCache{}
	for {
		q := order.pick(s.roots)
		if q == nil {
			return
		}
		order.changed(q) // what follows changes only q's path
		j := q.jobs[cursor[q]]
		pods := s.item(j, p)
		mode := gateFairShare
		switch {
		case p >= passIdleGangs:
			mode = gateIdle
		case p == passGangs:
			mode = gateBelowFairShare
		}
		var why []Reason
		placed := s.inPools(j, func() bool {
			r, ok := s.start(j, pods, mode, fails)
			if !ok {
				why = append(why, r)
			}
			return ok
		})
		if placed {
			if s.item(j, p) == nil {
				cursor[q]++
			}
			continue
		}
		j.setReason(inEachPool(j, why))
		cursor[q]++
	}
}

// start places the pods on free capacity where the queue rules let the job's queue take
// them, or says why not.
func (s *session) start(j *jobState, pods []*podState, mode gateMode, fails failCache) (Reason, bool) {
	need := s.need(pods)
	if r, ok := s.admit(j, need, mode); !ok {
		return r, false
	}
	key := shapeKey(j, pods)
	if r, ok := fails.get(key, s.freed); ok {
		return r, false
	}
	cp := s.checkpoint()
	if s.placeGang(j, pods, nil) {
		if !s.queueRulesHold(j) {
			// A memory request costs more on a smaller GPU than its estimate.
			s.rollback(cp)
			return reasonf(ReasonQueueLimit, "on the GPUs free now the job would pass its queue's limit or quota"), false
		}
		return Reason{}, true
	}
	r := s.explainNoFit(j, pods)
	fails.put(key, s.freed, r)
	return r, false
}

// inEachPool joins the reasons a job of several pools gave in each, naming them; the
// first pool's code stands for all.
func inEachPool(j *jobState, why []Reason) Reason {
	if len(why) <= 1 || len(why) != len(j.pools) {
		if len(why) == 0 {
			return Reason{}
		}
		return why[0]
	}
	parts := make([]string, len(why))
	for i, r := range why {
		parts[i] = "in node pool " + poolName(j.pools[i]) + ": " + r.Message
	}
	return Reason{Code: why[0].Code, Message: strings.Join(parts, "; ")}
}

// poolName is how a pool is named to people: the nodes that name none are the default.
func poolName(p string) string {
	if p == "" {
		return "default"
	}
	return strconv.Quote(p)
}

// queueOrder chooses the queue allocation serves next: at each level of the tree, the
// child with work left for this pass whose allocation would be the smallest fraction of
// its fair share once its next job runs (DESIGN.md 3.2). Ties go to the child with more of
// its share left, then the higher priority, then the name: never the order in which queues
// were declared. What it reads of a queue (whether its subtree has work, its ratio, the
// leaf it would serve) is kept until a pick in that subtree changes it: a pick changes its
// own path alone, so on a tree of 1,000 queues each pick reads a path, not every queue.
type queueOrder struct {
	s      *session
	p      pass
	cursor map[*queueState]int
	memo   []orderMemo // by queue index
}

type orderMemo struct {
	known bool
	has   bool
	ratio float64
	leaf  *queueState // the leaf it would serve
}

// pick returns the leaf to serve among level's subtrees, nil where none has work.
func (o *queueOrder) pick(level []*queueState) *queueState {
	var best *queueState
	var bm orderMemo
	for _, q := range level {
		m := o.look(q)
		if !m.has {
			continue
		}
		if best == nil || m.ratio < bm.ratio || (m.ratio == bm.ratio && before(q, best)) {
			best, bm = q, m
		}
	}
	if best == nil {
		return nil
	}
	return bm.leaf
}

func (o *queueOrder) look(q *queueState) orderMemo {
	if m := o.memo[q.idx]; m.known {
		return m
	}
	m := orderMemo{known: true}
	if o.s.hasWork(q, o.cursor, o.p) {
		m.has, m.leaf = true, q
		if len(q.children) > 0 {
			m.leaf = o.pick(q.children)
		}
		m.ratio = o.s.projectedRatio(q, m.leaf, o.cursor, o.p)
	}
	o.memo[q.idx] = m
	return m
}

// changed forgets what was read of q and its ancestors.
func (o *queueOrder) changed(q *queueState) {
	for ; q != nil; q = q.parent {
		o.memo[q.idx].known = false
	}
}

// projectedRatio is (allocated + the GPUs of the job leaf, the leaf q would serve, runs
// next) / fair share. Queues without a share come after all that have one.
func (s *session) projectedRatio(q, leaf *queueState, cursor map[*queueState]int, p pass) float64 {
	var need int64
	r := ResourceGPU // the kind of accelerator the queue's next job asks
	if leaf != nil {
		j := leaf.jobs[cursor[leaf]]
		need, r = s.nextGPUs(j, p), j.res
	}
	f, a := q.fair[r], q.alloc[r]+need
	if f <= 0 {
		if q.alloc[r] <= 0 {
			return math.MaxFloat64 / 2 // no share, nothing held: after everyone with a share
		}
		return math.MaxFloat64
	}
	return float64(a) / float64(f)
}

// nextGPUs is the GPU cost of the pods item would return, counted without building the
// list: queue order asks it for every queue at every pick.
func (s *session) nextGPUs(j *jobState, p pass) int64 {
	k := 1
	if !j.started() {
		k = max(j.j.MinMember-j.bound, 1)
	}
	var gpu int64
	for _, pod := range j.pods {
		if k == 0 {
			break
		}
		if pod.node == nil {
			gpu += s.pendingGPU(pod.p.Request)
			k--
		}
	}
	return gpu
}

// before breaks a tie between two queues equally placed against their fair shares.
func before(a, b *queueState) bool {
	ra, rb := a.fair[ResourceGPU]-a.alloc[ResourceGPU], b.fair[ResourceGPU]-b.alloc[ResourceGPU]
	if ra != rb {
		return ra > rb
	}
	if a.q.Priority != b.q.Priority {
		return a.q.Priority > b.q.Priority
	}
	return a.q.ID < b.q.ID
}

// hasWork advances a leaf's cursor past jobs with nothing to do in this pass.
func (s *session) hasWork(q *queueState, cursor map[*queueState]int, p pass) bool {
	if len(q.children) == 0 {
		for cursor[q] < len(q.jobs) && !s.hasItem(q.jobs[cursor[q]], p) {
			cursor[q]++
		}
		return cursor[q] < len(q.jobs)
	}
	for _, c := range q.children {
		if s.hasWork(c, cursor, p) {
			return true
		}
	}
	return false
}

func shareRatio(q *queueState, r Resource) float64 {
	f := q.fair[r]
	a := q.alloc[r]
	if f <= 0 {
		if a <= 0 {
			return math.MaxFloat64 / 2 // no share, nothing held: after everyone with a share
		}
		return math.MaxFloat64
	}
	return float64(a) / float64(f)
}

// gateMode says how far a queue may go.
type gateMode int

const (
	// gateFairShare: the queue ends at or below its fair share.
	gateFairShare gateMode = iota
	// gateBelowFairShare: the queue is below its fair share before the job, which may
	// overshoot it. Without this a queue whose fair share is not a multiple of its job
	// size could never start its next job, and free GPUs would stay idle; the overshoot
	// is reclaimable, down to the fair share, by queues below theirs.
	gateBelowFairShare
	// gateIdle: beyond the fair share, on capacity nobody else can use now.
	gateIdle
	// gateReclaim: the job's own queue ends within its quota or its fair share; its
	// ancestors are judged by where they end once the victims are known (reclaimRules
	// and the limits), because a reclaim between siblings leaves their department where
	// it was.
	gateReclaim
	// gatePreempt: the job's victims come from its own queue, so what they hold counts
	// as room under the limits; the end state is checked once they are chosen.
	gatePreempt
)

// admit checks the queue rules for adding need to the job's queue and its ancestors:
// limits, non-preemptible work within quota, and the fair share as the mode says. Hard
// limits are checked first at every level so that the reason names what really blocks:
// a department at its limit, not a fair share that the limit itself capped.
func (s *session) admit(j *jobState, need Resources, mode gateMode) (Reason, bool) {
	for q := j.q; q != nil; q = q.parent {
		for r := Resource(0); r < numResources; r++ {
			l := q.q.Resources[r].Limit
			if l == nil || need[r] == 0 {
				continue
			}
			used := q.alloc[r]
			switch {
			case mode == gatePreempt:
				used = 0
			case mode == gateReclaim && q != j.q:
				// Victims in the same department make room under its limit; the end
				// state is checked once they are chosen.
				continue
			}
			if used+need[r] > *l {
				return reasonf(ReasonQueueLimit, "%s %s would pass its %s limit: %s allocated of %s, the job needs %s more",
					q.kind(), q.q.ID, s.resName(r), Format(r, q.alloc[r]), Format(r, *l), Format(r, need[r])), false
			}
		}
	}
	if g := j.res; !j.preemptible && need[g] > 0 {
		for q := j.q; q != nil; q = q.parent {
			quota := q.q.Resources[g].Quota
			if q.allocNP[g]+need[g] > quota {
				return reasonf(ReasonNonPreemptibleQuota,
					"%s work is not preemptible and runs only within quota: %s %s has %s of its %s quota %s in non-preemptible use, the job needs %s",
					j.j.Class, q.kind(), q.q.ID, Format(g, q.allocNP[g]), Format(g, quota), s.unitName(g),
					Format(g, need[g])), false
			}
		}
	}
	switch mode {
	case gateIdle, gatePreempt:
		return Reason{}, true
	case gateReclaim:
		q := j.q
		for r := Resource(0); r < numResources; r++ {
			if s.fairShareGated(q, r) && need[r] > 0 && q.alloc[r]+need[r] > max(q.fair[r], q.deserved[r]) {
				return s.fairShareReason(j, q, r, need), false
			}
		}
		return Reason{}, true
	}
	for q := j.q; q != nil; q = q.parent {
		for r := Resource(0); r < numResources; r++ {
			if !s.fairShareGated(q, r) || need[r] == 0 || q.alloc[r]+need[r] <= q.fair[r] ||
				(mode == gateBelowFairShare && q.alloc[r] < q.fair[r]) {
				continue
			}
			return s.fairShareReason(j, q, r, need), false
		}
	}
	return Reason{}, true
}

// queueRulesHold re-checks limits and the non-preemptible quota with the real cost of
// what was placed: admission used estimates, and a GPU-memory request costs a larger
// share of a smaller device.
func (s *session) queueRulesHold(j *jobState) bool {
	for q := j.q; q != nil; q = q.parent {
		for r := Resource(0); r < numResources; r++ {
			if l := q.q.Resources[r].Limit; l != nil && q.alloc[r] > *l {
				return false
			}
		}
		if !j.preemptible && q.allocNP[j.res] > q.q.Resources[j.res].Quota {
			return false
		}
	}
	return true
}

// fairShareGated: GPUs always count; CPU and memory only for queues that set a quota
// for them, so that a GPU team is not held back by CPU nobody has divided.
func (s *session) fairShareGated(q *queueState, r Resource) bool {
	return r.Accelerator() || q.q.Resources[r].Quota > 0
}

func (s *session) fairShareReason(j *jobState, q *queueState, r Resource, need Resources) Reason {
	unit := " " + s.unitName(r)
	var reason Reason
	switch {
	case q.alloc[r] > q.fair[r]:
		// Above it: it holds what it borrowed while others' demand has grown since (and
		// could not be taken back, or not yet); "3/2" would read as a slip.
		reason = reasonf(ReasonFairShare, "%s %s is above its fair share: %s%s allocated, its fair share is %s",
			q.kind(), q.q.ID, Format(r, q.alloc[r]), unit, Format(r, q.fair[r]))
	case q.alloc[r] == q.fair[r]:
		reason = reasonf(ReasonFairShare, "%s %s is at its fair share %s/%s%s", q.kind(), q.q.ID, Format(r, q.alloc[r]), Format(r, q.fair[r]), unit)
	default:
		reason = reasonf(ReasonFairShare, "%s %s would pass its fair share: %s/%s%s allocated, the job needs "+Format(r, need[r]),
			q.kind(), q.q.ID, Format(r, q.alloc[r]), Format(r, q.fair[r]), unit)
	}
	if ahead := s.jobsAhead(j); ahead > 0 {
		reason.Message += "; " + plural(ahead, "job") + " ahead"
	}
	return reason
}

// jobsAhead counts pending jobs of the same queue ordered before j.
func (s *session) jobsAhead(j *jobState) int {
	n := 0
	for _, o := range j.q.jobs {
		if o == j {
			break
		}
		if !o.started() {
			n++
		}
	}
	return n
}

func (q *queueState) kind() string {
	if len(q.children) > 0 {
		return "department"
	}
	return "queue"
}

// setReason keeps the first explanation of the cycle, unless a later one is more specific:
// a gate that held the job back explains more than "nothing fits" found afterwards.
func (j *jobState) setReason(r Reason) {
	if j.reason.Code == ReasonNone {
		j.reason = r
	}
}

// failCache remembers that a job shape did not fit, valid until something is freed.
type failCache map[string]failEntry

type failEntry struct {
	freed  int
	reason Reason
}

func (c failCache) get(key string, freed int) (Reason, bool) {
	e, ok := c[key]
	if !ok || e.freed != freed {
		return Reason{}, false
	}
	return e.reason, true
}

func (c failCache) put(key string, freed int, r Reason) { c[key] = failEntry{freed, r} }
