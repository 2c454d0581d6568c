package engine

import (
	"slices"
	"sort"
)

// eligible reports whether a node may host pods of the job at all: it takes new pods, is
// in the job's pool, passes the job's node filter, and (for GPU jobs) has a device of an
// accepted model.
func (s *session) eligible(j *jobState, n *nodeState) bool {
	if n.n.Unschedulable || n.n.Pool != j.pool || (j.asksGPU && n.res != j.res) || j.spotBars(n) {
		return false
	}
	if j.filter != nil && !j.filter.allowed[n.idx] {
		return false
	}
	if j.memCap && n.n.Sharing == SharingNone {
		return false
	}
	if j.shares && (n.n.NoFractions != "" || n.n.Unenforced != "") {
		return false
	}
	if j.choice == nil {
		return true
	}
	return j.choice.onNode(n)
}

// asksMemoryCap tells whether a pod of the job asks for a hard GPU memory cap.
func asksMemoryCap(j *Job) bool {
	for i := range j.Pods {
		if j.Pods[i].Request.GPUMemory > 0 {
			return true
		}
	}
	return false
}

func asksShare(j *Job) bool {
	return slices.ContainsFunc(j.Pods, func(p Pod) bool { return p.Request.Shared() })
}

// choosesDevices tells whether the job rules some devices out by model or UUID.
func choosesDevices(j *Job) bool {
	return len(j.GPUTypes) > 0 || len(j.ExcludeGPUTypes) > 0 || len(j.GPUUUIDs) > 0 || len(j.ExcludeGPUUUIDs) > 0
}

// deviceChoice is a job's device-choice lists as sets: each is asked per device of every
// node scanned, and a tenant's list may be hundreds long (v1alpha1.MaxChoiceEntries). A nil
// set allows any.
type deviceChoice struct {
	types, exclTypes, uuids, exclUUIDs map[string]bool
	// nodes remembers, by node index, whether a node has a device the job may be given
	// (0: not yet asked, 1: it has, 2: it has none): a victim search asks it per
	// candidate, and a node's devices do not change within a cycle.
	nodes []int8
}

// onNode tells whether a node has a device the job may be given.
func (c *deviceChoice) onNode(n *nodeState) bool {
	if n.idx >= len(c.nodes) {
		c.nodes = append(c.nodes, make([]int8, n.idx+1-len(c.nodes))...)
	}
	if c.nodes[n.idx] == 0 {
		c.nodes[n.idx] = 2
		for i := range n.n.GPUs {
			if c.allows(&n.n.GPUs[i]) {
				c.nodes[n.idx] = 1
				break
			}
		}
	}
	return c.nodes[n.idx] == 1
}

// allows tells whether the job may be given the device.
func (c *deviceChoice) allows(g *GPU) bool {
	return (c.types == nil || c.types[g.Model]) && !c.exclTypes[g.Model] &&
		(c.uuids == nil || c.uuids[g.UUID]) && !c.exclUUIDs[g.UUID]
}

func newDeviceChoice(j *Job) *deviceChoice {
	if !choosesDevices(j) {
		return nil // the common case
	}
	set := func(l []string) map[string]bool {
		if len(l) == 0 {
			return nil
		}
		m := make(map[string]bool, len(l))
		for _, v := range l {
			m[v] = true
		}
		return m
	}
	return &deviceChoice{types: set(j.GPUTypes), exclTypes: set(j.ExcludeGPUTypes), uuids: set(j.GPUUUIDs), exclUUIDs: set(j.ExcludeGPUUUIDs)}
}

// deviceOK tells whether the job's pods may be given the device: its model is accepted
// and not excluded, and its UUID is among those picked (if any) and not excluded.
func (j *jobState) deviceOK(g *GPU) bool {
	return j.choice == nil || j.choice.allows(g)
}

// gpuSpread tells whether the job's GPUs are chosen emptiest first: its own GPU policy,
// else the engine's, else as nodes are chosen.
func (s *session) gpuSpread(j *jobState) bool {
	for _, p := range [...]Packing{j.j.GPUPacking, s.opts.GPUPacking} {
		if p != PackingDefault {
			return p == PackingSpread
		}
	}
	return s.opts.Placement == PlacementSpread
}

// nodeSpread tells whether the job's nodes are chosen emptiest first.
func (s *session) nodeSpread(j *jobState) bool {
	if p := j.j.NodePacking; p != PackingDefault {
		return p == PackingSpread
	}
	return s.opts.Placement == PlacementSpread
}

// pickGPUs chooses devices for one pod on node n given the per-device usage and bookings
// (the node's own, or scratch copies when checking whether several pods fit). Bin-packing
// fills partly used devices first and keeps a multi-GPU pod on one NVLink/NUMA island.
func (s *session) pickGPUs(j *jobState, r PodRequest, n *nodeState, used []MilliGPU, books []devBook) (gpus []int, share part, ok bool) {
	switch {
	case r.GPUs > 0:
		gpus, ok = s.pickWhole(j, r.GPUs, n, used)
		return gpus, wholePart, ok
	case r.Shared():
		return s.pickSlices(j, r, n, used, books)
	case r.WantsMIG():
		return s.pickMIG(j, r, n, books)
	}
	return nil, wholePart, true
}

// pickSlices chooses the devices a shared request takes its slice of: those with room,
// the fullest first when bin-packing (the emptiest when spreading); several of them on one
// island where one has enough (required with SameIsland), all with the same slice.
func (s *session) pickSlices(j *jobState, r PodRequest, n *nodeState, used []MilliGPU, books []devBook) ([]int, part, bool) {
	k := r.SharedDevices()
	spread := s.gpuSpread(j)
	type cand struct {
		g    int
		p    part
		left MilliGPU
	}
	var buf [16]cand
	cands := buf[:0]
	for g := range n.n.GPUs {
		dev := &n.n.GPUs[g]
		if dev.MIG != nil || !j.deviceOK(dev) {
			continue
		}
		p, ok := partOn(r, dev)
		if !ok || !fitsPart(n, g, p, books) {
			continue
		}
		cands = append(cands, cand{g, p, OneGPU - usedOf(dev, books[g].add(p.on(dev), 1))})
	}
	if len(cands) < k {
		return nil, wholePart, false
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if spread {
			return int(b.left - a.left)
		}
		return int(a.left - b.left)
	})
	if k == 1 {
		return []int{cands[0].g}, cands[0].p, true
	}
	// Several devices: the same bytes and compute of each (a pod holds one slice), which
	// devices of different sizes give a fraction or a compute share in different bytes.
	// The first island (in the order above) with k alike slices, else, unless one island
	// is required, the first k alike slices anywhere. The share counted is the largest.
	alike := func(a, b part) bool { return a.mem == b.mem && a.compute == b.compute }
	take := func(first part, island int) ([]int, part) {
		var out []int
		p := first
		for _, c := range cands {
			if (island < 0 || islandOf(n, c.g) == island) && alike(c.p, first) {
				p.milli = max(p.milli, c.p.milli)
				if out = append(out, c.g); len(out) == k {
					slices.Sort(out)
					return out, p
				}
			}
		}
		return nil, p
	}
	for i, c := range cands {
		if i > 0 && alike(c.p, cands[i-1].p) && islandOf(n, c.g) == islandOf(n, cands[i-1].g) {
			continue // tried with the one before
		}
		if out, p := take(c.p, islandOf(n, c.g)); out != nil {
			return out, p, true
		}
	}
	if j.j.SameIsland {
		return nil, wholePart, false
	}
	for i, c := range cands {
		if i > 0 && alike(c.p, cands[i-1].p) {
			continue
		}
		if out, p := take(c.p, -1); out != nil {
			return out, p, true
		}
	}
	return nil, wholePart, false
}

// pickWhole takes k fully free devices, preferring one island (requiring one with
// SameIsland): the fullest island that still holds all k when bin-packing, the emptiest
// when spreading; failing that, the islands with the most free devices first, so the pod
// spans as few as possible.
func (s *session) pickWhole(j *jobState, k int, n *nodeState, used []MilliGPU) ([]int, bool) {
	if k > len(n.n.GPUs) {
		return nil, false
	}
	// Islands are numbered from 0 per node; count free devices per island.
	var counts [64]int
	total := 0
	for g := range n.n.GPUs {
		if used[g] == 0 && j.deviceOK(&n.n.GPUs[g]) {
			counts[islandOf(n, g)]++
			total++
		}
	}
	if total < k {
		return nil, false
	}
	spread := s.gpuSpread(j)
	best := -1
	for isl, c := range counts {
		if c >= k && (best < 0 || (!spread && c < counts[best]) || (spread && c > counts[best])) {
			best = isl
		}
	}
	out := make([]int, 0, k)
	take := func(isl int) {
		for g := range n.n.GPUs {
			if len(out) == k {
				return
			}
			if used[g] == 0 && islandOf(n, g) == isl && j.deviceOK(&n.n.GPUs[g]) {
				out = append(out, g)
			}
		}
	}
	if best >= 0 {
		take(best)
		return out, true
	}
	if j.j.SameIsland {
		return nil, false
	}
	for len(out) < k {
		most := 0
		for isl, c := range counts {
			if c > counts[most] {
				most = isl
			}
		}
		take(most)
		counts[most] = 0
	}
	return out, true
}

// islandOf folds a device's island into the small range pickWhole counts.
func islandOf(n *nodeState, g int) int {
	return ((n.n.GPUs[g].Island % 64) + 64) % 64
}

// fitsHost checks CPU, memory and the node's pod capacity for that many more pods. As in
// kube-scheduler, a resource the pods do not request is not checked: a node over-committed
// by pods from elsewhere still takes pods that ask for none of it.
func fitsHost(n *nodeState, cpu, mem int64, pods int) bool {
	return (cpu == 0 || n.n.CPU-n.cpuUsed >= cpu) && (mem == 0 || n.n.Memory-n.memUsed >= mem) && n.maxPods-len(n.pods) >= pods
}

// ruleFits asks the placement rules about a pod of a dynamic job (pod affinity, spread,
// host ports, other resources); other jobs are decided by the engine alone.
func (s *session) ruleFits(p *podState, n *nodeState) bool {
	j := p.job
	if j.filter == nil || !j.filter.f.Dynamic || s.rules == nil {
		return true
	}
	return s.rules.Fits(p.p.ID, n.n.ID)
}

// preference is the job's node preference for n (zero without one).
func (j *jobState) preference(n *nodeState) int64 {
	if j.filter == nil || j.filter.pref == nil {
		return 0
	}
	return j.filter.pref[n.idx]
}

// freeMilli is the node's free GPU capacity. Over-committed devices (possible only in a
// snapshot from outside) make it smaller, never larger, than the sum of free devices.
func freeMilli(n *nodeState) MilliGPU { return max(n.idle, 0) }

// better reports whether a node leaving (gpuLeft, cpuLeft) free is preferred to the
// incumbent. Bin-packing leaves as little as possible; spreading as much as possible.
// CPU-only pods bin-pack away from free GPUs so they do not strand them. Between nodes
// that leave the same GPUs free, the pod's own preference (preferred node affinity,
// PreferNoSchedule taints) decides before CPU does.
func better(spread bool, gpuLeft, cpuLeft, pref, bestGPU, bestCPU, bestPref int64) bool {
	if spread {
		if gpuLeft != bestGPU {
			return gpuLeft > bestGPU
		}
		if pref != bestPref {
			return pref > bestPref
		}
		return cpuLeft > bestCPU
	}
	if gpuLeft != bestGPU {
		return gpuLeft < bestGPU
	}
	if pref != bestPref {
		return pref > bestPref
	}
	return cpuLeft < bestCPU
}

// placeOne finds the best node for one pod and binds it there.
func (s *session) placeOne(p *podState, only []*nodeState) bool {
	j, r := p.job, p.p.Request
	// A fraction's memory is rounded down and a device's used share up: one thousandth of
	// slack keeps the skip from ruling out a device it fits exactly. A fraction that names
	// its compute apart may fit where less than its share is free.
	if only == nil && ((r.GPUs > 0 && s.maxFreeWhole() < r.GPUs) ||
		(r.GPUFraction > 0 && r.GPUCompute == 0 && s.maxFreeShare()+1 < r.GPUFraction)) {
		return false // no device anywhere has room: skip the scan
	}
	nodes := only
	if nodes == nil {
		nodes = s.nodes
	}
	if s.scored() && j.j.NodePacking == PackingDefault {
		return s.placeScored(p, nodes)
	}
	spread := s.nodeSpread(j)
	var best *nodeState
	var bestGPU, bestCPU, bestPref int64
	for _, n := range nodes {
		if !s.eligible(j, n) || !fitsHost(n, r.CPU, r.Memory, 1) {
			continue
		}
		var gpuLeft int64
		switch {
		case r.GPUs > 0:
			if n.free < r.GPUs {
				continue
			}
			if choosesDevices(j.j) || j.j.SameIsland {
				if _, ok := s.pickWhole(j, r.GPUs, n, n.gpuUsed); !ok {
					continue
				}
			}
			gpuLeft = int64(freeMilli(n)) - int64(r.GPUs)*int64(OneGPU)
		case r.Shared() || r.WantsMIG():
			_, share, ok := s.pickGPUs(j, r, n, n.gpuUsed, n.books)
			if !ok {
				continue
			}
			gpuLeft = int64(freeMilli(n)) - int64(share.milli)*int64(r.SharedDevices())
		default:
			gpuLeft = int64(freeMilli(n))
		}
		cpuLeft := n.n.CPU - n.cpuUsed - r.CPU
		pref := j.preference(n)
		if (best == nil || better(spread, gpuLeft, cpuLeft, pref, bestGPU, bestCPU, bestPref)) && s.ruleFits(p, n) {
			best, bestGPU, bestCPU, bestPref = n, gpuLeft, cpuLeft, pref
		}
	}
	if best == nil {
		return false
	}
	gpus, share, _ := s.pickGPUs(j, r, best, best.gpuUsed, best.books)
	s.bind(p, best, gpus, share)
	return true
}

// fitsAllOn reports whether every pod fits on node n together, without changing state.
func (s *session) fitsAllOn(j *jobState, pods []*podState, n *nodeState) (gpuLeft, cpuLeft int64, ok bool) {
	return s.fitsOn(j, pods, n, true)
}

// gpusFreeFor reports whether the node's free GPUs hold the pods as they stand, whatever
// its free CPU, memory and pod slots: what the pods lack there is not a GPU.
func (s *session) gpusFreeFor(j *jobState, pods []*podState, n *nodeState) bool {
	_, _, ok := s.fitsOn(j, pods, n, false)
	return ok
}

// fitsOn is fitsAllOn, counting the node's CPU, memory and pod slots only with host set.
func (s *session) fitsOn(j *jobState, pods []*podState, n *nodeState, host bool) (gpuLeft, cpuLeft int64, ok bool) {
	if !s.eligible(j, n) {
		return 0, 0, false
	}
	var cpu, mem int64
	whole := 0
	for _, p := range pods {
		cpu += p.p.Request.CPU
		mem += p.p.Request.Memory
		whole += p.p.Request.GPUs
	}
	if (host && !fitsHost(n, cpu, mem, len(pods))) || whole > n.free {
		return 0, 0, false
	}
	if onlyWhole(pods) && !choosesDevices(j.j) && !j.j.SameIsland {
		// Whole devices of any model: enough free ones is enough.
		return int64(freeMilli(n)) - int64(whole)*int64(OneGPU), n.n.CPU - n.cpuUsed - cpu, true
	}
	used, books := slices.Clone(n.gpuUsed), slices.Clone(n.books)
	for _, p := range pods {
		gpus, share, ok := s.pickGPUs(j, p.p.Request, n, used, books)
		if !ok {
			return 0, 0, false
		}
		for i, g := range gpus {
			dev := &n.n.GPUs[g]
			books[g] = books[g].add(share.onAt(dev, i), 1)
			used[g] = usedOf(dev, books[g])
		}
	}
	var left MilliGPU
	for _, u := range used {
		left += OneGPU - min(u, OneGPU)
	}
	return int64(left), n.n.CPU - n.cpuUsed - cpu, true
}

// emptiestFirst is the nodes the job may use, the most free GPU first.
func (s *session) emptiestFirst(j *jobState, nodes []*nodeState) []*nodeState {
	var order []*nodeState
	for _, n := range nodes {
		if s.eligible(j, n) {
			order = append(order, n)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return freeMilli(order[a]) > freeMilli(order[b]) })
	return order
}

func onlyWhole(pods []*podState) bool {
	for _, p := range pods {
		if p.p.Request.Shared() || p.p.Request.WantsMIG() {
			return false
		}
	}
	return true
}

// placeGang binds all the given pods or none. It prefers one node, then one topology
// domain, then the fewest nodes (filling the emptiest first).
func (s *session) placeGang(j *jobState, pods []*podState, only []*nodeState) bool {
	if t := j.j.Topology; t != nil && t.Required >= 0 {
		if only == nil {
			only = s.nodes
		}
		if only = s.topologyNodes(j, only); len(only) == 0 {
			return false
		}
	}
	nodes := only
	if nodes == nil {
		nodes = s.nodes
	}
	// A job already running (a gang getting a lost member back, an elastic job growing)
	// gets its pods as close to its running ones as its topology's levels allow.
	if t := j.j.Topology; t != nil && j.bound > 0 && s.placeNearHome(j, pods, nodes, max(t.Required, 0)) {
		return true
	}
	if len(pods) == 1 {
		// Without a node list placeOne searches by free room, not node by node.
		return s.placeOne(pods[0], only)
	}
	if s.wholeShort(pods) {
		return false
	}
	var best *nodeState
	var bestGPU, bestCPU, bestPref int64
	for _, n := range nodes {
		gl, cl, ok := s.fitsAllOn(j, pods, n)
		pref := j.preference(n)
		if ok && (best == nil || better(s.nodeSpread(j), gl, cl, pref, bestGPU, bestCPU, bestPref)) {
			best, bestGPU, bestCPU, bestPref = n, gl, cl, pref
		}
	}
	// fitsAllOn counts resources only: the placement rules (anti-affinity among the
	// gang's own pods, say) may still refuse one node, and then the gang spreads.
	if best != nil && s.fillNodes(pods, []*nodeState{best}) {
		return true
	}
	// Across nodes: within one topology domain if any can hold the gang (the one with
	// the most room first), else across the cluster; either way the emptiest nodes first
	// so that the gang spans as few as possible.
	order := s.emptiestFirst(j, nodes)
	if j.j.Topology != nil {
		return s.placeInLevels(j, pods, order)
	}
	for _, dom := range domainsByRoom(order) {
		if s.fillNodes(pods, dom) {
			return true
		}
	}
	return s.fillNodes(pods, order)
}

// wholeShort reports whether pods asking whole GPUs cannot all find them free, counting
// devices alone: together they ask for more fully free GPUs than the schedulable nodes
// have, or more of them ask for at least g than the nodes have room for pods of g (g the
// least any of them asks). No placement holds them then, and the nodes need not be tried
// one by one: on a full cluster a reclaim tries to move each gang it evicts elsewhere,
// and each try would otherwise read and sort every node.
func (s *session) wholeShort(pods []*podState) bool {
	total, least, n := 0, 0, 0
	for _, p := range pods {
		if g := p.p.Request.GPUs; g > 0 {
			total += g
			n++
			if least == 0 || g < least {
				least = g
			}
		}
	}
	if n == 0 {
		return false
	}
	free, slots := 0, 0 // fully free GPUs, and room for pods of least
	for k, nodes := range s.freeWhole {
		free += k * nodes
		if k >= least {
			slots += nodes * (k / least)
		}
	}
	return total > free || slots < n
}

// domainsByRoom splits nodes (already in preference order) by topology domain, the
// domain with the most free GPU capacity first. Nodes without a domain form none.
func domainsByRoom(nodes []*nodeState) [][]*nodeState {
	idx := map[string]int{}
	var out [][]*nodeState
	var room []MilliGPU
	for _, n := range nodes {
		d := n.n.Domain
		if d == "" {
			continue
		}
		i, ok := idx[d]
		if !ok {
			i = len(out)
			idx[d] = i
			out = append(out, nil)
			room = append(room, 0)
		}
		out[i] = append(out[i], n)
		room[i] += freeMilli(n)
	}
	if len(out) < 2 {
		return out
	}
	order := all(len(out))
	sort.SliceStable(order, func(a, b int) bool { return room[order[a]] > room[order[b]] })
	sorted := make([][]*nodeState, len(out))
	for k, i := range order {
		sorted[k] = out[i]
	}
	return sorted
}

// fillNodes places the pods filling nodes in order; all or none.
func (s *session) fillNodes(pods []*podState, order []*nodeState) bool {
	cp := s.checkpoint()
	k := 0
	for _, p := range pods {
		placed := false
		for ; k < len(order); k++ {
			if s.placeOne(p, order[k:k+1]) {
				placed = true
				break
			}
		}
		if !placed {
			s.rollback(cp)
			return false
		}
	}
	return true
}
