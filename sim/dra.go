package sim

// Nodes whose GPUs are published through DRA, and jobs whose pods claim them, in scenario
// files. A DRA node publishes its GPUs as NVIDIA's DRA driver does (kube/dra.NVIDIASlice:
// gpu-N devices, and seven 1g.10gb MIG devices for each GPU in MIG mode); a claim is counted
// and its nodes chosen by the same code the scheduler runs on a cluster (kube/dra: the
// inventory, the count, and kube-scheduler's structured allocator asked whether the claim
// could be allocated on a node at all). Jobs asking for GPUs without a claim are kept off
// DRA nodes, as the scheduler keeps them.

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/dra"
)

// ClaimSpec is what each pod of a job claims through DRA: count devices of a class, all
// matching a CEL selector when one is given.
type ClaimSpec struct {
	DeviceClass string `yaml:"deviceClass"`
	Count       int64  `yaml:"count"`
	Selector    string `yaml:"selector"`
}

// draCluster is the DRA part of a compiled scenario.
type draCluster struct {
	inv   *dra.Inventory
	nodes map[engine.NodeID]*corev1.Node
	// held keeps the GPUs in MIG mode from being given whole (dra.EngineGPUs).
	held []engine.Job
}

// compileDRA publishes the slices of the DRA nodes and books their GPUs as the scheduler
// does.
func (sc *Scenario) compileDRA(c *compiled) error {
	var slices []*resourceapi.ResourceSlice
	for i, ns := range sc.Cluster.Nodes {
		path := fmt.Sprintf("cluster.nodes[%d]", i)
		if !ns.DRA {
			if ns.MIGGPUs != 0 {
				return sc.errorf(path+".migGPUs", "migGPUs needs dra: true (MIG devices are published through DRA)")
			}
			continue
		}
		if ns.MIGGPUs < 0 || ns.MIGGPUs > ns.GPUs {
			return sc.errorf(path+".migGPUs", "%d is not allowed: between 0 and the node's %d GPUs", ns.MIGGPUs, ns.GPUs)
		}
		for _, n := range c.nodes {
			if !sc.nodeOf(ns, string(n.ID)) {
				continue
			}
			model, mem := "", int64(0)
			if len(n.GPUs) > 0 {
				model, mem = n.GPUs[0].Model, n.GPUs[0].Memory
			}
			id := n.ID
			slices = append(slices, dra.NVIDIASlice(dra.NVIDIANode{Name: string(id), Product: model, GPUs: len(n.GPUs), MemoryMi: mem >> 20,
				MIGGPUs: ns.MIGGPUs, UUID: func(g int) string { return fmt.Sprintf("GPU-sim-%s-%d", id, g) }}))
		}
	}
	if len(slices) == 0 {
		return nil
	}
	d := &draCluster{inv: dra.NewInventory(slices, dra.NVIDIAClasses(), dra.DefaultClassNames, cel.NewCache(100, cel.Features{})),
		nodes: map[engine.NodeID]*corev1.Node{}}
	for i := range c.nodes {
		n := &c.nodes[i]
		if len(d.inv.NodeGPUs(string(n.ID))) == 0 {
			continue
		}
		var held []engine.Job
		n.GPUs, held = d.inv.EngineGPUs(string(n.ID), "")
		d.held = append(d.held, held...)
		d.nodes[n.ID] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: string(n.ID), Labels: n.Labels}}
	}
	c.dra = d
	return nil
}

// nodeOf tells whether a node name comes from a cluster.nodes entry.
func (sc *Scenario) nodeOf(ns NodeSpec, name string) bool {
	if ns.Name != "" {
		return name == ns.Name
	}
	rest, ok := strings.CutPrefix(name, ns.NamePrefix+"-")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// claimRequest is what a job's claim counts for, as the scheduler counts it.
func (sc *Scenario) claimRequest(c *compiled, js JobSpec, path string) (engine.PodRequest, *resourceapi.ResourceClaim, error) {
	var req engine.PodRequest
	cs := js.Claim
	if js.GPU != nil || js.GPUMemory != "" {
		return req, nil, sc.errorf(path+".claim", "set claim, or gpu/gpuMemory, not both: a pod asks for its GPUs one way")
	}
	if c.dra == nil {
		return req, nil, sc.errorf(path+".claim", "no node of the cluster is a DRA node (dra: true)")
	}
	if cs.DeviceClass != dra.NVIDIAGPUClass && cs.DeviceClass != dra.NVIDIAMIGClass {
		return req, nil, sc.errorf(path+".claim.deviceClass", "%q is not allowed: %s or %s", cs.DeviceClass, dra.NVIDIAGPUClass, dra.NVIDIAMIGClass)
	}
	exact := resourceapi.ExactDeviceRequest{DeviceClassName: cs.DeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: max(cs.Count, 1)}
	if cs.Selector != "" {
		exact.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cs.Selector}}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: js.Name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &exact}}}}}
	n, problem := c.dra.inv.Count(claim)
	if problem != "" {
		return req, nil, sc.errorf(path+".claim", "%s", problem)
	}
	req.GPUs, req.GPUFraction = n.GPUs, engine.MilliGPU(n.Share)
	return req, claim, nil
}

// claimFilter narrows a job's nodes: a claim's pods to the DRA nodes where the claim could
// be allocated, other GPU pods to the nodes that are not DRA nodes.
func (c *compiled) claimFilter(f *engine.NodeFilter, claim *resourceapi.ResourceClaim, asksGPUs bool) (*engine.NodeFilter, error) {
	if c.dra == nil || (claim == nil && !asksGPUs) {
		return f, nil
	}
	allowed := map[engine.NodeID]bool{}
	for _, n := range c.nodes {
		allowed[n.ID] = f == nil
	}
	if f != nil {
		for _, id := range f.Allowed {
			allowed[id] = true
		}
	}
	out := &engine.NodeFilter{}
	if f != nil {
		out.Preference, out.Dynamic = f.Preference, f.Dynamic
	}
	dropped := 0
	for _, n := range c.nodes {
		if !allowed[n.ID] {
			continue
		}
		node, isDRA := c.dra.nodes[n.ID]
		ok := !isDRA
		if claim != nil {
			ok = false
			if isDRA {
				fits, err := c.dra.inv.Fits(context.Background(), dra.DefaultFeatures, dra.Classes(classesByName()), node, []*resourceapi.ResourceClaim{claim})
				if err != nil {
					return nil, err
				}
				ok = fits
			}
		}
		if ok {
			out.Allowed = append(out.Allowed, n.ID)
		} else {
			dropped++
		}
	}
	why := fmt.Sprintf("%d node(s) cannot allocate its claims", dropped)
	if claim == nil {
		why = fmt.Sprintf("%d node(s) with their GPUs through DRA have no nvidia.com/gpu to give", dropped)
	}
	out.Excluded = why
	if f != nil && f.Excluded != "" {
		out.Excluded = f.Excluded + ", " + why
	}
	return out, nil
}

func classesByName() map[string]*resourceapi.DeviceClass {
	out := map[string]*resourceapi.DeviceClass{}
	for _, c := range dra.NVIDIAClasses() {
		out[c.Name] = c
	}
	return out
}
