package engine

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// fragModel measures GPU fragmentation as FGD defines it (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23): the free GPU capacity of a node that a pod of a given
// shape could not use, averaged over the workload's shapes by frequency. A node's value
// depends only on its kind and free resources, so values are memoized by that state;
// clusters are mostly made of a few kinds of node in a few states.
type fragModel struct {
	shapes []Shape // weights sum to 1
	// packed weighs the measure against as many pods of each shape as the node could take
	// at once, so that a node whose CPU runs out before its GPUs counts those GPUs as
	// stranded; 0 leaves it out (FGD as published). Allot's default sets it by the mix
	// (packedWeight).
	packed float64
	// spoken is, per GPU model, how much of its capacity the pods that can run only on a
	// few models need (spokenFor); taking a milli-GPU of a model costs that share of it.
	// Empty unless the hosts are tight: see newFragModel.
	spoken map[string]float64
	class  map[string]int32
	memo   map[fragKey]float64
}

// fragKey is a homogeneous node's state: its kind, free CPU and memory, and the use of
// its devices sorted (devices of one kind are interchangeable).
type fragKey struct {
	class    int32
	n        uint8
	cpu, mem int64
	used     [8]MilliGPU
}

// newFragModel measures against the shapes; with allot, the packed measure is added with
// its weight set by how the workload presses on the nodes' hosts.
func newFragModel(shapes []Shape, nodes []Node, allot bool) *fragModel {
	var total float64
	for _, sh := range shapes {
		total += sh.Weight
	}
	m := &fragModel{class: map[string]int32{}, memo: map[fragKey]float64{}}
	for _, sh := range shapes {
		if sh.Weight > 0 && total > 0 {
			sh.Weight /= total
			m.shapes = append(m.shapes, sh)
		}
	}
	if allot {
		hosts := gpuHostsOf(nodes)
		pressure := hosts.pressure(m.shapes)
		m.packed = packedWeight(pressure)
		if pressure >= hostBound {
			m.spoken = hosts.spokenFor(m.shapes)
		}
	}
	return m
}

// shapesOf derives the workload from the pods of a snapshot, when none was given.
func shapesOf(snap *Snapshot) []Shape {
	type key struct {
		r     PodRequest
		types string
	}
	idx := map[key]int{}
	var out []Shape
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		types := ""
		if len(j.GPUTypes) > 0 {
			types = strings.Join(j.GPUTypes, "|")
		}
		for _, p := range j.Pods {
			k := key{p.Request, types}
			if at, ok := idx[k]; ok {
				out[at].Weight++
				continue
			}
			idx[k] = len(out)
			out = append(out, Shape{Request: p.Request, GPUTypes: j.GPUTypes, Weight: 1})
		}
	}
	// In a fixed order, not the order jobs were listed in: scores are sums of floats, and
	// a sum in another order can break a tie the other way.
	slices.SortFunc(out, func(a, b Shape) int {
		x, y := a.Request, b.Request
		return cmp.Or(cmp.Compare(x.GPUs, y.GPUs), cmp.Compare(x.GPUFraction, y.GPUFraction), cmp.Compare(x.GPUMemory, y.GPUMemory),
			cmp.Compare(x.GPUCompute, y.GPUCompute), cmp.Compare(x.Devices, y.Devices),
			cmp.Compare(x.CPU, y.CPU), cmp.Compare(x.Memory, y.Memory),
			cmp.Compare(strings.Join(a.GPUTypes, "|"), strings.Join(b.GPUTypes, "|")))
	})
	return out
}

// classOf names a homogeneous node's kind (one model and memory size, at most 8 devices,
// its CPU and memory); nodes of one kind in one state fragment alike and are memoized.
func (m *fragModel) classOf(n *Node) (int32, bool) {
	if len(n.GPUs) == 0 || len(n.GPUs) > 8 {
		return 0, false
	}
	for _, g := range n.GPUs[1:] {
		if g.Model != n.GPUs[0].Model || g.Memory != n.GPUs[0].Memory {
			return 0, false
		}
	}
	k := n.GPUs[0].Model + "/" + strconv.FormatInt(n.GPUs[0].Memory, 10) + "/" +
		strconv.FormatInt(n.CPU, 10) + "/" + strconv.FormatInt(n.Memory, 10) + "/" + strconv.Itoa(len(n.GPUs))
	c, ok := m.class[k]
	if !ok {
		c = int32(len(m.class))
		m.class[k] = c
	}
	return c, true
}

// hash mixes the key's fields (FNV-1a); equal keys hash equal.
func (k fragKey) hash() uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h ^= v
		h *= 1099511628211
	}
	mix(uint64(k.class))
	mix(uint64(k.n))
	mix(uint64(k.cpu))
	mix(uint64(k.mem))
	for _, u := range k.used[:k.n] {
		mix(uint64(u))
	}
	return h
}

// packedWeight scales the packed measure against FGD's, by how hard the workload presses
// on the GPU nodes' CPU and memory (gpuHosts.pressure). With CPU to spare (every published
// openb list, pressure 0.69–0.85) a weight of 1 strands whole GPUs that multi-GPU pods need and
// 0.1 beats FGD on every list; where the workload asks about as much CPU per GPU as the
// nodes have or more (1.75 to 2.5 times the CPU-only pods, sharing-heavy mixes: 0.95–1.27)
// the host runs out first, and 3 places up to 2.7 points more than 0.1 and beats
// bin-packing, which 0.1 does not. A step, not a ramp: weights in between (0.3–0.5)
// placed less than either end on a list at 0.91 (1.5 times the CPU-only pods). Measured on
// the openb trace and lists derived from it (docs/performance.md, "Placement on heavier mixes").
func packedWeight(pressure float64) float64 {
	if pressure >= hostBound {
		return 3
	}
	return 0.1
}

// hostBound is the host pressure from which the packed measure weighs 3: the workload asks
// 95% of the CPU or memory per GPU the GPU nodes have, so they run out with the GPUs.
const hostBound = 0.95

// spokenFor is, for each GPU model, the share of its capacity that the shapes naming GPU
// models would take if the workload's GPU demand were spread evenly over the devices each
// shape may use: a shape asking for T4 with 10% of the demand, on T4s that are 13% of the
// devices, speaks for 0.77 of each T4. FGD's measure does not see this: a pod that could go
// anywhere, placed on a T4, leaves no T4 capacity unusable, only too little of it for the
// pods that need a T4. Allot's default charges the share (in milli-GPU, as the
// fragmentation it is added to) when the hosts run out with the GPUs (hostBound): there an
// untyped pod on a node of a scarce model also takes the CPU the CPU-only pods would have
// found there (T4 nodes have 52 cores per GPU, G2 nodes 12), and charging it placed 0.8 to
// 2.3 points more on every such list derived from gpuspec10 and gpuspec20. With CPU to
// spare it placed 0.14–0.27 points less on those lists, so it is left out there (docs/performance.md,
// "Placement on heavier mixes"). A workload naming no model speaks for nothing.
func (h gpuHosts) spokenFor(shapes []Shape) map[string]float64 {
	var demand float64
	for _, sh := range shapes {
		demand += sh.Weight * h.gpusOf(sh.Request)
	}
	if demand == 0 {
		return nil
	}
	out := map[string]float64{}
	for _, sh := range shapes {
		if len(sh.GPUTypes) == 0 {
			continue
		}
		models := slices.Compact(slices.Sorted(slices.Values(sh.GPUTypes)))
		var eligible float64
		for _, t := range models {
			eligible += h.byModel[t]
		}
		if eligible == 0 {
			continue // nothing here can run it: it takes nothing from anyone
		}
		share := sh.Weight * h.gpusOf(sh.Request) / demand * h.gpus / eligible
		for _, t := range models {
			out[t] += share
		}
	}
	return out
}

// gpuHosts is what the nodes with GPUs hold in all: devices (and how many of each model),
// the devices' memory, and the hosts' CPU and memory.
type gpuHosts struct {
	gpus, devMem, cpu, mem float64
	byModel                map[string]float64
}

func gpuHostsOf(nodes []Node) gpuHosts {
	h := gpuHosts{byModel: map[string]float64{}}
	for i := range nodes {
		n := &nodes[i]
		if len(n.GPUs) == 0 {
			continue
		}
		h.cpu += float64(n.CPU)
		h.mem += float64(n.Memory)
		for _, g := range n.GPUs {
			h.gpus++
			h.byModel[g.Model]++
			h.devMem += float64(g.Memory)
		}
	}
	return h
}

// gpusOf is how many GPUs a pod of the request takes: whole devices, a fraction, or a
// request by memory as a part of the hosts' average device.
func (h gpuHosts) gpusOf(r PodRequest) float64 {
	switch {
	case r.GPUs > 0:
		return float64(r.GPUs)
	case r.GPUFraction > 0:
		return float64(r.GPUFraction) / float64(OneGPU) * float64(r.SharedDevices())
	case r.GPUMemory > 0 && h.devMem > 0:
		return min(max(float64(r.GPUMemory)*h.gpus/h.devMem, float64(r.GPUCompute)/float64(OneGPU)), 1) * float64(r.SharedDevices())
	case r.GPUCompute > 0:
		return float64(r.GPUCompute) / float64(OneGPU) * float64(r.SharedDevices())
	}
	return 0
}

// spokenCost is what the option takes that pods naming its devices' model need.
func (m *fragModel) spokenCost(n *Node, o option) float64 {
	if len(m.spoken) == 0 {
		return 0
	}
	amount := float64(OneGPU)
	if o.share.shared() {
		amount = float64(o.share.milli)
	}
	var c float64
	for _, g := range o.gpus {
		c += amount * m.spoken[n.GPUs[g].Model]
	}
	return c
}

// pressure is how much CPU (or memory, whichever is more) the workload asks per GPU, as
// a multiple of what the GPU nodes have per GPU: 1 means that the hosts would run out as
// the GPUs are filled. Shapes are weighted as in the model (by frequency), CPU-only ones
// included: they compete for the same hosts. A workload with no GPU demand, or nodes
// without GPUs, press at 0.
func (h gpuHosts) pressure(shapes []Shape) float64 {
	var gpu, cpu, mem float64
	for _, sh := range shapes {
		r := sh.Request
		gpu += sh.Weight * h.gpusOf(r)
		cpu += sh.Weight * float64(r.CPU)
		mem += sh.Weight * float64(r.Memory)
	}
	if gpu == 0 || h.gpus == 0 {
		return 0
	}
	var p float64
	if h.cpu > 0 {
		p = (cpu / gpu) / (h.cpu / h.gpus)
	}
	if h.mem > 0 {
		p = max(p, (mem/gpu)/(h.mem/h.gpus))
	}
	return p
}

func keyOf(class int32, used []MilliGPU, cpu, mem int64) fragKey {
	k := fragKey{class: class, n: uint8(len(used)), cpu: cpu, mem: mem}
	copy(k.used[:], used)
	slices.Sort(k.used[:len(used)])
	return k
}

// value is the node's expected unusable free GPU capacity in the given state; key is its
// memo key when memo is true.
func (m *fragModel) value(n *Node, memo bool, key fragKey, used []MilliGPU, cpu, mem int64) float64 {
	if memo {
		if v, ok := m.memo[key]; ok {
			return v
		}
	}
	var total float64
	for _, sh := range m.shapes {
		// The packed measure sees CPU and memory running out before the devices; FGD's
		// single-pod measure sees whether one more pod fits at all. Allot counts both.
		total += sh.Weight * float64(m.unusable(n, used, cpu, mem, &sh))
		if m.packed > 0 {
			total += m.packed * sh.Weight * float64(m.unusablePacked(n, used, cpu, mem, &sh))
		}
	}
	if memo {
		m.memo[key] = total
	}
	return total
}

// unusable is the free GPU capacity of the node a pod of this shape could not use.
func (m *fragModel) unusable(n *Node, used []MilliGPU, cpu, mem int64, sh *Shape) MilliGPU {
	r := sh.Request
	if r.GPUs == 0 && !r.Shared() {
		return 0 // a CPU-only pod wants no GPU: it strands nothing by not using one
	}
	var free, all MilliGPU
	fits := cpu >= r.CPU && mem >= r.Memory
	whole := 0
	for g := range n.GPUs {
		f := OneGPU - min(used[g], OneGPU)
		all += f
		dev := &n.GPUs[g]
		ok := len(sh.GPUTypes) == 0 || slices.Contains(sh.GPUTypes, dev.Model)
		switch {
		case !ok:
		case r.GPUs > 0:
			if f == OneGPU {
				whole++
				free += f
			}
		default:
			if p, ok := partOn(r, dev); ok && f >= p.milli {
				free += f
			}
		}
	}
	if !fits || whole < r.GPUs || (r.Shared() && free == 0) {
		return all
	}
	return all - free
}

// unusablePacked is the node's free GPU capacity left over after as many pods of the shape
// as fit at once: the count is the least of what the devices, the CPU and the memory allow.
func (m *fragModel) unusablePacked(n *Node, used []MilliGPU, cpu, mem int64, sh *Shape) MilliGPU {
	r := sh.Request
	if r.GPUs == 0 && !r.Shared() {
		return 0
	}
	var all MilliGPU
	byGPU := int64(0)
	whole := 0
	var per MilliGPU // GPU capacity one pod takes
	for g := range n.GPUs {
		f := OneGPU - min(used[g], OneGPU)
		all += f
		dev := &n.GPUs[g]
		if len(sh.GPUTypes) > 0 && !slices.Contains(sh.GPUTypes, dev.Model) {
			continue
		}
		switch {
		case r.GPUs > 0:
			per = MilliGPU(r.GPUs) * OneGPU
			if f == OneGPU {
				whole++
			}
		default:
			p, ok := partOn(r, dev)
			if !ok {
				continue
			}
			per = p.milli
			byGPU += int64(f / p.milli)
		}
	}
	if r.GPUs > 0 {
		byGPU = int64(whole / r.GPUs)
	}
	count := byGPU
	if r.CPU > 0 {
		count = min(count, cpu/r.CPU)
	}
	if r.Memory > 0 {
		count = min(count, mem/r.Memory)
	}
	return all - MilliGPU(max(count, 0))*per
}

// fragState is the node's memo key now, cached until the node changes.
func (s *session) fragState(n *nodeState) (fragKey, bool) {
	if !n.fclassSet {
		n.fclass, n.fmemo = s.frag.classOf(n.n)
		n.fclassSet = true
	}
	if !n.fmemo {
		return fragKey{}, false
	}
	if n.keyVer != n.ver {
		n.key = keyOf(n.fclass, n.gpuUsed, n.n.CPU-n.cpuUsed, n.n.Memory-n.memUsed)
		n.keyHash = n.key.hash()
		n.keyVer = n.ver
	}
	return n.key, true
}

// fragDelta is how much the option would change the node's fragmentation, with the
// capacity it takes that pods naming its devices' model need (spokenCost; none but in
// Allot's default on tight hosts).
func (s *session) fragDelta(n *nodeState, r PodRequest, o option) float64 {
	var after [64]MilliGPU
	used := after[:len(n.gpuUsed)]
	copy(used, n.gpuUsed)
	for _, g := range o.gpus {
		dev := &n.n.GPUs[g]
		used[g] = usedOf(dev, n.books[g].add(o.share.on(dev), 1))
	}
	cpu, mem := n.n.CPU-n.cpuUsed, n.n.Memory-n.memUsed
	key, memo := s.fragState(n)
	before := s.frag.value(n.n, memo, key, n.gpuUsed, cpu, mem)
	var akey fragKey
	if memo {
		akey = keyOf(n.fclass, used, cpu-r.CPU, mem-r.Memory)
	}
	return s.frag.value(n.n, memo, akey, used, cpu-r.CPU, mem-r.Memory) - before + s.frag.spokenCost(n.n, o)
}
