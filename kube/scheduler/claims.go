package scheduler

// The claims stage: pods that ask for devices through DRA ResourceClaims, turned into the
// engine's GPUs. A node whose ResourceSlices publish GPUs has those as its GPUs; a claim
// of a GPU class counts its devices against the pod's queue (a claim shared by several
// pods once); a claim's allocation is where its pod's GPUs are; an allocated claim nobody
// in the snapshot holds (another scheduler's pod, or a pod gone whose claim the resource
// claim controller has not freed yet) holds its devices as work of no queue, so nothing is
// placed on them before they are really free.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/dra"
)

// draCycle is what one cycle knows of DRA. nil where the API server serves no
// resource.k8s.io/v1.
type draCycle struct {
	inv      *dra.Inventory
	classes  dra.Classes
	features structured.Features
	claims   map[string]*resourceapi.ResourceClaim // by namespace/name
	nodes    map[string]*corev1.Node
	// pinned are pods whose claim is already allocated (shared with a running pod, or
	// allocated for them by a bind that did not land): only that node can run them.
	pinned map[types.UID]string
	// stale are claims allocated for pods that can no longer run there, to free.
	stale []staleClaim
	// fits caches whether a pod's claims could ever be allocated on each node (dra.Fits),
	// between cycles while the slices do not change.
	fits *fitCache
}

func (d *draCycle) lookup(ns, name string) *resourceapi.ResourceClaim { return d.claims[ns+"/"+name] }

func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// addClaims brings DRA into a snapshot buildSnapshot made from the rest.
func (d *draCycle) addClaims(now time.Time, snap *engine.Snapshot, idx *index, pods []*corev1.Pod) {
	if d == nil {
		// Bound, such a pod would never start: nothing can allocate its claims.
		for ji := range snap.Jobs {
			job := &snap.Jobs[ji]
			for _, pod := range job.Pods {
				if p := idx.pods[pod.ID]; p != nil && len(p.Spec.ResourceClaims) > 0 && job.Queue != "" && job.Invalid == "" {
					job.Invalid = fmt.Sprintf("pod %s: spec.resourceClaims: the API server serves no resource.k8s.io/v1 (DRA, Kubernetes 1.34 and later), so its claims cannot be allocated", pod.ID)
				}
			}
		}
		return
	}
	d.pinned = map[types.UID]string{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		devs := d.inv.NodeGPUs(string(n.ID))
		if len(devs) == 0 {
			continue
		}
		// Its GPUs are those its slices publish; a device plugin's count beside them would
		// be the same GPUs twice.
		var partsOnly []engine.Job
		n.GPUs, partsOnly = d.inv.EngineGPUs(string(n.ID), n.Labels[LabelProduct])
		snap.Jobs = append(snap.Jobs, partsOnly...)
		// A fraction of Allot's (a reservation holding an nvidia.com/gpu) cannot be had
		// here: filterClaims keeps such pods off. A MIG claim is a fraction the engine
		// places here, so the node takes fractions.
		n.NoFractions = ""
	}
	accounted := map[string]bool{}         // claims some pod of the snapshot holds or waits on
	counted := map[string]bool{}           // claims whose GPUs a pod counts
	countedBy := map[string]engine.JobID{} // and the job of that pod
	claimsOf := func(job *engine.Job, pod *engine.Pod, p *corev1.Pod) ([]*resourceapi.ResourceClaim, bool) {
		claims, problem := dra.PodClaims(p, d.lookup)
		if problem == "" && job.Queue != "" {
			problem = v1alpha1.ResourceClaimsProblem(p)
		}
		if problem != "" {
			if job.Queue != "" && job.Invalid == "" {
				job.Invalid = fmt.Sprintf("pod %s: %s", pod.ID, problem)
			}
			return nil, false
		}
		return claims, true
	}
	count := func(job *engine.Job, pod *engine.Pod, c *resourceapi.ResourceClaim) {
		if counted[claimKey(c)] {
			return
		}
		n, problem := d.inv.Count(c)
		if problem != "" && job.Queue != "" && job.Invalid == "" {
			job.Invalid = fmt.Sprintf("pod %s: %s", pod.ID, problem)
		}
		counted[claimKey(c)], countedBy[claimKey(c)] = true, job.ID
		pod.Request.GPUs += n.GPUs
		pod.Request.GPUFraction += engine.MilliGPU(n.Share)
		pod.Request.GPUMemory += n.Memory
		if pod.Binding != nil {
			gpus, share := d.held(c, string(pod.Binding.Node))
			pod.Binding.GPUs = append(pod.Binding.GPUs, gpus...)
			pod.Binding.Share += engine.MilliGPU(share)
		}
	}
	// Bound pods first: a claim shared by a running pod and a waiting one is counted where
	// it is held.
	for _, bound := range []bool{true, false} {
		for ji := range snap.Jobs {
			job := &snap.Jobs[ji]
			for k := range job.Pods {
				pod := &job.Pods[k]
				p := idx.pods[pod.ID]
				if p == nil || len(p.Spec.ResourceClaims) == 0 || (pod.Binding != nil) != bound {
					continue
				}
				claims, ok := claimsOf(job, pod, p)
				if bound && (!ok || len(d.inv.NodeGPUs(string(pod.Binding.Node))) == 0) {
					// Its GPUs are not its claims': a pod on a node of the device plugin
					// (another scheduler's, with a claim of a NIC, say), or one whose
					// claims cannot be read any more (deleted under it): the books keep
					// the devices recorded on it rather than let them go.
					for _, c := range claims {
						accounted[claimKey(c)] = true
					}
					if !ok {
						pod.Binding.GPUs = heldIndices(p, idx.nodes[pod.Binding.Node])
						pod.Request.GPUs = max(pod.Request.GPUs, len(pod.Binding.GPUs))
					}
					continue
				}
				if bound {
					pod.Binding.GPUs = nil // the claims say where its GPUs are, not an annotation
				}
				for _, c := range claims {
					accounted[claimKey(c)] = true
					if !bound && c.Status.Allocation != nil {
						if !counted[claimKey(c)] {
							// Allocated already (by a bind that did not land, or for a pod
							// gone): its devices are held for it until it runs there, or
							// freed when that node cannot run it (freeStale).
							d.holdForPending(snap, c, p)
							counted[claimKey(c)] = true
						} else if node := dra.AllocatedNode(c); node != "" {
							d.pinned[p.UID] = node // shared with a running pod: beside it
						}
						continue
					}
					if !bound && c.Status.Allocation == nil && counted[claimKey(c)] && countedBy[claimKey(c)] != job.ID && job.Invalid == "" {
						// Shared with a pod of another job that has not started: allocated
						// with that one first, where it lands.
						job.Invalid = fmt.Sprintf("pod %s: ResourceClaim %s, which it shares, is allocated with the pod of job %s first", pod.ID, c.Name, countedBy[claimKey(c)])
					}
					count(job, pod, c)
				}
				if bound {
					// The books follow what its claims hold: whole GPUs, or a part of one.
					pod.Request.GPUs, pod.Request.GPUFraction = len(pod.Binding.GPUs), 0
					if pod.Binding.Share > 0 {
						pod.Request.GPUs, pod.Request.GPUFraction = 0, pod.Binding.Share
						if len(pod.Binding.GPUs) != 1 {
							pod.Binding.GPUs = pod.Binding.GPUs[:min(len(pod.Binding.GPUs), 1)]
						}
					}
				}
			}
		}
	}
	// A pod of Allot's in its grace period still holds its claims' devices: they are free
	// to the engine, and a bind onto them waits until the pod is gone (index.leaving).
	for _, p := range pods {
		if p.DeletionTimestamp == nil || p.Spec.NodeName == "" || len(p.Spec.ResourceClaims) == 0 || idx.uids[p.UID] ||
			!now.Before(p.DeletionTimestamp.Add(stuckAfter)) || p.Spec.SchedulerName != SchedulerName {
			continue
		}
		claims, _ := dra.PodClaims(p, d.lookup)
		for _, c := range claims {
			accounted[claimKey(c)] = true
			gpus, _ := d.held(c, p.Spec.NodeName)
			for _, g := range gpus {
				idx.release(engine.NodeID(p.Spec.NodeName), g, p.Namespace+"/"+p.Name)
			}
		}
	}
	// What is left is held by no pod the engine knows. A claim whose pods have all ended
	// or gone is being freed by the resource claim controller: its devices are free to
	// the engine, as a terminating pod's are, and a bind onto them waits until it is
	// (without that, the moment between a reclaimed pod's end and its claim's release
	// looked like a GPU taken by someone else, and a second pod was reclaimed for it).
	var alive map[types.UID]bool
	keys := make([]string, 0, len(d.claims))
	for k := range d.claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := d.claims[k]
		if accounted[k] || c.Status.Allocation == nil {
			continue
		}
		if alive == nil {
			alive = liveUIDs(pods) // only where a claim is left over: most cycles have none
		}
		if freed(c, alive) {
			for _, h := range d.inv.Holds(c) {
				idx.release(engine.NodeID(h.Node), h.Index, "ResourceClaim "+k+" (its pods gone)")
			}
			continue
		}
		var nodes []string
		for _, h := range d.inv.Holds(c) {
			if !slices.Contains(nodes, h.Node) {
				nodes = append(nodes, h.Node)
			}
		}
		for _, node := range nodes {
			if job, ok := d.holder(c, node); ok {
				snap.Jobs = append(snap.Jobs, job)
			}
		}
	}
}

// holder is work of no queue holding what an allocated claim holds on node.
func (d *draCycle) holder(c *resourceapi.ResourceClaim, node string) (engine.Job, bool) {
	gpus, share := d.held(c, node)
	if len(gpus) == 0 {
		return engine.Job{}, false
	}
	pod := engine.Pod{ID: engine.PodID("claim:" + claimKey(c)), Request: engine.PodRequest{GPUs: len(gpus)},
		Binding: &engine.Binding{Node: engine.NodeID(node), GPUs: gpus}}
	if share > 0 && len(gpus) == 1 {
		pod.Request = engine.PodRequest{GPUFraction: engine.MilliGPU(min(share, 999))}
		pod.Binding.Share = pod.Request.GPUFraction
	}
	return engine.Job{ID: engine.JobID("external/claim/" + claimKey(c) + "/" + node), MinMember: 1, Pods: []engine.Pod{pod}}, true
}

// holdForPending keeps the devices of a claim allocated for a pod that is not bound yet: as
// work of no queue on the claim's node, the pod pinned there; when that node is gone or
// cordoned, the claim is to be freed so that the pod can go elsewhere (staleClaims).
func (d *draCycle) holdForPending(snap *engine.Snapshot, c *resourceapi.ResourceClaim, p *corev1.Pod) {
	node := dra.AllocatedNode(c)
	n := d.nodes[node]
	if node == "" || n == nil || n.Spec.Unschedulable {
		if resourceclaim.IsReservedForPod(p, c) {
			d.stale = append(d.stale, staleClaim{c, p.UID})
		}
		return
	}
	d.pinned[p.UID] = node
	if job, ok := d.holder(c, node); ok {
		snap.Jobs = append(snap.Jobs, job)
	}
}

// staleClaim is a claim allocated and reserved for a pod that can no longer run where it
// is allocated.
type staleClaim struct {
	claim *resourceapi.ResourceClaim
	pod   types.UID
}

// liveUIDs are the pods that have not ended.
func liveUIDs(pods []*corev1.Pod) map[types.UID]bool {
	out := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		if !terminal(p) {
			out[p.UID] = true
		}
	}
	return out
}

// freed tells whether every pod a claim is reserved for has ended or gone, so that the
// resource claim controller is freeing it. A claim reserved for no one is not: it may be
// allocated by something else than a scheduler of pods.
func freed(c *resourceapi.ResourceClaim, alive map[types.UID]bool) bool {
	if len(c.Status.ReservedFor) == 0 {
		return false
	}
	for _, r := range c.Status.ReservedFor {
		if r.Resource != "pods" || alive[r.UID] {
			return false
		}
	}
	return true
}

// held is where an allocated claim's devices are on node: the indices of its whole GPUs,
// or the one GPU it holds a part of (a MIG device, or memory of a shared GPU) with the
// part's share.
func (d *draCycle) held(c *resourceapi.ResourceClaim, node string) (gpus []int, share int) {
	for _, h := range d.inv.Holds(c) {
		if h.Node != node {
			continue
		}
		if !slices.Contains(gpus, h.Index) {
			gpus = append(gpus, h.Index)
		}
		share += h.Share
	}
	return gpus, share
}

// filterClaims narrows each job's nodes to where its pods' claims can be allocated, and
// keeps pods that ask for whole GPUs through the device plugin off nodes whose GPUs come
// from DRA (their kubelet has no nvidia.com/gpu to give). After constrain.
func (d *draCycle) filterClaims(ctx context.Context, snap *engine.Snapshot, idx *index) {
	if d == nil {
		return
	}
	draNodes := map[engine.NodeID]bool{}
	for _, n := range d.inv.Nodes() {
		draNodes[engine.NodeID(n)] = true
	}
	for ji := range snap.Jobs {
		job := &snap.Jobs[ji]
		if job.Queue == "" || job.Invalid != "" {
			continue
		}
		var claimed []*corev1.Pod
		plugin := false
		for _, pod := range job.Pods {
			p := idx.pods[pod.ID]
			switch {
			case p == nil || pod.Binding != nil:
			case len(p.Spec.ResourceClaims) > 0:
				claimed = append(claimed, p)
			case pod.Request.GPUs > 0 || pod.Request.Shared():
				plugin = true // nvidia.com/gpu, or a fraction held by an nvidia.com/gpu reservation
			}
		}
		if len(claimed) == 0 && (!plugin || len(draNodes) == 0) {
			continue
		}
		allowed := map[engine.NodeID]bool{}
		if job.Nodes != nil {
			for _, n := range job.Nodes.Allowed {
				allowed[n] = true
			}
		} else {
			for _, n := range snap.Nodes {
				allowed[n.ID] = true
			}
		}
		var why []string
		fits := make([]func(string) bool, len(claimed))
		for k, p := range claimed {
			fits[k] = d.fitsFor(ctx, p)
		}
		drop := func(n engine.NodeID) bool {
			if plugin && draNodes[n] {
				return true
			}
			for k, p := range claimed {
				if pin, ok := d.pinned[p.UID]; ok && string(n) != pin {
					return true
				}
				if !fits[k](string(n)) {
					return true
				}
			}
			return false
		}
		kept := make([]engine.NodeID, 0, len(allowed))
		dropped := 0
		for _, n := range snap.Nodes {
			if !allowed[n.ID] {
				continue
			}
			if drop(n.ID) {
				dropped++
				continue
			}
			kept = append(kept, n.ID)
		}
		if dropped == 0 {
			continue
		}
		if plugin {
			why = append(why, fmt.Sprintf("node(s) with their GPUs through DRA (ResourceSlices) have no %s to give: ask for them with a ResourceClaim there", GPUResource))
		}
		for _, p := range claimed {
			if pin, ok := d.pinned[p.UID]; ok {
				why = append(why, fmt.Sprintf("pod %s/%s uses a ResourceClaim allocated on %s", p.Namespace, p.Name, pin))
			} else if w := d.whyNot(p); w != "" {
				why = append(why, w)
			}
		}
		f := &engine.NodeFilter{Allowed: kept}
		if job.Nodes != nil {
			f.Preference, f.Dynamic, f.Excluded = job.Nodes.Preference, job.Nodes.Dynamic, job.Nodes.Excluded
		}
		msg := fmt.Sprintf("%d node(s) cannot allocate its claims", dropped)
		if len(why) > 0 {
			msg = fmt.Sprintf("%d node(s) cannot allocate its claims (%s)", dropped, strings.Join(dedupe(why), "; "))
		}
		if f.Excluded != "" {
			f.Excluded += ", " + msg
		} else {
			f.Excluded = msg
		}
		job.Nodes = f
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// fitsFor tells, per node, whether a pod's claims could ever be allocated there.
func (d *draCycle) fitsFor(ctx context.Context, p *corev1.Pod) func(node string) bool {
	claims, problem := dra.PodClaims(p, d.lookup)
	if problem != "" {
		return func(string) bool { return false }
	}
	known := d.fits.of(specKey(claims))
	return func(node string) bool {
		if _, gaveUp := known[gaveUpKey]; gaveUp {
			return false
		}
		if ok, cached := known[node]; cached {
			return ok
		}
		n := d.nodes[node]
		if n == nil {
			return false
		}
		ok, err := d.inv.Fits(ctx, d.features, d.classes, n, claims)
		if errors.Is(err, dra.ErrGaveUp) {
			// Claims that take the allocator past its deadline on one node would on the
			// others too: tried once, not once per node (a second each, every cycle).
			known[gaveUpKey] = false
			slog.Warn("allot scheduler: a pod's ResourceClaims ask more than the DRA allocator can try", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
		known[node] = ok && err == nil
		return known[node]
	}
}

// gaveUpKey marks, among a spec's answers by node, claims the allocator gave up on (no
// node is named "").
const gaveUpKey = ""

// whyNot says, for a person, what a pod's claims ask that no node has: per GPU request,
// its count, class and selectors, and the most matching devices one node has.
func (d *draCycle) whyNot(p *corev1.Pod) string {
	claims, problem := dra.PodClaims(p, d.lookup)
	if problem != "" {
		return problem
	}
	if _, gaveUp := d.fits.of(specKey(claims))[gaveUpKey]; gaveUp {
		return dra.ErrGaveUp.Error()
	}
	var out []string
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly == nil {
				continue
			}
			class := d.classes[r.Exactly.DeviceClassName]
			if class == nil {
				out = append(out, fmt.Sprintf("claim %s: device class %s does not exist", c.Name, r.Exactly.DeviceClassName))
				continue
			}
			have, err := d.inv.Matching(class.Name, class.Spec.Selectors, r.Exactly.Selectors)
			if err != nil {
				out = append(out, fmt.Sprintf("claim %s: %v", c.Name, err))
				continue
			}
			most, where := 0, ""
			for n, k := range have {
				if k > most || (k == most && n < where) {
					most, where = k, n
				}
			}
			want := fmt.Sprintf("claim %s asks %d %s device(s)", c.Name, max(r.Exactly.Count, 1), class.Name)
			var sel []string
			for _, s := range r.Exactly.Selectors {
				if s.CEL != nil {
					sel = append(sel, s.CEL.Expression)
				}
			}
			if len(sel) > 0 {
				want += " where " + strings.Join(sel, " && ")
			}
			if most == 0 {
				out = append(out, want+"; no node has one")
			} else {
				out = append(out, fmt.Sprintf("%s; the most on one node is %d (%s)", want, most, where))
			}
		}
	}
	return strings.Join(out, "; ")
}

// fitCache remembers dra.Fits answers by claims' spec and node; reset whenever the slices
// or classes change. It keeps the specs asked in this cycle and the one before, no more:
// its size follows the claims that wait, and a tenant who makes many claims of distinct
// specs costs their own allocator runs once, never the others' answers (a cache dropped
// whole at a size would be dropped each cycle, and every pod's fits run again).
type fitCache struct {
	version uint64
	m       map[string]map[string]bool // this cycle's specs
	last    map[string]map[string]bool // the cycle before's, kept where asked again
}

// newCycle starts a cycle: the specs not asked in the last one go.
func (c *fitCache) newCycle() {
	c.last, c.m = c.m, map[string]map[string]bool{}
}

// of is the answers, by node, for claims of one spec.
func (c *fitCache) of(spec string) map[string]bool {
	if c.m == nil {
		c.m = map[string]map[string]bool{}
	}
	if c.m[spec] == nil {
		c.m[spec] = c.last[spec]
		if c.m[spec] == nil {
			c.m[spec] = map[string]bool{}
		}
	}
	return c.m[spec]
}

// specKey is what a fit depends on beside the node: what the claims not yet allocated ask
// (their specs, which the API server keeps fixed), so that the pods of one template share
// one answer per node. 200 pods waiting on 250 nodes cost a second of allocator runs
// keyed by claim, 70 ms keyed by spec.
func specKey(claims []*resourceapi.ResourceClaim) string {
	var b strings.Builder
	for _, c := range claims {
		if c.Status.Allocation != nil {
			continue // left out of the fit
		}
		spec, _ := json.Marshal(c.Spec)
		b.WriteByte('|')
		b.Write(spec)
	}
	return b.String()
}
