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
		got := hostPressure(c.shapes, nodes)
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
