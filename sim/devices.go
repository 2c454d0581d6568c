package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/mig"
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
	return sc.compileMIG(n, ns, path)
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
	if js.GPUMemoryLimit != "" {
		l, err := sc.quantity(path+".gpuMemoryLimit", js.GPUMemoryLimit, "", false)
		if err != nil {
			return err
		}
		if !req.Shared() || l < req.GPUMemory {
			return sc.errorf(path+".gpuMemoryLimit", "%s is not allowed: a limit goes with a slice (gpu below 1 or gpuMemory) and is at least its gpuMemory", js.GPUMemoryLimit)
		}
		req.GPUMemoryLimit = l
	}
	if err := sc.compileMIGRequest(req, js, path); err != nil {
		return err
	}
	if js.GPUCount != 0 {
		if js.GPUCount < 1 || !(req.Shared() || req.WantsMIG()) {
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

// compileMIG puts a node's GPUs in MIG mode: a fixed layout, or one the engine makes.
func (sc *Scenario) compileMIG(n *engine.Node, ns NodeSpec, path string) error {
	switch ns.MIGStrategy {
	case "", "mixed":
	case "single":
		if len(ns.MIGLayout) == 0 || ns.MIGDynamic || slices.ContainsFunc(ns.MIGLayout, func(e string) bool {
			return strings.Split(e, "@")[0] != strings.Split(ns.MIGLayout[0], "@")[0]
		}) {
			return sc.errorf(path+".migStrategy", "single needs a migLayout of one profile, not migDynamic: the device plugin's single strategy gives instances of one profile")
		}
	default:
		return sc.errorf(path+".migStrategy", "%q is not allowed: single or mixed", ns.MIGStrategy)
	}
	if len(ns.MIGLayout) == 0 && !ns.MIGDynamic {
		return nil
	}
	if len(n.GPUs) == 0 {
		return sc.errorf(path+".migLayout", "the node has no GPUs to put in MIG mode")
	}
	model, ok := mig.ForProduct(n.GPUs[0].Model, n.GPUs[0].Memory)
	if !ok {
		return sc.errorf(path+".gpuType", "%q has no MIG: name a GPU that has, such as NVIDIA-A100-SXM4-80GB or NVIDIA-H100-80GB-HBM3 (families: %s)",
			n.GPUs[0].Model, strings.Join(mig.Families(), ", "))
	}
	var layout mig.Layout
	var instances []engine.MIGInstance
	for k, entry := range ns.MIGLayout {
		field := fmt.Sprintf("%s.migLayout[%d]", path, k)
		name, at, hasStart := strings.Cut(entry, "@")
		p, ok := model.Profile(name)
		if !ok {
			return sc.errorf(field, "%q is not a profile of %s: its profiles are %s", name, model.Name, strings.Join(model.Names(), ", "))
		}
		start := -1
		if hasStart {
			v, err := strconv.Atoi(at)
			if err != nil {
				return sc.errorf(field, "%q: the start after @ is a memory slice number, such as 3g.40gb@4", entry)
			}
			start = v
		} else {
			for _, s := range p.Starts {
				if layout.Mask()&p.Mask(s) == 0 {
					start = s
					break
				}
			}
			if start < 0 {
				return sc.errorf(field, "no room is left for a %s beside %v on %s", name, ns.MIGLayout[:k], model.Name)
			}
		}
		if err := model.Valid(layout, p, start); err != nil {
			return sc.errorf(field, "%v", err)
		}
		layout = append(layout, mig.Placed{Profile: p, Start: start})
		instances = append(instances, engine.MIGInstance{Profile: p.Name, Start: start})
	}
	for g := range n.GPUs {
		in := slices.Clone(instances)
		for i := range in {
			in[i].UUID = fmt.Sprintf("MIG-sim-%s-%d-%d", n.ID, g, in[i].Start)
		}
		n.GPUs[g].MIG = &engine.MIGDevice{Model: model, Dynamic: ns.MIGDynamic, Instances: in}
		if ns.MIGStrategy == "single" {
			n.GPUs[g].MIG.AskedBy = convert.SingleMIGAsk(n.GPUs[g].Model + "-MIG-" + in[0].Profile)
		}
	}
	return nil
}

// compileMIGRequest reads a job's MIG request: a profile by name, or the smallest
// profile holding its fraction or memory.
func (sc *Scenario) compileMIGRequest(req *engine.PodRequest, js JobSpec, path string) error {
	switch {
	case js.MIG == "":
		return nil
	case js.MIG == "smallest":
		if req.GPUFraction == 0 && req.GPUMemory == 0 {
			return sc.errorf(path+".mig", "smallest needs gpu (a fraction below 1) or gpuMemory to size the instance")
		}
		req.MIGShare, req.MIGMemory = req.GPUFraction, req.GPUMemory
	default:
		if _, _, err := mig.ParseName(js.MIG); err != nil {
			return sc.errorf(path+".mig", "%v, or smallest", err)
		}
		if req.GPUs > 0 || req.Shared() {
			return sc.errorf(path+".mig", "a profile by name takes no gpu or gpuMemory: the profile is the size")
		}
		req.MIG = js.MIG
	}
	req.GPUFraction, req.GPUMemory, req.GPUCompute = 0, 0, 0
	return nil
}

// makeInstances does what the node agent does for a pod bound to MIG instances the device
// does not have yet (a dynamic device): it destroys the idle instances in their way and
// creates them.
func (w *World) makeInstances(b engine.Binding) {
	if b.MIG == "" {
		return
	}
	var node *engine.Node
	for i := range w.nodes {
		if w.nodes[i].ID == b.Node {
			node = &w.nodes[i]
		}
	}
	if node == nil {
		return
	}
	for i, g := range b.GPUs {
		dev := node.GPUs[g].MIG
		if dev == nil || !dev.Dynamic {
			continue
		}
		p, ok := dev.Model.Profile(b.MIG)
		if !ok {
			continue
		}
		want := p.Mask(b.MIGStarts[i])
		kept := dev.Instances[:0]
		exists := false
		for _, in := range dev.Instances {
			ip, _ := dev.Model.Profile(in.Profile)
			switch {
			case ip == p && in.Start == b.MIGStarts[i]:
				exists = true
				kept = append(kept, in)
			case ip == nil || ip.Mask(in.Start)&want == 0:
				kept = append(kept, in)
			}
		}
		dev.Instances = kept
		if !exists {
			dev.Instances = append(dev.Instances, engine.MIGInstance{Profile: p.Name, Start: b.MIGStarts[i],
				UUID: fmt.Sprintf("MIG-sim-%s-%d-%d", node.ID, g, b.MIGStarts[i])})
		}
	}
}

// Accelerators lists the kinds of other vendors' devices the nodes have, sorted: the order
// the engine counts them in, which queue quotas of a kind are written against.
func Accelerators(nodes []engine.Node) []string {
	var out []string
	for _, n := range nodes {
		if n.Accelerator != "" && !slices.Contains(out, n.Accelerator) {
			out = append(out, n.Accelerator)
		}
	}
	slices.Sort(out)
	return out
}

// DividedPools lists the node pools some queue gives a quota of its own, sorted: the
// pools whose GPUs the engine divides apart (engine.Snapshot.Pools), in its order.
func DividedPools(qs []QueueSpec) []string {
	var out []string
	for _, q := range qs {
		for p := range q.Pools {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// compileQueuePools reads a queue's quotas per node pool.
func (sc *Scenario) compileQueuePools(c *compiled, q *engine.Queue, qs QueueSpec, path string) error {
	pools := DividedPools(sc.Queues)
	if len(pools) > engine.MaxPools {
		return sc.errorf(path+".pools", "%d node pools are given quotas of their own (%s): the engine divides at most %d apart", len(pools), strings.Join(pools, ", "), engine.MaxPools)
	}
	for _, name := range slices.Sorted(maps.Keys(qs.Pools)) {
		p, at := qs.Pools[name], path+".pools."+name
		has := false
		for _, n := range c.nodes {
			has = has || (n.Pool == name && n.Accelerator == "")
		}
		switch {
		case name == "":
			return sc.errorf(at, "the default pool's GPUs are the queue's quota itself: name a pool of nodes labelled %s", PoolLabel)
		case !has:
			return sc.errorf(at, "no node with NVIDIA GPUs is in pool %q", name)
		case p.Quota < 0:
			return sc.errorf(at+".quota", "%v is not allowed: quota is a number of GPUs, 0 or more", p.Quota)
		case p.OverQuotaWeight != nil && *p.OverQuotaWeight < 0:
			return sc.errorf(at+".overQuotaWeight", "%v is not allowed: the weight must be 0 or more", *p.OverQuotaWeight)
		case p.Limit != nil && *p.Limit < p.Quota:
			return sc.errorf(at+".limit", "%v is not allowed: the limit must be at least the quota (%v GPUs)", *p.Limit, p.Quota)
		}
		r := &q.Resources[engine.PoolResource(slices.Index(pools, name))]
		r.Quota, r.OverQuotaWeight = milliGPU(p.Quota), p.OverQuotaWeight
		if p.Limit != nil {
			l := milliGPU(*p.Limit)
			r.Limit = &l
		}
	}
	return nil
}

// compileQueueKinds reads a queue's quotas of other vendors' devices.
func (sc *Scenario) compileQueueKinds(c *compiled, q *engine.Queue, qs QueueSpec, path string) error {
	kinds := Accelerators(c.nodes)
	if len(kinds) > engine.MaxAccelerators {
		return sc.errorf("cluster.nodes", "%d kinds of accelerator (%s): the engine counts at most %d besides NVIDIA GPUs", len(kinds), strings.Join(kinds, ", "), engine.MaxAccelerators)
	}
	for _, kind := range slices.Sorted(maps.Keys(qs.Accelerators)) {
		quota := qs.Accelerators[kind]
		i := slices.Index(kinds, kind)
		if i < 0 {
			return sc.errorf(path+".accelerators."+kind, "no node has accelerators of kind %q; kinds: %s", kind, strings.Join(kinds, ", "))
		}
		if quota < 0 {
			return sc.errorf(path+".accelerators."+kind, "%v is not allowed: a quota is a number of devices, 0 or more", quota)
		}
		q.Resources[engine.AcceleratorResource(i)].Quota = milliGPU(quota)
	}
	return nil
}

// compileKind checks a job's kind of accelerator: one some node has, and whole devices.
func (sc *Scenario) compileKind(c *compiled, req engine.PodRequest, js JobSpec, path string) error {
	if js.Accelerator == "" {
		return nil
	}
	if kinds := Accelerators(c.nodes); !slices.Contains(kinds, js.Accelerator) {
		return sc.errorf(path+".accelerator", "no node has accelerators of kind %q; kinds: %s", js.Accelerator, strings.Join(kinds, ", "))
	}
	if req.Shared() || req.WantsMIG() {
		return sc.errorf(path+".accelerator", "fractions are NVIDIA GPUs only: with accelerator %s, gpu is a whole number of devices", js.Accelerator)
	}
	return nil
}

// compileSpot reads a job's spot policy: which capacity it may use, when on-demand
// follows, and how many interruptions it takes before it is given on-demand only.
func (sc *Scenario) compileSpot(j *engine.Job, js JobSpec, path string) error {
	p, err := engine.ParseSpotPolicy(js.Spot)
	if err != nil {
		return sc.errorf(path+".spot", "%v", err)
	}
	j.Spot = p
	if js.OnDemandAfter != "" {
		d, err := time.ParseDuration(js.OnDemandAfter)
		switch {
		case err != nil || d <= 0:
			return sc.errorf(path+".onDemandAfter", "%q is not allowed: a positive duration such as 10m", js.OnDemandAfter)
		case p != engine.SpotFirst:
			return sc.errorf(path+".onDemandAfter", "is read only with spot: first (spot first, on-demand after this long)")
		}
		j.OnDemandAfter = d
	}
	if b := js.InterruptionBudget; b != nil {
		if *b < 0 {
			return sc.errorf(path+".interruptionBudget", "%d is not allowed: the interruptions a job survives on spot capacity, 0 or more", *b)
		}
		j.InterruptionBudget = b
	}
	return nil
}
