package engine

import "math"

// Shape is one kind of pod in a workload, weighted by how often it occurs. Fragmentation-
// aware placement measures free capacity against the shapes it expects to place.
type Shape struct {
	Request  PodRequest
	GPUTypes []string
	Weight   float64
}

// option is one way to place a pod on a node.
type option struct {
	gpus  []int
	share part
}

// scored reports whether the placement uses the per-option scoring path rather than the
// bin-pack/spread comparison.
func (s *session) scored() bool {
	switch s.opts.Placement {
	case PlacementBinPack, PlacementSpread:
		return false
	}
	return true
}

// options lists the distinct ways the pod fits on node n: for a shared pod one per level
// of device use (devices used alike are interchangeable), for whole GPUs one.
func (s *session) options(j *jobState, r PodRequest, n *nodeState, buf []option) []option {
	buf = buf[:0]
	if !fitsHost(n, r.CPU, r.Memory, 1) {
		return buf
	}
	switch {
	case r.GPUs > 0:
		if n.free < r.GPUs {
			return buf
		}
		if gpus, ok := s.pickWhole(j, r.GPUs, n, n.gpuUsed); ok {
			buf = append(buf, option{gpus: gpus})
		}
	case r.WantsMIG():
		if gpus, share, ok := s.pickMIG(j, r, n, n.books); ok {
			buf = append(buf, option{gpus: gpus, share: share})
		}
	case r.Shared() && (r.SharedDevices() > 1 || j.j.GPUPacking != PackingDefault || s.opts.GPUPacking != PackingDefault):
		// Slices of several devices, or devices chosen by a GPU policy of their own: the
		// one choice pickGPUs makes.
		if gpus, share, ok := s.pickGPUs(j, r, n, n.gpuUsed, n.books); ok {
			buf = append(buf, option{gpus: gpus, share: share})
		}
	case r.Shared():
		for g := range n.n.GPUs {
			dev := &n.n.GPUs[g]
			if dev.MIG != nil || !j.deviceOK(dev) {
				continue
			}
			share, ok := partOn(r, dev)
			if !ok || !fitsPart(n, g, share, n.books) || s.sameLevelListed(n, g, buf) {
				continue
			}
			buf = append(buf, option{gpus: []int{g}, share: share})
		}
	default:
		buf = append(buf, option{})
	}
	return buf
}

func (s *session) sameLevelListed(n *nodeState, g int, buf []option) bool {
	for _, o := range buf {
		h := o.gpus[0]
		// Both passed the job's device choice: alike in use, model and size, either will do.
		if n.books[h] == n.books[g] && n.n.GPUs[h].Model == n.n.GPUs[g].Model && n.n.GPUs[h].Memory == n.n.GPUs[g].Memory {
			return true
		}
	}
	return false
}

// placeScored places one pod by the option with the lowest score under the policy.
func (s *session) placeScored(p *podState, nodes []*nodeState) bool {
	j, r := p.job, p.p.Request
	var best *nodeState
	var bestOpt option
	bestScore := math.Inf(1)
	seen, ties := 0, 1
	var buf []option
	// Nodes of one kind in one state score alike: with a fragmentation model, only the
	// first of them is scored (alike nodes are interchangeable: any would do).
	var states map[uint64]*nodeState
	var prev *nodeState
	// A job with node preferences or placement rules tells alike nodes apart.
	plain := j.filter == nil || (j.filter.pref == nil && !j.filter.f.Dynamic)
	if s.frag != nil && s.opts.Placement != PlacementRandom && plain {
		states = s.scratchStates()
	}
	var bestPref int64
	// For whole GPUs a node's use (its key) decides the fit; for a slice or a MIG
	// instance not always (plainBooks).
	whole := !(r.Shared() || r.WantsMIG())
	// Allot's own policy scores fragmentation and breaks ties by packing; with node
	// preferences the two are compared apart so that the preference comes between them.
	ranked := s.opts.Placement == PlacementAllot && j.filter != nil && j.filter.pref != nil
	bestFrag, bestLeft := math.Inf(1), math.Inf(1)
	for _, n := range nodes {
		if !s.eligible(j, n) {
			continue
		}
		keyed := false
		// A device in MIG mode is always full to the key (usedOf): MIG nodes of one key
		// differ in their slices, so none stands for another.
		if states != nil && !r.WantsMIG() {
			if k, ok := s.fragState(n); ok {
				// Runs of alike nodes (the empty ones, say) are common: check the last first.
				// One that had no option stands for another only where both are plain.
				if prev != nil && prev.keyHash == n.keyHash && prev.key == k && (prev.stood || whole || plainBooks(n)) {
					continue
				}
				if o := states[n.keyHash]; o != nil && o.key == k && (o.stood || whole || plainBooks(n)) {
					continue
				}
				keyed = true
			}
		}
		buf = s.options(j, r, n, buf)
		if keyed && (len(buf) > 0 || whole || plainBooks(n)) {
			// Alike in use, alike in score. For whole GPUs the key also decides the fit; for
			// a slice or a MIG instance it does not see all that does (memory booked apart
			// from compute, a cordoned GPU among busy ones, MIG slices): a node with no
			// option stands for the others of its key only where its use says it all.
			if states[n.keyHash] == nil {
				states[n.keyHash] = n
			}
			n.stood = len(buf) > 0
			prev = n
		}
		if len(buf) > 0 && !s.ruleFits(p, n) {
			continue
		}
		pref := j.preference(n)
		for _, o := range buf {
			var sc float64
			if s.opts.Placement == PlacementRandom {
				// Reservoir sampling: every feasible option equally likely.
				seen++
				if s.rng.IntN(seen) != 0 {
					continue
				}
			} else if ranked {
				// The pod's preference ranks options that fragment alike, before packing.
				frag, left := s.fragDelta(n, r, o), s.leftAfter(r, n, o)
				if frag > bestFrag || (frag == bestFrag && (pref < bestPref || (pref == bestPref && left >= bestLeft))) {
					continue
				}
				bestFrag, bestLeft = frag, left
			} else {
				sc = s.score(j, r, n, o)
				switch {
				case sc > bestScore || (sc == bestScore && pref < bestPref):
					continue
				case sc == bestScore && pref == bestPref:
					if s.opts.Placement != PlacementFGD {
						continue // the first of equals
					}
					// Reservoir sampling among the options that tie.
					if ties++; s.rng.IntN(ties) != 0 {
						continue
					}
				default:
					ties = 1
				}
			}
			best, bestScore, bestPref = n, sc, pref
			bestOpt = option{gpus: append([]int(nil), o.gpus...), share: o.share}
		}
	}
	if best == nil {
		return false
	}
	s.bind(p, best, bestOpt.gpus, bestOpt.share)
	return true
}

func (s *session) scratchStates() map[uint64]*nodeState {
	if s.states == nil {
		s.states = map[uint64]*nodeState{}
	}
	clear(s.states)
	return s.states
}

// score rates an option; lower is better.
func (s *session) score(j *jobState, r PodRequest, n *nodeState, o option) float64 {
	switch s.opts.Placement {
	case PlacementBestFit:
		return s.leftAfter(r, n, o)
	case PlacementGPUPacking:
		// Tiers: a shared device already in use, then a partly used node, then an empty
		// one; inside a tier the fuller the better.
		tier := 2.0
		switch {
		case o.share.shared() && n.gpuUsed[o.gpus[0]] > 0:
			tier = 0
		case freeMilli(n) < MilliGPU(len(n.n.GPUs))*OneGPU:
			tier = 1
		}
		return tier*10 + s.leftAfter(r, n, o)
	case PlacementFGD:
		// As the FGD authors' simulator scores (a kube-scheduler score plugin): the growth
		// of fragmentation mapped through a sigmoid to a whole score of 0–100, so that
		// options within a few milli-GPUs of each other tie, and ties go to a random one
		// (kube-scheduler's selectHost). The exact growth with first-wins ties landed 0.30
		// points lower on average over the published lists (docs/performance.md,
		// "Placement on the Alibaba trace").
		return -math.Floor(100 / (1 + math.Exp(s.fragDelta(n, r, o)/1000)))
	case PlacementAllot:
		// Packing only breaks ties: leftAfter is at most 3, fragmentation moves in MilliGPU.
		return s.fragDelta(n, r, o) + 1e-3*s.leftAfter(r, n, o)
	}
	return 0
}

// leftAfter is the node's free capacity after the option, each resource as a fraction
// of the node's, summed: 0 is a full node, 3 an empty one.
func (s *session) leftAfter(r PodRequest, n *nodeState, o option) float64 {
	gpuCap := float64(len(n.n.GPUs)) * float64(OneGPU)
	used := MilliGPU(len(o.gpus)) * OneGPU
	if o.share.shared() {
		used = o.share.milli * MilliGPU(len(o.gpus))
	}
	f := 0.0
	if gpuCap > 0 {
		f += float64(freeMilli(n)-used) / gpuCap
	}
	if n.n.CPU > 0 {
		f += float64(n.n.CPU-n.cpuUsed-r.CPU) / float64(n.n.CPU)
	}
	if n.n.Memory > 0 {
		f += float64(n.n.Memory-n.memUsed-r.Memory) / float64(n.n.Memory)
	}
	return f
}

// plainBooks tells whether what a node's use (gpuUsed, the fragmentation key) says of
// each device is all there is to its bookings: no device in MIG mode or out of service, no
// cap on sharers, no burst, and each device's memory and compute booked alike (whole
// devices, fractions), so that two nodes of one key refuse a slice alike.
func plainBooks(n *nodeState) bool {
	if n.plainVer == n.ver {
		return n.plain
	}
	n.plainVer = n.ver
	n.plain = n.n.MaxSharers <= 0
	for g := range n.n.GPUs {
		dev, b := &n.n.GPUs[g], n.books[g]
		if !n.plain {
			break
		}
		m := ceilShare(b.mem, dev.Memory)
		n.plain = dev.MIG == nil && dev.OutOfService() == "" && b.burst == 0 && b.compute >= m-1 && b.compute <= m+1
	}
	return n.plain
}
