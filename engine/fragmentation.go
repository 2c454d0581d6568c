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
	// packed measures against as many pods of each shape as the node could take at once,
	// so that a node whose CPU runs out before its GPUs counts those GPUs as stranded.
	packed bool
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

func newFragModel(shapes []Shape) *fragModel {
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

// packedWeight scales the packed measure against FGD's. Tuned on the openb trace: at 1
// it stranded whole GPUs that multi-GPU pods needed; at 0.1 it beats FGD on every list.
const packedWeight = 0.1

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
		if m.packed {
			total += packedWeight * sh.Weight * float64(m.unusablePacked(n, used, cpu, mem, &sh))
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
		case r.GPUMemory > 0:
			if r.GPUMemory <= dev.Memory && f >= memoryShare(r.GPUMemory, dev.Memory) {
				free += f
			}
		default:
			if f >= r.GPUFraction {
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
			need := r.GPUFraction
			if r.GPUMemory > 0 {
				if r.GPUMemory > dev.Memory {
					continue
				}
				need = memoryShare(r.GPUMemory, dev.Memory)
			}
			per = need
			byGPU += int64(f / need)
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

// fragDelta is how much the option would change the node's fragmentation.
func (s *session) fragDelta(n *nodeState, r PodRequest, o option) float64 {
	var after [64]MilliGPU
	used := after[:len(n.gpuUsed)]
	copy(used, n.gpuUsed)
	for _, g := range o.gpus {
		used[g] += gpuAmount(o.share)
	}
	cpu, mem := n.n.CPU-n.cpuUsed, n.n.Memory-n.memUsed
	key, memo := s.fragState(n)
	before := s.frag.value(n.n, memo, key, n.gpuUsed, cpu, mem)
	var akey fragKey
	if memo {
		akey = keyOf(n.fclass, used, cpu-r.CPU, mem-r.Memory)
	}
	return s.frag.value(n.n, memo, akey, used, cpu-r.CPU, mem-r.Memory) - before
}
