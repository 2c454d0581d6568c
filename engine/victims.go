package engine

import (
	"cmp"
	"iter"
	"slices"
	"sort"
	"strings"
)

// unit is what is evicted together: one elastic pod beyond MinMember, or a whole job
// (a gang never runs half).
type unit struct {
	job  *jobState
	pods []*podState
	gpu  int64
	// whole units take every pod the job still runs, elastic ones included, so that an
	// eviction never leaves a gang below MinMember.
	whole bool
	// spot: its pods run on spot capacity, which victims give up first (spot.go).
	spot bool
}

// place remembers where a pod ran so that an eviction found unnecessary can be undone.
type place struct {
	node  *nodeState
	gpus  []int
	share part
}

// units splits a running job into its victim units, elastic pods first (highest index
// first), so that an elastic job shrinks before it stops.
func units(j *jobState) []unit {
	var bound []*podState
	for _, p := range j.pods {
		if p.node != nil {
			bound = append(bound, p)
		}
	}
	var out []unit
	for len(bound) > max(j.j.MinMember, 1) {
		p := bound[len(bound)-1]
		out = append(out, unit{job: j, pods: []*podState{p}, gpu: p.cost[j.res], spot: p.node.n.Spot})
		bound = bound[:len(bound)-1]
	}
	if len(bound) > 0 {
		u := unit{job: j, pods: bound, whole: true}
		for _, p := range bound {
			u.gpu += p.cost[j.res]
		}
		u.spot = onSpot(bound)
		out = append(out, u)
	}
	return out
}

func (u unit) bound() bool {
	if u.whole {
		return u.job.bound > 0
	}
	for _, p := range u.pods {
		if p.node == nil {
			return false
		}
	}
	return true
}

// takenThisCycle reports whether a pod of the unit that ran when the cycle began was
// evicted for a job in this cycle's decisions (a trial's evictions name no job and are
// undone). A unit this cycle placed, took and placed again ran nowhere yet: taking it again
// stops nothing, and leaving it would only have the next cycle evict it for real.
func (u unit) takenThisCycle() bool {
	for _, p := range u.pods {
		if p.evictFor != "" && p.orig != nil {
			return true
		}
	}
	return false
}

// evicted is a unit taken out during a trial, with where its pods were.
type evicted struct {
	u      unit
	places []place
}

func (s *session) evict(u unit, r Reason, forJob JobID) evicted {
	if u.whole {
		u.pods = nil
		for _, p := range u.job.pods {
			if p.node != nil {
				u.pods = append(u.pods, p)
			}
		}
	}
	e := evicted{u: unit{job: u.job, whole: u.whole}}
	for _, p := range u.pods {
		if p.node == nil {
			continue // already taken with its whole job
		}
		e.u.pods = append(e.u.pods, p)
		e.u.gpu += p.cost[u.job.res]
		e.places = append(e.places, place{p.node, p.gpus, p.share})
		s.unbind(p, r, forJob)
	}
	return e
}

// restore puts an evicted unit back exactly where it was, if that room is still free.
func (s *session) restore(e evicted) bool {
	cp := s.checkpoint()
	for i, p := range e.u.pods {
		pl := e.places[i]
		if !s.roomAt(p.p.Request, pl) {
			s.rollback(cp)
			return false
		}
		s.bind(p, pl.node, pl.gpus, pl.share)
	}
	// An elastic pod comes back only to a job that still runs.
	if j := e.u.job; j.bound < j.j.MinMember {
		s.rollback(cp)
		return false
	}
	return true
}

func (s *session) roomAt(r PodRequest, pl place) bool {
	if !fitsHost(pl.node, r.CPU, r.Memory, 1) {
		return false
	}
	for i, g := range pl.gpus {
		switch {
		case pl.share.mig != nil:
			if pl.node.books[g].slices&pl.share.onAt(&pl.node.n.GPUs[g], i).slices != 0 {
				return false
			}
		case !pl.share.shared() && pl.node.gpuUsed[g] > 0 ||
			pl.share.shared() && !fitsPart(pl.node, g, pl.share, pl.node.books):
			return false
		}
	}
	return true
}

// victimSearch is one use of the evict-to-fit machinery: reclaim, preempt or consolidate.
type victimSearch struct {
	job  *jobState
	pods []*podState
	// cands are the units that may be evicted, in the order they should go.
	cands iter.Seq[unit]
	// reason is written on every evicted pod.
	reason func(u unit) Reason
	// accept judges the end state of a trial, given the units it stops (not moved); it
	// may reject it (queue rules).
	accept func(stopped []unit) bool
	// replace: evicted units must be placed again in the same decision (consolidation),
	// and no more GPUs may move than the pending pods gain.
	replace bool
	// move: an evicted unit that fits elsewhere now is moved there rather than stopped
	// (reclaim), so that its queue keeps what it holds while any GPU is idle.
	move bool
	// exact: where the walks in order find no set the rules allow on a node, every set
	// of its few candidates is weighed (tryExact).
	exact bool
	// oneNode: the pods are tried on single nodes only, not evicted for across the
	// cluster (a search's last and dearest step).
	oneNode bool
	// exacts counts the nodes weighed set by set in this search (at most exactNodes).
	exacts int
	// gpusOnly: a node whose free GPUs already hold the pods but whose CPU, memory or pod
	// slots do not is not tried: what they lack there is not a GPU (where they fit whole,
	// what stops them is a rule, such as a limit that a victim of their own queue frees).
	// A queue beyond its quota is owed GPUs by its fair share, never another queue's CPU:
	// taking it would stop the victim's work for a sliver of a GPU, and the victim's own
	// higher-priority work, placed again, would stop more of its queue for the CPU, leaving
	// that queue below its share to take it all back (a loop the property tests found).
	// It is asked per node tried; a gang evicting across nodes (tryCluster) is judged by
	// the rules alone.
	gpusOnly bool
}

// outcome of one trial, kept to replay the best.
type trial struct {
	node *nodeState
	// victims are the units taken off their places, stopped ones and moved ones.
	victims []unit
	stopped int   // victims not placed again
	gpu     int64 // GPUs the stopped victims held
}

// better ranks trials by the GPUs they stop, then the jobs, then the units moved: one
// large victim is not preferred to two small ones that free what the pods need, since the
// GPUs it frees beyond the need sit idle for no one while its queue falls further.
func (t trial) better(o *trial) bool {
	if o == nil {
		return true
	}
	if t.gpu != o.gpu {
		return t.gpu < o.gpu
	}
	if t.stopped != o.stopped {
		return t.stopped < o.stopped
	}
	return len(t.victims) < len(o.victims)
}

// run finds the fewest GPUs stopped (then the fewest victims) that let the pods start, applies
// that choice and reports success. It tries single nodes first, where most jobs land;
// gangs too large for one node evict across the cluster in candidate order.
func (vs *victimSearch) run(s *session) bool {
	need := s.need(vs.pods)
	// Walk the candidates in victim order, collecting per node, until enough nodes could
	// hold the pods with their victims gone: preferred victims decide where to look.
	// The per-node tallies live in a scratch slice indexed like s.nodes, reset after.
	if s.rooms == nil {
		s.rooms = make([]room, len(s.nodes))
	}
	var touched, nodes []*nodeState
	defer func() {
		for _, n := range touched {
			s.rooms[n.idx] = room{}
		}
	}()
	found := false
	// The walk is bounded: on a big cluster whose victims are single GPUs scattered one
	// per node, finding a node with room for a large pod could otherwise read every
	// running job for every pending one.
	budget := 64 * s.opts.MaxNodeTrials
	for u := range vs.cands {
		found = true
		if budget--; len(nodes) >= s.opts.MaxNodeTrials || budget < 0 {
			break
		}
		for _, p := range u.pods {
			n := p.node
			if n == nil {
				continue
			}
			r := &s.rooms[n.idx]
			if !r.seen {
				touched = append(touched, n)
				r.seen, r.eligible = true, s.eligible(vs.job, n)
				r.gpu, r.cpu, r.mem = int64(freeMilli(n)), n.n.CPU-n.cpuUsed, n.n.Memory-n.memUsed
			}
			if !r.eligible {
				continue
			}
			if k := len(r.units); k == 0 || !sameUnit(r.units[k-1], u) {
				r.units = append(r.units, u) // a unit with several pods here is listed once
			}
			r.gpu += p.cost[vs.job.res]
			r.cpu += p.p.Request.CPU
			r.mem += p.p.Request.Memory
			if !r.listed && r.gpu >= need[vs.job.res] && r.cpu >= need[ResourceCPU] && r.mem >= need[ResourceMemory] {
				r.listed = true
				nodes = append(nodes, n)
			}
		}
	}
	var best *trial
	for _, n := range nodes {
		if t, ok := vs.tryNode(s, n, s.rooms[n.idx].units); ok && t.better(best) {
			best = &t
			if t.stopped <= 1 && len(t.victims) <= 1 && t.gpu <= need[vs.job.res] {
				// One victim no larger than the need: another node with more free might
				// stop fewer GPUs, but looking costs a trial per node, and this one frees
				// nothing the pods do not use.
				break
			}
		}
	}
	if best != nil {
		return vs.apply(s, best)
	}
	if !found || vs.replace || vs.oneNode || len(vs.pods) == 1 {
		return false // a single pod that fits no node with its victims gone fits nowhere
	}
	if t := vs.job.j.Topology; t != nil && t.Required >= 0 {
		return vs.tryDomains(s)
	}
	return vs.tryCluster(s, vs.cands, nil)
}

// tryDomains is tryCluster for a gang that must run within one domain of a level: it evicts
// only inside one domain at a time, the domains with the most room once their candidates
// left first, so that victims elsewhere are never touched and a large cluster does not run
// out of attempts evicting across domains the gang cannot use together. Like run's walk,
// it reads a bounded number of candidates.
func (vs *victimSearch) tryDomains(s *session) bool {
	t := vs.job.j.Topology
	keys := s.domainKeys(t).keys[t.Required]
	room := map[string]MilliGPU{}
	for _, n := range s.topologyNodes(vs.job, s.nodes) {
		room[keys[n.idx]] += freeMilli(n)
	}
	units := map[string][]unit{}
	budget := 64 * s.opts.MaxNodeTrials
	for u := range vs.cands {
		if budget--; budget < 0 {
			break
		}
		var in []string // the domains u is already listed under
		for _, p := range u.pods {
			if p.node == nil {
				continue
			}
			k := keys[p.node.idx]
			if _, usable := room[k]; !usable {
				continue // a domain the gang may not use (or no domain)
			}
			room[k] += MilliGPU(p.cost[vs.job.res])
			if !slices.Contains(in, k) {
				units[k] = append(units[k], u)
				in = append(in, k)
			}
		}
	}
	need := MilliGPU(s.need(vs.pods)[vs.job.res])
	var order []string
	for k, r := range room {
		if r >= need && len(units[k]) > 0 {
			order = append(order, k)
		}
	}
	sort.Slice(order, func(a, b int) bool {
		if room[order[a]] != room[order[b]] {
			return room[order[a]] > room[order[b]]
		}
		return order[a] < order[b]
	})
	for i, k := range order {
		if i >= s.opts.MaxNodeTrials {
			break
		}
		if vs.tryCluster(s, slices.Values(units[k]), func(n *nodeState) bool { return keys[n.idx] == k }) {
			return true
		}
	}
	return false
}

// room tallies what a node would have free if its candidate victims left.
type room struct {
	seen, eligible, listed bool
	gpu, cpu, mem          int64
	units                  []unit
}

func sameUnit(a, b unit) bool {
	return len(a.pods) == len(b.pods) && len(a.pods) > 0 && a.pods[0] == b.pods[0]
}

// tryNode evicts candidates from one node until the pods fit there, places them, returns
// unneeded victims, checks the rules, and undoes it all, reporting what it would cost.
//
// Candidates go in victim order first. Where the rules refuse where that ends (its first
// victim would take its queue below its share), or where it stops more GPUs than the
// pods lack on the node, the smallest candidates are tried first too, and, for a search
// that weighs sets, every set of the node's few candidates: a smaller set the rules allow
// is not passed over because a larger one was listed first, and the cheapest is kept.
func (vs *victimSearch) tryNode(s *session, n *nodeState, cands []unit) (trial, bool) {
	if vs.gpusOnly && s.gpusFreeFor(vs.job, vs.pods, n) {
		if _, _, fits := s.fitsAllOn(vs.job, vs.pods, n); !fits {
			return trial{}, false // what the pods lack here is CPU, memory or pod room
		}
	}
	short := s.need(vs.pods)[vs.job.res] - int64(freeMilli(n)) // what the pods lack here
	best, ok := vs.tryOrder(s, n, cands)
	if ok && best.gpu <= short {
		return best, true
	}
	keep := func(t trial, found bool) {
		if found && (!ok || t.better(&best)) {
			best, ok = t, true
		}
	}
	small := slices.Clone(cands)
	slices.SortStableFunc(small, func(a, b unit) int { return cmp.Compare(a.gpu, b.gpu) })
	if !slices.EqualFunc(small, cands, sameUnit) {
		keep(vs.tryOrder(s, n, small))
		if ok && best.gpu <= short {
			return best, true
		}
	}
	if vs.exact && vs.exacts < exactNodes {
		vs.exacts++
		keep(vs.tryExact(s, n, cands))
	}
	return best, ok
}

// tryOrder is one trial of tryNode, evicting in the order given.
func (vs *victimSearch) tryOrder(s *session, n *nodeState, cands []unit) (trial, bool) {
	cp := s.checkpoint()
	defer s.rollback(cp)
	only := []*nodeState{n}
	var out []evicted
	fits := false
	for _, u := range cands {
		if !u.bound() {
			continue
		}
		out = append(out, s.evict(u, Reason{}, "")) // trials are undone: no reason needed
		if _, _, ok := s.fitsAllOn(vs.job, vs.pods, n); ok {
			fits = true
			break
		}
	}
	if !fits || !s.placeGang(vs.job, vs.pods, only) {
		return trial{}, false
	}
	victims, stopped, ok := vs.settle(s, out)
	if !ok {
		return trial{}, false
	}
	t := trial{node: n, victims: victims}
	for _, u := range stopped {
		t.stopped++
		t.gpu += u.gpu
	}
	return t, true
}

// settle gives back every eviction the placed pods turned out not to need (largest
// first), re-places the rest when moving, and applies the rules. It returns the units
// taken off their places and, of those, the ones stopped rather than moved.
func (vs *victimSearch) settle(s *session, out []evicted) (victims, stopped []unit, ok bool) {
	sort.SliceStable(out, func(a, b int) bool { return out[a].u.gpu > out[b].u.gpu })
	for _, e := range out {
		if !s.restore(e) {
			victims = append(victims, e.u)
		}
	}
	switch {
	case vs.replace:
		var moved int64
		for _, u := range victims {
			if !s.placeGang(u.job, u.pods, nil) {
				return nil, nil, false
			}
			moved += u.gpu
		}
		if moved > s.need(vs.pods)[vs.job.res] {
			return nil, nil, false
		}
	case vs.move:
		for _, u := range victims {
			cp := s.checkpoint()
			if s.placeGang(u.job, u.pods, nil) {
				if u.job.bound < u.job.j.MinMember || !s.queueRulesHold(u.job) {
					// An elastic pod moves only with a job that still runs, and a move
					// must keep its queue within its limits (the reclaim may have used
					// the room under them).
					s.rollback(cp)
					stopped = append(stopped, u)
					continue
				}
				// An evicted pod is gone for good: what moves is the room its queue is owed.
				// The message says that much and promises nothing of any one pod: a bare
				// pod has no replacement, and a Job's replacements are interchangeable (the
				// one made for another evicted pod may take this room first).
				for _, p := range u.pods {
					p.evictReason = reasonf(ReasonConsolidated, "moved to make room for job %s of queue %s: queue %s keeps what it holds (%s has room for a pod of it now); what its controller makes again is placed as any pod that waits",
						vs.job.j.ID, vs.job.q.q.ID, u.job.q.q.ID, p.node.n.ID)
				}
				continue
			}
			stopped = append(stopped, u)
		}
	default:
		stopped = victims
	}
	return victims, stopped, s.queueRulesHold(vs.job) && vs.accept(stopped)
}

// apply replays the chosen trial for real.
func (vs *victimSearch) apply(s *session, t *trial) bool {
	cp := s.checkpoint()
	var out []evicted
	for _, u := range t.victims {
		out = append(out, s.evict(u, vs.reason(u), vs.job.j.ID))
	}
	if !s.placeGang(vs.job, vs.pods, []*nodeState{t.node}) {
		s.rollback(cp)
		return false
	}
	if _, _, ok := vs.settle(s, out); !ok {
		s.rollback(cp)
		return false
	}
	return true
}

// tryCluster evicts candidates in order until the pods fit anywhere, for gangs that need
// several nodes. Placement is tried only on nodes that had room or lost a victim. With in
// set, only nodes it accepts are used.
func (vs *victimSearch) tryCluster(s *session, cands iter.Seq[unit], in func(*nodeState) bool) bool {
	cp := s.checkpoint()
	need := s.need(vs.pods)[vs.job.res]
	var where []*nodeState
	seen := map[*nodeState]bool{}
	freed := int64(0)
	for _, n := range s.nodes {
		if n.idle > 0 && s.eligible(vs.job, n) && (in == nil || in(n)) {
			where = append(where, n)
			seen[n] = true
			freed += int64(n.idle)
		}
	}
	var out []evicted
	attempts := 0
	for u := range cands {
		if !u.bound() {
			continue
		}
		e := s.evict(u, vs.reason(u), vs.job.j.ID)
		out = append(out, e)
		freed += e.u.gpu
		for _, pl := range e.places {
			if !seen[pl.node] && s.eligible(vs.job, pl.node) {
				seen[pl.node] = true
				where = append(where, pl.node)
			}
		}
		if freed < need {
			continue
		}
		if attempts++; attempts > s.opts.MaxNodeTrials {
			break
		}
		if !s.placeGang(vs.job, vs.pods, where) {
			continue
		}
		if _, _, ok := vs.settle(s, out); ok {
			return true
		}
		break
	}
	s.rollback(cp)
	return false
}

// allocs holds every queue's allocation of one resource, by the queue's idx.
type allocs []int64

// queueAllocs records every queue's allocation of r before a trial, for the rules: a
// slice, not a map, since the rules read it for every queue at every trial.
func (s *session) queueAllocs(r Resource) allocs {
	m := make(allocs, len(s.queues))
	for _, q := range s.queues {
		m[q.idx] = q.alloc[r]
	}
	return m
}

// waiting lists jobs with pods to place, in allocation order: jobs that have not
// started, and with growth also running elastic jobs below their full size.
func (s *session) waiting(growth bool) []*jobState {
	var out []*jobState
	for _, j := range s.jobs {
		if (growth || !j.started()) && len(j.unboundPods()) > 0 {
			out = append(out, j)
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		ra, rb := shareRatio(out[a].q, out[a].res), shareRatio(out[b].q, out[b].res)
		if ra != rb {
			return ra < rb
		}
		return jobBefore(out[a].j, out[b].j)
	})
	return out
}

func sortVictims(us []unit) {
	slices.SortFunc(us, func(a, b unit) int {
		ea, eb := len(a.pods) == 1 && a.job.bound > a.job.j.MinMember, len(b.pods) == 1 && b.job.bound > b.job.j.MinMember
		switch {
		case ea != eb:
			if ea {
				return -1
			}
			return 1
		case a.job.j.Priority != b.job.j.Priority:
			return int(a.job.j.Priority) - int(b.job.j.Priority)
		case a.spot != b.spot:
			// Spot capacity is given up first: its cloud may take it back anyway.
			if a.spot {
				return -1
			}
			return 1
		case !a.job.j.StartTime.Equal(b.job.j.StartTime):
			return b.job.j.StartTime.Compare(a.job.j.StartTime) // newest first: least work lost
		case !a.job.j.SubmitTime.Equal(b.job.j.SubmitTime):
			return b.job.j.SubmitTime.Compare(a.job.j.SubmitTime) // last in line goes first
		case a.gpu != b.gpu:
			return int(a.gpu - b.gpu)
		case a.job != b.job:
			return strings.Compare(string(b.job.j.ID), string(a.job.j.ID))
		}
		return b.pods[0].idx - a.pods[0].idx // a job's elastic pods: highest index first
	})
}
