package engine

import (
	"slices"
	"sort"
)

// eligible reports whether a node may host pods of the job at all: it takes new pods, is
// in the job's pool, and (for GPU jobs) has a device of an accepted model.
func (s *session) eligible(j *jobState, n *nodeState) bool {
	if n.n.Unschedulable || n.n.Pool != j.j.NodePool {
		return false
	}
	if len(j.j.GPUTypes) == 0 {
		return true
	}
	for i := range n.n.GPUs {
		if gpuTypeOK(j.j, &n.n.GPUs[i]) {
			return true
		}
	}
	return false
}

func gpuTypeOK(j *Job, g *GPU) bool {
	return len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, g.Model)
}

// pickGPUs chooses devices for one pod on node n given the per-device usage used (the
// node's own, or a scratch copy when checking whether several pods fit). Bin-packing
// fills partly used devices first and keeps a multi-GPU pod on one NVLink/NUMA island.
func (s *session) pickGPUs(j *jobState, r PodRequest, n *nodeState, used []MilliGPU) (gpus []int, share MilliGPU, ok bool) {
	spread := s.opts.Placement == PlacementSpread
	switch {
	case r.GPUs > 0:
		return s.pickWhole(j, r.GPUs, n, used)
	case r.Shared():
		best := -1
		var bestFree MilliGPU
		for g := range n.n.GPUs {
			dev := &n.n.GPUs[g]
			if !gpuTypeOK(j.j, dev) {
				continue
			}
			need := r.GPUFraction
			if r.GPUMemory > 0 {
				if r.GPUMemory > dev.Memory {
					continue
				}
				need = memoryShare(r.GPUMemory, dev.Memory)
			}
			free := OneGPU - used[g]
			if free < need {
				continue
			}
			left := free - need
			if best < 0 || (!spread && left < bestFree) || (spread && left > bestFree) {
				best, bestFree, share = g, left, need
			}
		}
		if best < 0 {
			return nil, 0, false
		}
		return []int{best}, share, true
	}
	return nil, 0, true
}

// pickWhole takes k fully free devices, preferring one island: the fullest island that
// still holds all k when bin-packing, the emptiest when spreading.
func (s *session) pickWhole(j *jobState, k int, n *nodeState, used []MilliGPU) ([]int, MilliGPU, bool) {
	if k > len(n.n.GPUs) {
		return nil, 0, false
	}
	var freeBy map[int]int
	total := 0
	for g := range n.n.GPUs {
		if used[g] == 0 && gpuTypeOK(j.j, &n.n.GPUs[g]) {
			if freeBy == nil {
				freeBy = map[int]int{}
			}
			freeBy[n.n.GPUs[g].Island]++
			total++
		}
	}
	if total < k {
		return nil, 0, false
	}
	islands := make([]int, 0, len(freeBy))
	for isl := range freeBy {
		islands = append(islands, isl)
	}
	spread := s.opts.Placement == PlacementSpread
	sort.Slice(islands, func(a, b int) bool {
		fa, fb := freeBy[islands[a]], freeBy[islands[b]]
		// Islands that hold the whole pod come first.
		if (fa >= k) != (fb >= k) {
			return fa >= k
		}
		if fa != fb {
			if fa >= k && !spread {
				return fa < fb
			}
			return fa > fb
		}
		return islands[a] < islands[b]
	})
	out := make([]int, 0, k)
	for _, isl := range islands {
		for g := range n.n.GPUs {
			if len(out) == k {
				break
			}
			if used[g] == 0 && n.n.GPUs[g].Island == isl && gpuTypeOK(j.j, &n.n.GPUs[g]) {
				out = append(out, g)
			}
		}
	}
	return out, 0, true
}

// fitsHost checks CPU and memory.
func fitsHost(n *nodeState, cpu, mem int64) bool {
	return n.n.CPU-n.cpuUsed >= cpu && n.n.Memory-n.memUsed >= mem
}

func freeMilli(n *nodeState) MilliGPU {
	var f MilliGPU
	for _, u := range n.gpuUsed {
		f += OneGPU - min(u, OneGPU)
	}
	return f
}

// better reports whether a node leaving (gpuLeft, cpuLeft) free is preferred to the
// incumbent. Bin-packing leaves as little as possible; spreading as much as possible.
// CPU-only pods bin-pack away from free GPUs so they do not strand them.
func (s *session) better(gpuLeft, cpuLeft, bestGPU, bestCPU int64) bool {
	if s.opts.Placement == PlacementSpread {
		if gpuLeft != bestGPU {
			return gpuLeft > bestGPU
		}
		return cpuLeft > bestCPU
	}
	if gpuLeft != bestGPU {
		return gpuLeft < bestGPU
	}
	return cpuLeft < bestCPU
}

// placeOne finds the best node for one pod and binds it there.
func (s *session) placeOne(p *podState, only []*nodeState) bool {
	j, r := p.job, p.p.Request
	if r.GPUs > 0 && only == nil && s.maxFreeWhole() < r.GPUs {
		return false
	}
	nodes := only
	if nodes == nil {
		nodes = s.nodes
	}
	var best *nodeState
	var bestGPU, bestCPU int64
	for _, n := range nodes {
		if !s.eligible(j, n) || !fitsHost(n, r.CPU, r.Memory) {
			continue
		}
		var gpuLeft int64
		switch {
		case r.GPUs > 0:
			if n.free < r.GPUs {
				continue
			}
			if len(j.j.GPUTypes) > 0 {
				if _, _, ok := s.pickWhole(j, r.GPUs, n, n.gpuUsed); !ok {
					continue
				}
			}
			gpuLeft = int64(freeMilli(n)) - int64(r.GPUs)*int64(OneGPU)
		case r.Shared():
			_, share, ok := s.pickGPUs(j, r, n, n.gpuUsed)
			if !ok {
				continue
			}
			gpuLeft = int64(freeMilli(n) - share)
		default:
			gpuLeft = int64(freeMilli(n))
		}
		cpuLeft := n.n.CPU - n.cpuUsed - r.CPU
		if best == nil || s.better(gpuLeft, cpuLeft, bestGPU, bestCPU) {
			best, bestGPU, bestCPU = n, gpuLeft, cpuLeft
		}
	}
	if best == nil {
		return false
	}
	gpus, share, _ := s.pickGPUs(j, r, best, best.gpuUsed)
	s.bind(p, best, gpus, share)
	return true
}

// fitsAllOn reports whether every pod fits on node n together, without changing state.
func (s *session) fitsAllOn(j *jobState, pods []*podState, n *nodeState) (gpuLeft, cpuLeft int64, ok bool) {
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
	if !fitsHost(n, cpu, mem) || whole > n.free {
		return 0, 0, false
	}
	used := slices.Clone(n.gpuUsed)
	for _, p := range pods {
		gpus, share, ok := s.pickGPUs(j, p.p.Request, n, used)
		if !ok {
			return 0, 0, false
		}
		for _, g := range gpus {
			used[g] += gpuAmount(share)
		}
	}
	var left MilliGPU
	for _, u := range used {
		left += OneGPU - min(u, OneGPU)
	}
	return int64(left), n.n.CPU - n.cpuUsed - cpu, true
}

// placeGang binds all the given pods or none. It prefers one node, then the fewest nodes
// (filling the emptiest first).
func (s *session) placeGang(j *jobState, pods []*podState, only []*nodeState) bool {
	if len(pods) == 1 {
		return s.placeOne(pods[0], only)
	}
	nodes := only
	if nodes == nil {
		nodes = s.nodes
	}
	var best *nodeState
	var bestGPU, bestCPU int64
	for _, n := range nodes {
		gl, cl, ok := s.fitsAllOn(j, pods, n)
		if ok && (best == nil || s.better(gl, cl, bestGPU, bestCPU)) {
			best, bestGPU, bestCPU = n, gl, cl
		}
	}
	cp := s.checkpoint()
	if best != nil {
		one := []*nodeState{best}
		for _, p := range pods {
			if !s.placeOne(p, one) {
				s.rollback(cp)
				return false
			}
		}
		return true
	}
	// Across nodes: take the emptiest nodes first so that the gang spans as few as possible.
	order := make([]*nodeState, 0, len(nodes))
	for _, n := range nodes {
		if s.eligible(j, n) {
			order = append(order, n)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return freeMilli(order[a]) > freeMilli(order[b]) })
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
