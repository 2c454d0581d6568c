package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Slices of GPUs checked on random clusters, against arithmetic written here apart from
// the engine's: nodes whose GPUs differ in memory, cordoned GPUs, caps on sharers; pods
// asking fractions, memory, compute, both, slices of several GPUs, picked or excluded
// UUIDs, one island. Two properties after every cycle and once settled:
//   - safety: no GPU holds more memory or compute than it has, or more sharers than its
//     node allows; no pod is on a GPU it ruled out, off its island, or newly on a cordoned
//     GPU; a slice of N GPUs holds N;
//   - work conservation: once settled, with one queue and nothing to wait for but room,
//     no waiting pod would fit on the GPUs as they are booked (so slices that divide a
//     GPU exactly, three 8Gi on 24Gi, all run).

func genSliceCluster(t *rapid.T) *Snapshot {
	snap := &Snapshot{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range rapid.IntRange(1, 3).Draw(t, "nodes") {
		n := Node{ID: NodeID(fmt.Sprintf("n%d", i)), CPU: 64000, Memory: 256 << 30}
		if rapid.IntRange(0, 2).Draw(t, "capped") == 0 {
			n.MaxSharers = rapid.IntRange(1, 4).Draw(t, "maxSharers")
		}
		gpus := rapid.IntRange(1, 4).Draw(t, "gpus")
		for g := range gpus {
			dev := GPU{Model: rapid.SampledFrom([]string{"A100", "T4"}).Draw(t, "model"),
				Memory: int64(rapid.SampledFrom([]int{16, 24, 40}).Draw(t, "gpuGi")) << 30,
				UUID:   fmt.Sprintf("GPU-%d-%d", i, g), Island: g / 2}
			if rapid.IntRange(0, 5).Draw(t, "cordoned") == 0 {
				dev.Cordoned = "cordoned"
			}
			n.GPUs = append(n.GPUs, dev)
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	snap.Queues = []Queue{{ID: "q", Resources: [numResources]QueueResource{{Quota: 1 << 40}}}}
	for i := range rapid.IntRange(1, 14).Draw(t, "jobs") {
		snap.Jobs = append(snap.Jobs, genSliceJob(t, snap, i))
	}
	return snap
}

func genSliceJob(t *rapid.T, snap *Snapshot, i int) Job {
	j := Job{ID: JobID(fmt.Sprintf("j%d", i)), Queue: "q", MinMember: 1, SubmitTime: snap.Now.Add(time.Duration(i) * time.Second)}
	var r PodRequest
	switch rapid.IntRange(0, 4).Draw(t, "kind") {
	case 0:
		r.GPUs = rapid.IntRange(1, 2).Draw(t, "whole")
	case 1:
		r.GPUFraction = MilliGPU(rapid.SampledFrom([]int{100, 250, 333, 500, 700}).Draw(t, "fraction"))
		if rapid.Bool().Draw(t, "fractionCompute") {
			r.GPUCompute = MilliGPU(rapid.SampledFrom([]int{100, 900}).Draw(t, "compute"))
		}
	case 2:
		r.GPUMemory = int64(rapid.SampledFrom([]int{1, 4, 8, 12, 16}).Draw(t, "memGi")) << 30
	case 3:
		r.GPUCompute = MilliGPU(rapid.SampledFrom([]int{100, 300, 500, 800}).Draw(t, "compute"))
	case 4:
		r.GPUMemory = int64(rapid.SampledFrom([]int{2, 8}).Draw(t, "memGi")) << 30
		r.GPUCompute = MilliGPU(rapid.SampledFrom([]int{200, 800}).Draw(t, "compute"))
	}
	if r.Shared() && rapid.IntRange(0, 3).Draw(t, "multi") == 0 {
		r.Devices = 2
	}
	if rapid.IntRange(0, 3).Draw(t, "island") == 0 {
		j.SameIsland = true
	}
	n := snap.Nodes[rapid.IntRange(0, len(snap.Nodes)-1).Draw(t, "uuidNode")]
	uuid := n.GPUs[rapid.IntRange(0, len(n.GPUs)-1).Draw(t, "uuidGPU")].UUID
	switch rapid.IntRange(0, 5).Draw(t, "choose") {
	case 0:
		j.GPUUUIDs = []string{uuid}
	case 1:
		j.ExcludeGPUUUIDs = []string{uuid}
	case 2:
		j.ExcludeGPUTypes = []string{"T4"}
	}
	j.Pods = []Pod{{ID: PodID(string(j.ID) + "-0"), Request: r}}
	return j
}

// sliceOf is, independently of the engine, what a request takes of a device: a fraction
// its share of both, memory or compute alone the other in proportion (rounded down).
func sliceOf(r PodRequest, dev GPU) (mem int64, compute int64, ok bool) {
	switch {
	case r.GPUFraction > 0 && r.GPUCompute > 0:
		return dev.Memory * int64(r.GPUFraction) / 1000, int64(r.GPUCompute), true
	case r.GPUFraction > 0:
		return dev.Memory * int64(r.GPUFraction) / 1000, int64(r.GPUFraction), true
	case r.GPUMemory > dev.Memory:
		return 0, 0, false
	case r.GPUMemory > 0 && r.GPUCompute > 0:
		return r.GPUMemory, int64(r.GPUCompute), true
	case r.GPUMemory > 0:
		return r.GPUMemory, 0, true
	}
	return dev.Memory * int64(r.GPUCompute) / 1000, int64(r.GPUCompute), true
}

type devLoad struct {
	mem, compute int64
	sharers      int
	whole        bool
}

// loads sums what the bound pods hold of each device.
func loads(t *rapid.T, snap *Snapshot) map[devKey]*devLoad {
	nodes := map[NodeID]Node{}
	for _, n := range snap.Nodes {
		nodes[n.ID] = n
	}
	out := map[devKey]*devLoad{}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			b := p.Binding
			if b == nil {
				continue
			}
			r, n := p.Request, nodes[b.Node]
			if want := max(r.Devices, 1); r.Shared() && len(b.GPUs) != want {
				t.Fatalf("pod %s asks a slice of %d GPUs, holds %v", p.ID, want, b.GPUs)
			}
			islands := map[int]bool{}
			for _, g := range b.GPUs {
				dev := n.GPUs[g]
				islands[dev.Island] = true
				if !allowedDevice(&j, &dev) {
					t.Fatalf("pod %s on %s GPU %d (%s %s), which it rules out", p.ID, b.Node, g, dev.UUID, dev.Model)
				}
				k := devKey{b.Node, g}
				if out[k] == nil {
					out[k] = &devLoad{}
				}
				l := out[k]
				if !r.Shared() {
					l.whole = true
					l.mem += dev.Memory
					l.compute += 1000
					continue
				}
				mem, compute, ok := sliceOf(r, dev)
				if !ok {
					t.Fatalf("pod %s holds a slice of %s GPU %d, too small for it", p.ID, b.Node, g)
				}
				if b.Memory != mem || int64(b.Compute) != compute {
					t.Fatalf("pod %s booked %d bytes and %d compute on %s GPU %d, its slice is %d and %d", p.ID, b.Memory, b.Compute, b.Node, g, mem, compute)
				}
				l.mem += mem
				l.compute += compute
				l.sharers++
			}
			if j.SameIsland && len(islands) > 1 {
				t.Fatalf("pod %s must keep to one island, holds GPUs %v on %s", p.ID, b.GPUs, b.Node)
			}
		}
	}
	for k, l := range out {
		dev, n := nodes[k.node].GPUs[k.gpu], nodes[k.node]
		if l.mem > dev.Memory || l.compute > 1000 {
			t.Fatalf("%s GPU %d over-committed: %d of %d bytes, %d of 1000 compute", k.node, k.gpu, l.mem, dev.Memory, l.compute)
		}
		if n.MaxSharers > 0 && l.sharers > n.MaxSharers {
			t.Fatalf("%s GPU %d shared by %d pods, its node allows %d", k.node, k.gpu, l.sharers, n.MaxSharers)
		}
	}
	return out
}

// wouldFit tells, by brute force, whether a pending pod has room as the GPUs are booked.
func wouldFit(j *Job, r PodRequest, n Node, load map[devKey]*devLoad) bool {
	// The devices with room, by the slice they would hold and, for one island, the island.
	type group struct {
		island       int
		mem, compute int64
	}
	free := map[group]int{}
	for g, dev := range n.GPUs {
		l := load[devKey{n.ID, g}]
		if l == nil {
			l = &devLoad{}
		}
		if dev.Cordoned != "" || !allowedDevice(j, &dev) {
			continue
		}
		island := -1
		if j.SameIsland {
			island = dev.Island
		}
		if !r.Shared() {
			if l.mem == 0 && l.compute == 0 {
				free[group{island: island}]++
			}
			continue
		}
		mem, compute, ok := sliceOf(r, dev)
		if ok && l.mem+mem <= dev.Memory && l.compute+compute <= 1000 && (n.MaxSharers == 0 || l.sharers < n.MaxSharers) {
			free[group{island, mem, compute}]++
		}
	}
	need := r.GPUs
	if r.Shared() {
		need = max(r.Devices, 1)
	}
	// A slice of several GPUs holds the same slice of each.
	for _, k := range free {
		if k >= need {
			return true
		}
	}
	return false
}

func TestSlicesOnRandomClusters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := genSliceCluster(t)
		placement := rapid.SampledFrom([]Placement{PlacementAllot, PlacementBinPack, PlacementSpread}).Draw(t, "placement")
		eng := New(Options{Placement: placement, GPUPacking: Packing(rapid.IntRange(0, 2).Draw(t, "gpuPacking"))})
		before := map[PodID]*Binding{}
		for round := range 2 {
			settle(t, eng, snap)
			load := loads(t, snap)
			for _, j := range snap.Jobs {
				for _, p := range j.Pods {
					if p.Binding != nil {
						for _, g := range p.Binding.GPUs {
							dev := nodeOf(snap, p.Binding.Node).GPUs[g]
							if dev.Cordoned != "" && before[p.ID] == nil {
								t.Fatalf("pod %s placed on cordoned %s GPU %d", p.ID, p.Binding.Node, g)
							}
						}
						continue
					}
					for _, n := range snap.Nodes {
						if wouldFit(&j, p.Request, n, load) {
							t.Fatalf("pod %s (%+v) waits though %s has room for it; reason: %s", p.ID, p.Request, n.ID,
								eng.Schedule(snap).Pending[j.ID].Message)
						}
					}
				}
			}
			for _, j := range snap.Jobs {
				for _, p := range j.Pods {
					before[p.ID] = p.Binding
				}
			}
			// Churn: a job ends and another arrives.
			k := rapid.IntRange(0, len(snap.Jobs)-1).Draw(t, "delete")
			snap.Jobs = slices.Delete(snap.Jobs, k, k+1)
			snap.Jobs = append(snap.Jobs, genSliceJob(t, snap, 100+round))
		}
	})
}

func nodeOf(snap *Snapshot, id NodeID) Node {
	for _, n := range snap.Nodes {
		if n.ID == id {
			return n
		}
	}
	return Node{}
}

type devKey struct {
	node NodeID
	gpu  int
}

// allowedDevice is the definition the engine's device choice is checked against: a job may
// be given a device whose model it accepts and does not exclude, and whose UUID it picks
// (where it picks any) and does not exclude.
func allowedDevice(j *Job, g *GPU) bool {
	return (len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, g.Model)) && !slices.Contains(j.ExcludeGPUTypes, g.Model) &&
		(len(j.GPUUUIDs) == 0 || slices.Contains(j.GPUUUIDs, g.UUID)) && !slices.Contains(j.ExcludeGPUUUIDs, g.UUID)
}
