package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// session is the mutable working copy of one snapshot for one cycle. Every change goes
// through bind/unbind, which append to an undo log, so that an action can try a move and
// roll it back (the statement pattern) without copying the cluster.
type session struct {
	opts     Options
	now      time.Time
	nodes    []*nodeState
	nodeByID map[NodeID]*nodeState
	queues   []*queueState // all queues, parents before children
	roots    []*queueState
	queueBy  map[QueueID]*queueState
	reached  map[*queueState]bool // queues under a root; the others' parents form a cycle
	jobs     []*jobState          // in snapshot order
	orphans  []orphanJob          // jobs not scheduled: their queue is missing, not a leaf or in a cycle, or they are invalid
	capacity Resources
	// accel is each accelerator kind's resource, by name ("" for NVIDIA's GPUs).
	accel map[string]Resource
	// pools is the resource of each node pool divided apart (Snapshot.Pools), by name.
	pools map[string]Resource
	// domains caches each node's domain at each level of a topology, by its levels: jobs
	// of one Topology share them, and building the keys per placement was most of the
	// cost of a topology-aware cycle (BenchmarkCycleTopology).
	domains map[string]*levelDomains

	maxGPUMemory int64 // largest device memory; sizes pending memory requests
	// migShares is the least share each MIG profile counts on the snapshot's devices.
	migShares map[string]MilliGPU
	maxGPUs   int // most GPUs on one node

	log []op
	// freed counts unbinds; a fit failure stays valid while nothing was freed.
	freed int
	// commits counts successful evicting moves; a failed search stays valid until one.
	commits int
	rooms   []room // scratch for victim searches, indexed like nodes
	rng     *rand.Rand
	frag    *fragModel // set for fragmentation-aware placement
	states  map[uint64]*nodeState
	// freeWhole[k] counts schedulable nodes with exactly k fully free GPUs.
	freeWhole []int
	// freeShare[f] counts devices of schedulable nodes with exactly f MilliGPU free.
	freeShare [OneGPU + 1]int
	// rules answers for dynamic jobs and hears of every change; it is set once the pods
	// bound in the snapshot (already known to it) are in place.
	rules PlacementRules
	// filters holds each distinct NodeFilter of the snapshot indexed by node.
	filters map[*NodeFilter]*filterState
}

// orphanJob is a job the session does not schedule, and why.
type orphanJob struct {
	id  JobID
	why Reason
}

// filterState is a NodeFilter turned into slices indexed like session.nodes.
type filterState struct {
	f       *NodeFilter
	ord     int // distinguishes filters in shape keys
	allowed []bool
	pref    []int64
}

type nodeState struct {
	n   *Node
	idx int
	// res is the resource the node's devices are (its accelerator kind); -1 for a kind
	// the snapshot does not name.
	res Resource
	// gpuUsed is how much of each device is taken, as a share: all of it for a whole pod
	// or a device out of service, else the larger of its booked memory and compute (see
	// usedOf). It is what whole-GPU counts, free capacity and fragmentation read.
	gpuUsed []MilliGPU
	// books is what is booked on each device, exactly: bytes of memory, thousandths of
	// compute, and how many pods share it. Whether a slice fits is decided by these.
	books   []devBook
	cpuUsed int64
	memUsed int64
	free    int      // fully free GPUs
	idle    MilliGPU // free GPU capacity, fractions included
	maxPods int      // math.MaxInt when the node has no cap
	pods    []*podState
	// ver counts changes; the fragmentation key below is valid while keyVer == ver, and
	// plain (plainBooks) while plainVer == ver.
	ver, keyVer, plainVer int
	plain                 bool
	// stood: the node had options when it last stood for others of its key (placeScored).
	stood            bool
	key              fragKey
	keyHash          uint64
	fclass           int32
	fclassSet, fmemo bool
}

type queueState struct {
	q        *Queue
	idx      int // its place in the session's queues
	parent   *queueState
	children []*queueState
	alloc    Resources
	allocNP  Resources // non-preemptible part
	demand   Resources // capped by limits, used for fair share
	request  Resources // uncapped, reported
	fair     Resources
	// grain is what the fair share was rounded to at its level: a whole GPU where every
	// sibling's demand is whole GPUs, else 1 milli-GPU. A share is within one grain of
	// the exact division, whichever way the remainder went.
	grain    Resources
	deserved Resources // min(quota, demand, limit)
	jobs     []*jobState
	// gangGrace is the queue's own GangGrace or the nearest ancestor's; nil: none set.
	gangGrace *time.Duration
	// protect is how long a job of the queue runs before it may be a victim, by action:
	// its own setting or the nearest ancestor's.
	protect [2]time.Duration
}

// What a minimum runtime protects from.
const (
	protectReclaim = iota
	protectPreempt
)

type jobState struct {
	j           *Job
	q           *queueState
	preemptible bool
	// res is the resource the job's devices count as (its accelerator kind, or its pool's
	// where the pool is divided apart); asksGPU says whether its pods ask for devices at
	// all (CPU-only jobs run on any node).
	res Resource
	// pool is the node pool the job is placed in now: the first of pools, or the one its
	// running pods are in. pools are NodePool and MorePools, in order; nil with no more.
	pool  string
	pools []string
	// capacity is where the job may run by capacity type, at the snapshot's time.
	capacity capacity
	asksGPU  bool
	// stopped: a pod of the job was stopped this cycle for its burst; nothing of it is
	// placed again in the same cycle (its burst would be gone from the books, and it
	// would land back where it was stopped).
	stopped bool
	pods    []*podState
	bound   int
	reason  Reason
	filter  *filterState // nil: every node
	// memCap: a pod asks for a hard GPU memory cap, which only an enforcing node gives.
	memCap bool
	// shares: a pod asks for part of a GPU, which only a node that can hand one over takes.
	shares bool
	// choice is the job's device-choice lists as sets (nil: any device).
	choice *deviceChoice
	// shielded are victims a reclaim or preemption for this job passed over because they
	// had not yet run their queue's minimum runtime; the wait's reason names them.
	shielded []shield
}

// shield is a job kept from being a victim until a time.
type shield struct {
	job    JobID
	until  time.Time
	action int
}

type podState struct {
	p    *Pod
	job  *jobState
	idx  int // index in job.pods
	orig *Binding

	node  *nodeState
	gpus  []int
	share part
	cost  Resources
	slot  int // index in node.pods

	evictReason Reason
	evictFor    JobID
}

type opKind int

const (
	opBind opKind = iota
	opUnbind
)

// op records one change; undo reverses it.
type op struct {
	kind  opKind
	pod   *podState
	node  *nodeState
	gpus  []int
	share part
	// reason and beneficiary of an unbind, restored on undo of a later bind
	prevReason Reason
	prevFor    JobID
}

func (j *jobState) started() bool { return j.bound >= j.j.MinMember && j.bound > 0 }

func (j *jobState) unboundPods() []*podState {
	var out []*podState
	for _, p := range j.pods {
		if p.node == nil {
			out = append(out, p)
		}
	}
	return out
}

// podCost is what a pod holding the given part of each of its GPUs counts against its
// queue: whole devices, or its share of each.
func podCost(r PodRequest, gpus []int, share part, res Resource) Resources {
	var c Resources
	c[ResourceCPU] = r.CPU
	c[ResourceMemory] = r.Memory
	switch {
	case share.shared():
		c[res] = int64(share.milli) * int64(len(gpus))
	case r.GPUs > 0:
		c[res] = int64(r.GPUs) * int64(OneGPU)
	}
	return c
}

// pendingCost estimates a pending pod's demand; memory requests are sized against the
// largest device, the most favourable place they could land.
func (s *session) pendingCost(r PodRequest, res Resource) Resources {
	var c Resources
	c[ResourceCPU] = r.CPU
	c[ResourceMemory] = r.Memory
	c[res] = s.pendingGPU(r)
	return c
}

// pendingGPU is the device part of pendingCost, in thousandths of a device of the job's
// kind (slices and MIG instances are NVIDIA's only).
func (s *session) pendingGPU(r PodRequest) int64 {
	switch {
	case r.GPUs > 0:
		return int64(r.GPUs) * int64(OneGPU)
	case r.WantsMIG():
		return int64(s.pendingMIG(r)) * int64(r.SharedDevices())
	case r.GPUFraction > 0 && r.GPUCompute == 0:
		return int64(r.GPUFraction) * int64(r.SharedDevices())
	case r.Shared():
		dev := GPU{Memory: s.maxGPUMemory}
		share, ok := partOn(r, &dev)
		if !ok {
			// More memory than any GPU has: it waits, and wants a whole GPU of each meanwhile.
			share.milli = OneGPU
		}
		return int64(share.milli) * int64(r.SharedDevices())
	}
	return 0
}

// bind places a pending pod.
func (s *session) bind(p *podState, n *nodeState, gpus []int, share part) {
	s.log = append(s.log, op{kind: opBind, pod: p, node: n, gpus: gpus, share: share,
		prevReason: p.evictReason, prevFor: p.evictFor})
	// A moved pod keeps its eviction reason: the plan reports why it moved.
	s.doBind(p, n, gpus, share)
}

func (s *session) doBind(p *podState, n *nodeState, gpus []int, share part) {
	cost := podCost(p.p.Request, gpus, share, p.job.res)
	p.node, p.gpus, p.share, p.cost = n, gpus, share, cost
	wasFree := n.free
	n.ver++
	for i, g := range gpus {
		s.book(n, g, share.onAt(&n.n.GPUs[g], i), +1)
	}
	s.moveFreeBucket(n, wasFree)
	if share.mig != nil {
		n.idle -= share.milli * MilliGPU(len(gpus))
	}
	n.cpuUsed += p.p.Request.CPU
	n.memUsed += p.p.Request.Memory
	p.slot = len(n.pods)
	n.pods = append(n.pods, p)
	if s.rules != nil {
		s.rules.Placed(p.p.ID, n.n.ID)
	}
	j := p.job
	j.bound++
	np := !j.preemptible
	for q := j.q; q != nil; q = q.parent {
		q.alloc = q.alloc.Add(cost)
		if np {
			q.allocNP = q.allocNP.Add(cost)
		}
	}
}

// unbind evicts a running pod; reason and beneficiary are kept for the plan.
func (s *session) unbind(p *podState, reason Reason, forJob JobID) {
	s.log = append(s.log, op{kind: opUnbind, pod: p, node: p.node, gpus: p.gpus, share: p.share,
		prevReason: p.evictReason, prevFor: p.evictFor})
	s.doUnbind(p)
	p.evictReason, p.evictFor = reason, forJob
}

func (s *session) doUnbind(p *podState) {
	n := p.node
	wasFree := n.free
	n.ver++
	for i, g := range p.gpus {
		s.book(n, g, p.share.onAt(&n.n.GPUs[g], i), -1)
	}
	s.moveFreeBucket(n, wasFree)
	if p.share.mig != nil {
		n.idle += p.share.milli * MilliGPU(len(p.gpus))
	}
	n.cpuUsed -= p.p.Request.CPU
	n.memUsed -= p.p.Request.Memory
	last := n.pods[len(n.pods)-1]
	n.pods[p.slot] = last
	last.slot = p.slot
	n.pods = n.pods[:len(n.pods)-1]
	j := p.job
	j.bound--
	np := !j.preemptible
	for q := j.q; q != nil; q = q.parent {
		q.alloc = q.alloc.Sub(p.cost)
		if np {
			q.allocNP = q.allocNP.Sub(p.cost)
		}
	}
	p.node, p.gpus, p.share, p.cost = nil, nil, part{}, Resources{}
	s.freed++
	if s.rules != nil {
		s.rules.Removed(p.p.ID, n.n.ID)
	}
}

// countShare keeps the histogram of free device shares behind maxFreeShare.
func (s *session) countShare(n *nodeState, g, delta int) {
	if !n.n.Unschedulable {
		s.freeShare[max(OneGPU-n.gpuUsed[g], 0)] += delta
	}
}

// maxFreeShare is the most free capacity on any one device of a schedulable node.
func (s *session) maxFreeShare() MilliGPU {
	for f := OneGPU; f > 0; f-- {
		if s.freeShare[f] > 0 {
			return f
		}
	}
	return 0
}

// book adds (sign +1) or takes back (-1) a booking on device g of node n, and keeps the
// device's taken share, the node's free counts and the free-share histogram in step.
func (s *session) book(n *nodeState, g int, b devBook, sign int) {
	old := n.gpuUsed[g]
	n.books[g] = n.books[g].add(b, sign)
	now := usedOf(&n.n.GPUs[g], n.books[g])
	if now == old {
		return
	}
	s.countShare(n, g, -1)
	n.gpuUsed[g] = now
	s.countShare(n, g, +1)
	n.idle -= now - old
	switch {
	case old == 0:
		n.free--
	case now == 0:
		n.free++
	}
}

func (s *session) moveFreeBucket(n *nodeState, was int) {
	if n.n.Unschedulable || was == n.free {
		return
	}
	s.freeWhole[was]--
	s.freeWhole[n.free]++
}

// mark is a checkpoint in the undo log.
type mark struct{ log, freed int }

func (s *session) checkpoint() mark { return mark{len(s.log), s.freed} }

// rollback undoes every change made since the checkpoint.
func (s *session) rollback(m mark) {
	for i := len(s.log) - 1; i >= m.log; i-- {
		o := s.log[i]
		switch o.kind {
		case opBind:
			s.doUnbind(o.pod)
		case opUnbind:
			s.doBind(o.pod, o.node, o.gpus, o.share)
		}
		o.pod.evictReason, o.pod.evictFor = o.prevReason, o.prevFor
	}
	s.log = s.log[:m.log]
	s.freed = m.freed // undone moves free nothing new
}

// maxFreeWhole is the largest number of fully free GPUs on one schedulable node.
func (s *session) maxFreeWhole() int {
	for k := len(s.freeWhole) - 1; k > 0; k-- {
		if s.freeWhole[k] > 0 {
			return k
		}
	}
	return 0
}

func newSession(snap *Snapshot, opts Options) *session {
	s := &session{opts: opts, now: snap.Now, nodeByID: make(map[NodeID]*nodeState, len(snap.Nodes)),
		queueBy: make(map[QueueID]*queueState, len(snap.Queues)), rng: newRand(opts.Seed),
		accel: map[string]Resource{"": ResourceGPU}, pools: map[string]Resource{}}
	for i, k := range snap.Accelerators {
		if i < MaxAccelerators && k != "" {
			s.accel[k] = AcceleratorResource(i)
		}
	}
	for k, p := range snap.Pools {
		if k < MaxPools {
			s.pools[p] = PoolResource(k)
		}
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		res, known := s.kindOf(n.Accelerator, n.Pool)
		if !known {
			res = -1
		}
		ns := &nodeState{n: n, idx: i, res: res, gpuUsed: make([]MilliGPU, len(n.GPUs)), books: make([]devBook, len(n.GPUs)),
			free: len(n.GPUs), ver: 1, idle: MilliGPU(len(n.GPUs)) * OneGPU, maxPods: math.MaxInt}
		if n.MaxPods != nil {
			ns.maxPods = *n.MaxPods
		}
		s.nodes = append(s.nodes, ns)
		s.nodeByID[n.ID] = ns
		s.maxGPUs = max(s.maxGPUs, len(n.GPUs))
		for g := range n.GPUs {
			s.maxGPUMemory = max(s.maxGPUMemory, n.GPUs[g].Memory)
			s.noteMIGShares(&n.GPUs[g])
		}
		for g := range n.GPUs {
			if n.GPUs[g].OutOfService() != "" {
				// A failed or cordoned device is taken by its state: never free, never
				// shared, no capacity for anyone's fair share.
				ns.books[g] = wholePart.on(&n.GPUs[g])
				ns.gpuUsed[g] = OneGPU
				ns.free--
				ns.idle -= OneGPU
				continue
			}
			if res >= 0 {
				s.capacity[res] += int64(OneGPU)
			}
			if n.GPUs[g].MIG != nil {
				// A device in MIG mode is never free for a whole or sliced pod (usedOf);
				// its capacity is its instances', and counts in fair shares as any GPU.
				// Its free instances' share stays in the node's idle capacity, which binds
				// and unbinds of instances change (doBind).
				ns.gpuUsed[g] = OneGPU
				ns.free--
			}
		}
		s.capacity[ResourceCPU] += n.CPU
		s.capacity[ResourceMemory] += n.Memory
	}
	s.freeWhole = make([]int, s.maxGPUs+1)
	for _, n := range s.nodes {
		if !n.n.Unschedulable {
			s.freeWhole[n.free]++
			for _, u := range n.gpuUsed {
				s.freeShare[OneGPU-u]++
			}
		}
	}
	s.buildQueues(snap.Queues)
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		q := s.queueBy[j.Queue]
		var why Reason
		switch {
		case j.Invalid != "":
			why = Reason{Code: ReasonInvalid, Message: j.Invalid}
		case q != nil && !s.reached[q]:
			why = reasonf(ReasonInvalid, "queue %s is in a cycle of parents (spec.parent): it schedules nothing until that is fixed", q.q.ID)
		case q == nil:
			why = reasonf(ReasonConstraint, "queue %s does not exist (deleted, or never made): an admin creates it again, or delete the workload and submit it to another queue", j.Queue)
		case len(q.children) > 0:
			why = reasonf(ReasonConstraint, "queue %s has child queues: submit to a leaf queue", j.Queue)
		}
		pool := j.NodePool
		// A job that runs stays in the pool its pods are in, and counts there (a node
		// relabelled under it included).
		for _, p := range j.Pods {
			if n := s.nodeByID[bindingNode(p.Binding)]; n != nil {
				pool = n.n.Pool
				break
			}
		}
		res, known := s.kindOf(j.Accelerator, pool)
		if !known && why.Code == ReasonNone {
			why = reasonf(ReasonInvalid, "accelerator kind %q is not one the scheduler knows: %s", j.Accelerator, s.kindsKnown())
		}
		orphan := why.Code != ReasonNone
		if orphan {
			// The caller validates; a bad queue reference or spec never crashes a cycle,
			// and the job's running pods still hold their GPUs so that nothing is
			// double-booked.
			s.orphans = append(s.orphans, orphanJob{j.ID, why})
			q = nil
		}
		js := &jobState{j: j, q: q, preemptible: j.IsPreemptible(), filter: s.filterOf(j.Nodes), memCap: asksMemoryCap(j), shares: asksShare(j),
			res: res, asksGPU: asksDevices(j), choice: newDeviceChoice(j), pool: pool, capacity: spotCapacity(j, snap.Now)}
		if len(j.MorePools) > 0 {
			js.pools = append([]string{j.NodePool}, j.MorePools...)
		}
		if !known {
			js.res = ResourceGPU // held as GPUs by no queue: it is an orphan
		}
		for k := range j.Pods {
			p := &j.Pods[k]
			ps := &podState{p: p, job: js, idx: k, orig: p.Binding}
			js.pods = append(js.pods, ps)
		}
		if !orphan {
			s.jobs = append(s.jobs, js)
			q.jobs = append(q.jobs, js)
		}
		for _, ps := range js.pods {
			b := ps.p.Binding
			if b == nil {
				continue
			}
			n := s.nodeByID[b.Node]
			if n == nil || !validGPUs(n, b) {
				ps.orig = nil // bound to something that no longer exists: treat as pending
				continue
			}
			s.doBind(ps, n, slices.Clone(b.GPUs), heldPart(b, n))
			if orphan {
				// What a job of no queue holds (its queue deleted under it) is no
				// queue's to share: fair shares divide the rest.
				s.capacity = s.capacity.Sub(ps.cost)
			}
		}
	}
	s.freed = 0
	s.rules = snap.Rules
	return s
}

// filterOf indexes a job's NodeFilter by node, once per distinct filter: the jobs of one
// pod shape share theirs.
func (s *session) filterOf(f *NodeFilter) *filterState {
	if f == nil {
		return nil
	}
	if fs := s.filters[f]; fs != nil {
		return fs
	}
	if s.filters == nil {
		s.filters = map[*NodeFilter]*filterState{}
	}
	fs := &filterState{f: f, ord: len(s.filters) + 1, allowed: make([]bool, len(s.nodes))}
	for _, id := range f.Allowed {
		if n := s.nodeByID[id]; n != nil {
			fs.allowed[n.idx] = true
		}
	}
	if len(f.Preference) > 0 {
		fs.pref = make([]int64, len(s.nodes))
		for id, v := range f.Preference {
			if n := s.nodeByID[id]; n != nil {
				fs.pref[n.idx] = v
			}
		}
	}
	s.filters[f] = fs
	return fs
}

func validGPUs(n *nodeState, b *Binding) bool {
	for _, g := range b.GPUs {
		if g < 0 || g >= len(n.gpuUsed) {
			return false
		}
	}
	return true
}

// buildQueues links the tree, parents first so that fair share can go top-down.
func (s *session) buildQueues(qs []Queue) {
	for i := range qs {
		s.queueBy[qs[i].ID] = &queueState{q: &qs[i]}
	}
	for i := range qs {
		qs := s.queueBy[qs[i].ID]
		if p := s.queueBy[qs.q.Parent]; p != nil && qs.q.Parent != "" && p != qs {
			qs.parent = p
			p.children = append(p.children, qs)
		} else {
			s.roots = append(s.roots, qs)
		}
	}
	s.reached = map[*queueState]bool{}
	var walk func(q *queueState, depth int)
	walk = func(q *queueState, depth int) {
		if depth > len(qs) {
			return // a cycle in parents; validation reports it
		}
		s.reached[q] = true
		q.idx = len(s.queues)
		s.queues = append(s.queues, q)
		switch {
		case q.q.GangGrace != nil:
			q.gangGrace = q.q.GangGrace
		case q.parent != nil:
			q.gangGrace = q.parent.gangGrace
		}
		for k, d := range [2]*time.Duration{q.q.ReclaimMinRuntime, q.q.PreemptMinRuntime} {
			switch {
			case d != nil:
				q.protect[k] = max(*d, 0)
			case q.parent != nil:
				q.protect[k] = q.parent.protect[k]
			}
		}
		for _, c := range q.children {
			walk(c, depth+1)
		}
	}
	for _, r := range s.roots {
		walk(r, 0)
	}
}

// shieldedFrom tells whether a running job may not yet be a victim of the action (it has
// not run its queue's minimum runtime), and until when. A job's start time is when it last
// reached its gang; one with none known is not protected.
func (s *session) shieldedFrom(j *jobState, action int) (time.Time, bool) {
	d := j.q.protect[action]
	if d <= 0 || j.j.StartTime.IsZero() {
		return time.Time{}, false
	}
	until := j.j.StartTime.Add(d)
	return until, s.now.Before(until)
}

// keepUnshielded is a victim filter that passes over protected jobs, noting them for the
// reason of the job that wanted their GPUs.
func (s *session) keepUnshielded(for_ *jobState, action int) func(unit) bool {
	return func(u unit) bool {
		until, shielded := s.shieldedFrom(u.job, action)
		if !shielded {
			return true
		}
		if !slices.ContainsFunc(for_.shielded, func(x shield) bool { return x.job == u.job.j.ID }) {
			for_.shielded = append(for_.shielded, shield{job: u.job.j.ID, until: until, action: action})
		}
		return false
	}
}

// kindOf is the resource of a device of the given kind in the given pool: the pool's
// own where its NVIDIA GPUs are divided apart, else the kind's.
func (s *session) kindOf(accelerator, pool string) (Resource, bool) {
	if accelerator == "" {
		if r, ok := s.pools[pool]; ok {
			return r, true
		}
	}
	r, ok := s.accel[accelerator]
	return r, ok
}

// setPool moves a job that runs nowhere to another of its pools: where it is placed and
// which of its queue's quotas it counts against.
func (s *session) setPool(j *jobState, pool string) {
	j.pool = pool
	if r, ok := s.kindOf(j.j.Accelerator, pool); ok {
		j.res = r
	}
}

// inPools tries to start the job in each of its pools in order (one try where it has one
// pool, or runs), until a try succeeds; failing everywhere, it is back in its first.
func (s *session) inPools(j *jobState, try func() bool) bool {
	if len(j.pools) == 0 || j.bound > 0 {
		return try()
	}
	for _, p := range j.pools {
		s.setPool(j, p)
		if try() {
			return true
		}
	}
	s.setPool(j, j.pools[0])
	return false
}

func bindingNode(b *Binding) NodeID {
	if b == nil {
		return ""
	}
	return b.Node
}

// kindsKnown lists the accelerator kinds of the snapshot, for a reason.
func (s *session) kindsKnown() string {
	var names []string
	for k := range s.accel {
		if k != "" {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "this cluster has NVIDIA GPUs only (the scheduler's --accelerators table names no other kind)"
	}
	slices.Sort(names)
	return "besides NVIDIA GPUs it knows " + strings.Join(names, ", ")
}

// asksDevices tells whether a pod of the job asks for accelerator devices.
func asksDevices(j *Job) bool {
	return slices.ContainsFunc(j.Pods, func(p Pod) bool {
		return p.Request.GPUs > 0 || p.Request.Shared() || p.Request.WantsMIG()
	})
}

// unitName is what amounts of a resource are counted in, for a person: "GPUs", "ascend".
func (s *session) unitName(r Resource) string {
	if r == ResourceGPU {
		return "GPUs"
	}
	if r >= resourcePool0 {
		return "GPUs of node pool " + s.poolOf(r)
	}
	return s.resName(r)
}

// poolOf names the pool a pool's resource counts.
func (s *session) poolOf(r Resource) string {
	for k, v := range s.pools {
		if v == r {
			return k
		}
	}
	return r.String()
}

// resName names a resource for a person: an accelerator by its kind, a pool's GPUs by
// the pool.
func (s *session) resName(r Resource) string {
	if r >= resourcePool0 {
		return "node pool " + s.poolOf(r) + " GPU"
	}
	if r >= resourceAccel0 {
		for k, v := range s.accel {
			if v == r {
				return k
			}
		}
	}
	return r.String()
}
