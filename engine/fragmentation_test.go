package engine

import (
	"math"
	"testing"
)

// TestHostPressure: how much CPU or memory a workload asks per GPU, against what the GPU
// nodes have per GPU, on two 8-GPU nodes of 64 cores and 512 GiB and a CPU-only node
// (which does not count: the pressure is on the hosts of the GPUs).
//
//	gpu-a [8 GPUs, 64 cores]  gpu-b [8 GPUs, 64 cores]  cpu-c [no GPU, 128 cores]
//
// 8 cores per GPU is what the nodes have: 1-GPU pods asking 8 cores press at 1.
func TestHostPressure(t *testing.T) {
	nodes := []Node{gpuNode("gpu-a", "", "A100", 8), gpuNode("gpu-b", "", "A100", 8), {ID: "cpu-c", CPU: 128000, Memory: 1 << 40}}
	gpu := func(n int, cpu int64) PodRequest { return PodRequest{GPUs: n, CPU: cpu} }
	for _, c := range []struct {
		name   string
		shapes []Shape
		want   float64
	}{
		{"whole GPUs at the nodes' ratio", []Shape{{Request: gpu(1, 8000), Weight: 1}}, 1},
		{"half the nodes' ratio", []Shape{{Request: gpu(2, 8000), Weight: 1}}, 0.5},
		{"as many CPU-only pods again", []Shape{{Request: gpu(1, 8000), Weight: 1}, {Request: PodRequest{CPU: 8000}, Weight: 1}}, 2},
		{"half GPUs at half the CPU", []Shape{{Request: PodRequest{GPUFraction: OneGPU / 2, CPU: 4000}, Weight: 1}}, 1},
		{"memory presses harder than CPU", []Shape{{Request: PodRequest{GPUs: 1, CPU: 1000, Memory: 128 << 30}, Weight: 1}}, 2},
		{"by memory of the device: 40 of 80 GiB", []Shape{{Request: PodRequest{GPUMemory: 40 << 30, CPU: 4000}, Weight: 1}}, 1},
		{"no GPU demand", []Shape{{Request: PodRequest{CPU: 8000}, Weight: 1}}, 0},
	} {
		got := gpuHostsOf(nodes).pressure(c.shapes)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: pressure %.3f, want %.3f", c.name, got, c.want)
		}
	}
	// The published openb lists press at 0.69-0.85 and keep the light packed measure;
	// from 0.95 the hosts run out with the GPUs and it weighs more.
	if packedWeight(0.85) >= packedWeight(1) || packedWeight(0.95) != packedWeight(1.3) {
		t.Errorf("packed weight %v at 0.85, %v at 0.95, %v at 1, %v at 1.3", packedWeight(0.85), packedWeight(0.95), packedWeight(1), packedWeight(1.3))
	}
}

// TestScarceModelKeptForThePodsThatNeedIt: one pod in six names the T4, whose node is the
// cluster's only one; the rest could go anywhere, and eight-GPU pods want the G2 node whole.
//
//	t4-a [2 T4, 104 cores]   g2-a [8 G2, 96 cores]
//
// FGD's measure sends a 1-GPU pod that names no model to the T4 (it keeps the G2 whole for
// the eight-GPU pods, and the T4 is where those can never go). When the hosts run out with
// the GPUs (CPU-only pods press them to 1.0), the default keeps the T4s for the pods that
// cannot run elsewhere; with CPU to spare (no CPU-only pods, pressure 0.5) it does not.
func TestScarceModelKeptForThePodsThatNeedIt(t *testing.T) {
	t4 := Node{ID: "t4-a", CPU: 104000, Memory: 512 << 30, GPUs: []GPU{{Model: "T4", Memory: 16 << 30}, {Model: "T4", Memory: 16 << 30}}}
	g2 := gpuNode("g2-a", "", "G2", 8)
	g2.CPU = 96000
	nodes := []Node{t4, g2}
	anywhere := PodRequest{GPUs: 1, CPU: 10000}
	workload := func(cpuOnly float64) []Shape {
		return []Shape{
			{Request: anywhere, Weight: 6},
			{Request: anywhere, GPUTypes: []string{"T4"}, Weight: 2},
			{Request: PodRequest{GPUs: 8, CPU: 80000}, Weight: 0.5},
			{Request: PodRequest{CPU: 10000}, Weight: cpuOnly},
		}
	}
	for _, c := range []struct {
		name    string
		cpuOnly float64
		want    NodeID
	}{
		{"hosts tight", 12, "g2-a"},
		{"CPU to spare", 0, "t4-a"},
	} {
		shapes := workload(c.cpuOnly)
		p := NewPlacer(nodes, Options{Placement: PlacementAllot, Workload: shapes})
		b, ok := p.Place(anywhere, nil)
		if !ok || b.Node != c.want {
			t.Errorf("%s (host pressure %.2f): a pod naming no model went to %q, want %q", c.name, gpuHostsOf(nodes).pressure(p.s.frag.shapes), b.Node, c.want)
		}
	}
	// What a model is spoken for: the T4 pods carry a sixth of the GPU demand (2 of 12) and
	// may use a fifth of the devices (2 of 10): 0.83 of each T4. The G2 is spoken for by none.
	spoken := gpuHostsOf(nodes).spokenFor(workload(12))
	if math.Abs(spoken["T4"]-2.0/12*10/2) > 1e-9 || spoken["G2"] != 0 {
		t.Errorf("spoken for: %v, want T4 0.833 and G2 0", spoken)
	}
}
