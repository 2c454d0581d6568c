package sim

import (
	"math"
	"slices"

	"github.com/allot-dev/allot/engine"
)

// How scenario files say what HAMi users write: GPUs of different sizes on one node,
// cordoned GPUs, a cap on sharers (nodes); compute slices, slices of several GPUs, GPUs
// chosen or excluded by UUID and model, one island required, and node and GPU policies
// per job.

// compileDevices applies a node's per-GPU settings.
func (sc *Scenario) compileDevices(n *engine.Node, ns NodeSpec, path string) error {
	if len(ns.GPUMemories) > 0 {
		if len(ns.GPUMemories) != len(n.GPUs) {
			return sc.errorf(path+".gpuMemories", "lists %d sizes for %d GPUs: give one per GPU, in index order", len(ns.GPUMemories), len(n.GPUs))
		}
		for g, s := range ns.GPUMemories {
			m, err := sc.quantity(path+".gpuMemories", s, "", false)
			if err != nil {
				return err
			}
			n.GPUs[g].Memory = m
		}
	}
	for _, g := range ns.Cordon {
		if g < 0 || g >= len(n.GPUs) {
			return sc.errorf(path+".cordon", "GPU %d is not allowed: indices are 0 to %d", g, len(n.GPUs)-1)
		}
		n.GPUs[g].Cordoned = "cordoned by an admin (allot.dev/gpu-cordon)"
	}
	if ns.MaxSharers < 0 {
		return sc.errorf(path+".maxSharers", "%d is not allowed: a cap of 1 or more, or 0 for none", ns.MaxSharers)
	}
	n.MaxSharers = ns.MaxSharers
	return nil
}

// compileDeviceChoice reads a job's compute slice, slice count, device choice and policies.
func (sc *Scenario) compileDeviceChoice(j *engine.Job, req *engine.PodRequest, js JobSpec, path string) error {
	if c := js.GPUCompute; c != nil {
		m := math.Round(*c * 10)
		if !(m >= 1 && m <= 1000) || req.GPUs > 0 {
			return sc.errorf(path+".gpuCompute", "%v is not allowed: a percentage above 0 and up to 100, with gpu below 1 (its compute then, in place of the fraction's), gpuMemory, or alone", *c)
		}
		req.GPUCompute = engine.MilliGPU(m)
	}
	if js.GPUCount != 0 {
		if js.GPUCount < 1 || !req.Shared() {
			return sc.errorf(path+".gpuCount", "%d is not allowed: gpuCount is 1 or more, with a slice (gpu below 1, gpuMemory or gpuCompute); for whole GPUs set gpu", js.GPUCount)
		}
		req.Devices = js.GPUCount
	}
	j.GPUUUIDs, j.ExcludeGPUUUIDs, j.ExcludeGPUTypes = js.GPUUUID, js.ExcludeGPUUUID, js.ExcludeGPUType
	for _, t := range js.ExcludeGPUType {
		if slices.Contains(j.GPUTypes, t) {
			return sc.errorf(path+".excludeGPUType", "%q is both asked for (gpuType) and excluded", t)
		}
	}
	switch js.GPUIsland {
	case "":
	case "required":
		j.SameIsland = true
	default:
		return sc.errorf(path+".gpuIsland", "%q is not allowed: the only value is required", js.GPUIsland)
	}
	var err error
	if j.NodePacking, err = engine.ParsePacking(js.NodePolicy); err != nil {
		return sc.errorf(path+".nodePolicy", "%v", err)
	}
	if j.GPUPacking, err = engine.ParsePacking(js.GPUPolicy); err != nil {
		return sc.errorf(path+".gpuPolicy", "%v", err)
	}
	return nil
}
