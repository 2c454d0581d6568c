package scheduler

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/podfit"
)

// constrain adds the Kubernetes scheduling contract to a snapshot: each job's node filter
// and the in-cycle rules from kube-scheduler's plugins (podfit), and each node's CPU,
// memory and pod capacity less what pods outside the snapshot hold (other schedulers'
// CPU-only pods, DaemonSets, the reservations that hold shared GPUs), so that the engine
// counts a node as kube-scheduler and the kubelet do.
func constrain(ctx context.Context, fit *podfit.Checker, snap *engine.Snapshot, idx *index, nodes []*corev1.Node, pods []*corev1.Pod, conv *convCache) {
	room(snap, idx, nodes, pods, conv)
	defer byResourceName(snap, idx, nodes, conv)
	if fit == nil {
		return
	}
	cy := fit.Begin(ctx, nodes, pods, idx.pods)
	dynamic := false
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		members := idx.jobs[j.ID]
		if j.Queue == "" || len(members) == 0 {
			continue // other schedulers' pods: they hold their GPUs and are never moved
		}
		j.Nodes = jobFilter(cy, members)
		if slices.ContainsFunc(j.Pods, func(p engine.Pod) bool { return p.Request.Shared() && p.Request.SharedDevices() > 1 }) {
			j.Nodes = withoutMPS(j.Nodes, nodes)
		}
		dynamic = dynamic || j.Nodes.Dynamic
	}
	if dynamic {
		snap.Rules = cy
	}
}

// jobFilter is the filter of a job's pods. They usually share one shape (a Job's
// template); a gang of pods made by hand may not, and then the job may use only the nodes
// every one of its shapes allows, since the engine places a job's pods alike.
func jobFilter(cy *podfit.Cycle, members []*corev1.Pod) *engine.NodeFilter {
	out := cy.NodeFilter(members[0])
	seen := map[*engine.NodeFilter]bool{out: true}
	for _, p := range members[1:] {
		f := cy.NodeFilter(p)
		if seen[f] {
			continue
		}
		seen[f] = true
		allowed := map[engine.NodeID]bool{}
		for _, n := range f.Allowed {
			allowed[n] = true
		}
		merged := &engine.NodeFilter{Excluded: out.Excluded, Preference: out.Preference, Dynamic: out.Dynamic || f.Dynamic}
		if merged.Excluded == "" {
			merged.Excluded = f.Excluded
		}
		for _, n := range out.Allowed {
			if allowed[n] {
				merged.Allowed = append(merged.Allowed, n)
			}
		}
		out = merged
	}
	return out
}

// room subtracts from each node what the pods the engine does not see request.
// conv caches each pod's requests between cycles (nil: none).
func room(snap *engine.Snapshot, idx *index, nodes []*corev1.Node, pods []*corev1.Pod, conv *convCache) {
	if conv == nil {
		conv = &convCache{}
	}
	type held struct {
		cpu, mem int64
		pods     int
	}
	byNode := map[string]*held{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || terminal(p) {
			continue
		}
		if idx.uids[p.UID] {
			continue
		}
		h := byNode[p.Spec.NodeName]
		if h == nil {
			h = &held{}
			byNode[p.Spec.NodeName] = h
		}
		req := conv.request(p)
		h.cpu += req.CPU
		h.mem += req.Memory
		h.pods++
	}
	capPods := make(map[string]int, len(nodes))
	for _, n := range nodes {
		if v, ok := n.Status.Allocatable[corev1.ResourcePods]; ok {
			capPods[n.Name] = int(v.Value())
		}
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		h := byNode[string(n.ID)]
		if h == nil {
			h = &held{}
		}
		n.CPU -= h.cpu
		n.Memory -= h.mem
		if c, ok := capPods[string(n.ID)]; ok {
			left := c - h.pods
			n.MaxPods = &left
		}
	}
}

// byResourceName rules out, for each job asking for devices of another vendor, the nodes of
// its kind whose device plugin names their devices otherwise (huawei.com/Ascend310P beside
// a pod's huawei.com/Ascend910): the kubelet there would refuse the pod.
func byResourceName(snap *engine.Snapshot, idx *index, nodes []*corev1.Node, conv *convCache) {
	if conv == nil || len(conv.kinds.Names()) == 0 {
		return
	}
	byName := make(map[engine.NodeID]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[engine.NodeID(n.Name)] = n
	}
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		members := idx.jobs[j.ID]
		if j.Queue == "" || j.Accelerator == "" || len(members) == 0 {
			continue
		}
		var want corev1.ResourceName
		for _, p := range members {
			if _, k := conv.requestKind(p); k.Resource != "" {
				want = k.Resource
				break
			}
		}
		lacking := map[engine.NodeID]bool{}
		for _, n := range snap.Nodes {
			if _, has := byName[n.ID].Status.Allocatable[want]; n.Accelerator == j.Accelerator && !has {
				lacking[n.ID] = true
			}
		}
		if len(lacking) == 0 {
			continue
		}
		f := j.Nodes
		if f == nil {
			f = &engine.NodeFilter{}
			for _, n := range snap.Nodes {
				f.Allowed = append(f.Allowed, n.ID)
			}
		}
		j.Nodes = withoutNodes(f, lacking, "%d node(s) of kind "+j.Accelerator+" have no "+string(want)+" (their device plugin names their devices otherwise)")
	}
}

// withoutMPS rules out, for a slice of several GPUs, the nodes that enforce sharing with
// MPS: their control daemons run one per GPU, and a client reaches one daemon (its
// CUDA_MPS_PIPE_DIRECTORY), so its other devices would not be held to their slice. Nodes
// whose agent reports devices take such a slice: each of its GPUs is held by a reservation,
// and the bind follows every one's reported device (placeOnReservation).
func withoutMPS(f *engine.NodeFilter, nodes []*corev1.Node) *engine.NodeFilter {
	mps := map[engine.NodeID]bool{}
	for _, n := range nodes {
		if n.Labels[v1alpha1.LabelGPUSharing] == v1alpha1.SharingMPS {
			mps[engine.NodeID(n.Name)] = true
		}
	}
	if len(mps) == 0 {
		return f
	}
	return withoutNodes(f, mps, "%d node(s) enforce sharing with MPS, one daemon per GPU, which holds a slice of only one GPU ("+v1alpha1.AnnotationGPUCount+")")
}

// withoutNodes rules out the nodes of rule, saying why (a format of the count ruled out).
func withoutNodes(f *engine.NodeFilter, rule map[engine.NodeID]bool, whyFormat string) *engine.NodeFilter {
	out := *f
	out.Allowed = nil
	ruled := 0
	for _, n := range f.Allowed {
		if rule[n] {
			ruled++
			continue
		}
		out.Allowed = append(out.Allowed, n)
	}
	if ruled == 0 {
		return f
	}
	why := fmt.Sprintf(whyFormat, ruled)
	if out.Excluded != "" {
		why = out.Excluded + "; " + why
	}
	out.Excluded = why
	return &out
}
