package inspect

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/submit"
)

// Node is one node of allot top nodes.
type Node struct {
	Name      string  `json:"name"`
	Pool      string  `json:"pool,omitempty"`
	Model     string  `json:"model"`
	GPUs      []GPU   `json:"gpus"`
	Allocated float64 `json:"allocated"` // GPUs, fractions included
	MemoryMi  int64   `json:"gpuMemoryMi"`
	// Topology is the node's place in the cluster's Topology, widest level first; empty
	// without one.
	Topology []Place `json:"topology,omitempty"`
	// Sharing is how GPU sharing is enforced there (allot.dev/gpu-sharing); empty when the
	// node does not say. SharingWarning says what "none" means for pods sharing there, or
	// that hami-core holds cooperative processes only.
	Sharing        string `json:"sharing,omitempty"`
	SharingWarning string `json:"sharingWarning,omitempty"`
	// Compute is the loosest compute mode its sharing pods may run in (capped, fair or
	// shared; allot.dev/gpu-compute-mode), where the node shares GPUs.
	Compute string `json:"compute,omitempty"`
	// Agent is the version of the node's allot agent; empty without one (devices then known
	// by index only, as the scheduler chose them).
	Agent string `json:"agent,omitempty"`
	// DRA marks a node whose GPUs are published in ResourceSlices and held through
	// ResourceClaims (Dynamic Resource Allocation), not by the device plugin.
	DRA bool `json:"dra,omitempty"`
	// Accelerator is the kind of the node's devices when they are not NVIDIA's GPUs
	// ("ascend", "amd"), as the default kinds of allot scheduler --accelerators read them;
	// GPUs then lists those devices.
	Accelerator string `json:"accelerator,omitempty"`
}

// SharingNotEnforced is what a node sharing GPUs without enforcement tells people.
const SharingNotEnforced = v1alpha1.SharingNotEnforced

// NoSlices is what a node that enforces no sharing, and whose admin has not said slices
// there are on trust, tells people: it takes whole GPUs and MIG instances only.
const NoSlices = "takes no slice of a GPU: nothing here holds one to its share (allot.dev/gpu-sharing none or undeclared) and slices are not taken on trust (allot.dev/gpu-fractions-on-trust; the chart's agent.pools[].fractionsOnTrust)"

// GPU is one device and who holds it.
type GPU struct {
	Index   int      `json:"index"`
	Used    float64  `json:"used"` // 0..1
	Holders []Holder `json:"holders,omitempty"`
	FreeMi  int64    `json:"freeMemoryMi"`
	// Utilization is how busy the device was in the agent's last report, in percent; nil
	// when no agent reports for the node.
	Utilization *int `json:"utilization,omitempty"`
	// UUID is the device's, when the node's agent or GPU Feature Discovery names it.
	UUID string `json:"uuid,omitempty"`
	// Unhealthy says why the device failed, as its agent reported (an XID error, off the
	// bus); empty while it is healthy.
	Unhealthy string `json:"unhealthy,omitempty"`
	// Cordoned says why an admin took the device out of service (allot.dev/gpu-cordon on
	// the node): nothing new goes there, its pods keep running.
	Cordoned string `json:"cordoned,omitempty"`
	// Device is the device's name in its ResourceSlice, on a DRA node.
	Device string `json:"device,omitempty"`
	// MIG is the device's layout where it is in MIG mode: it is given out only as these
	// instances, never whole or in slices; Used and Holders are then its instances'.
	MIG *MIGLayout `json:"mig,omitempty"`
}

// Holder is a pod's part of a GPU.
type Holder struct {
	Pod   string  `json:"pod"`   // namespace/name
	Share float64 `json:"share"` // of a device in MIG mode, its instances' (GPU.MIG names them)
}

// Nodes reads every GPU node and the pods bound to it.
func Nodes(ctx context.Context, client kubernetes.Interface) ([]Node, error) {
	nodes, pods, err := listNodesAndPods(ctx, client)
	if err != nil {
		return nil, err
	}
	return WithDRA(BuildNodes(nodes, pods), nodes, pods, ListDRA(ctx, client)), nil
}

// PlacedNodes is Nodes grouped by the cluster's Topology when it has one.
func PlacedNodes(ctx context.Context, client kubernetes.Interface, allot versioned.Interface) ([]Node, error) {
	nodes, pods, err := listNodesAndPods(ctx, client)
	if err != nil {
		return nil, err
	}
	out := WithDRA(BuildNodes(nodes, pods), nodes, pods, ListDRA(ctx, client))
	lv, ok, err := Topology(ctx, allot)
	if err != nil {
		return nil, err
	}
	if ok {
		PlaceNodes(out, nodes, lv)
	}
	return out, nil
}

func listNodesAndPods(ctx context.Context, client kubernetes.Interface) ([]*corev1.Node, []*corev1.Pod, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	// The agents' load, where this user may read their Leases (else no utilisation shown).
	var leases []*coordinationv1.Lease
	if l, err := client.CoordinationV1().Leases(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelAgentLease}); err == nil {
		leases = ptrs(l.Items)
	}
	return WithLoad(ptrs(nodes.Items), leases), ptrs(pods.Items), nil
}

// WithLoad is nodes with the load their agents report on their Leases (utilisation and
// memory used per device) as the Nodes' own annotations, where the readers of a node look
// for it. A node without an agent keeps what it has (a simulated node's kubelet writes its
// own). A node an agent marked (allot.dev/agent) is read from its Lease alone: what an
// older agent wrote on the Node itself stays there frozen, and is no reading of now, so
// without a report on the Lease the node has none.
func WithLoad(nodes []*corev1.Node, leases []*coordinationv1.Lease) []*corev1.Node {
	byNode := make(map[string]*coordinationv1.Lease, len(leases))
	for _, l := range leases {
		byNode[l.Labels[v1alpha1.LabelAgentLease]] = l
	}
	load := []string{v1alpha1.AnnotationGPUUtilization, v1alpha1.AnnotationGPUMemoryUsed}
	out := make([]*corev1.Node, len(nodes))
	for i, n := range nodes {
		out[i] = n
		var report map[string]string
		if l := byNode[n.Name]; l != nil && l.Annotations[v1alpha1.AnnotationGPUUtilization] != "" {
			report = l.Annotations
		}
		_, marked := n.Annotations[v1alpha1.AnnotationAgent]
		frozen := marked && slices.ContainsFunc(load, func(k string) bool { _, ok := n.Annotations[k]; return ok })
		if report == nil && !frozen {
			continue
		}
		c := n.DeepCopy()
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		for _, k := range load {
			if report[k] != "" {
				c.Annotations[k] = report[k]
			} else {
				delete(c.Annotations, k)
			}
		}
		out[i] = c
	}
	return out
}

// EmptyNodes reads every GPU node without its pods: its devices as if free, for what is a
// question of capacity (could a request ever fit), at the cost of one list of nodes.
func EmptyNodes(ctx context.Context, client kubernetes.Interface) ([]Node, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return WithDRA(BuildNodes(ptrs(nodes.Items), nil), ptrs(nodes.Items), nil, ListDRA(ctx, client)), nil
}

// BuildNodes lays out every GPU node's devices with the pods holding them.
func BuildNodes(nodes []*corev1.Node, pods []*corev1.Pod) []Node {
	// As the scheduler reads a node (no more than 64 devices, none for a negative count,
	// device memory unknown when its label is not a sane number of MiB, failed devices).
	converted := make(map[string]engine.Node, len(nodes))
	for _, n := range nodes {
		if en := kinds.Node(n); len(en.GPUs) > 0 {
			converted[n.Name] = en
		}
	}
	held := map[string]map[int][]Holder{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || !live(p) || v1alpha1.IsReservation(p) {
			continue
		}
		indices, share := v1alpha1.HeldGPUs(p)
		// Where the node's agent recorded the devices the kubelet gave, those are the ones.
		if en, ok := converted[p.Spec.NodeName]; ok {
			if rec, ok := convert.RecordedGPUs(p, &en); ok {
				indices = rec
			}
		}
		for _, g := range indices {
			if held[p.Spec.NodeName] == nil {
				held[p.Spec.NodeName] = map[int][]Holder{}
			}
			held[p.Spec.NodeName][g] = append(held[p.Spec.NodeName][g], Holder{Pod: p.Namespace + "/" + p.Name, Share: share})
		}
	}
	var out []Node
	for _, n := range nodes {
		en, ok := converted[n.Name]
		if !ok {
			continue
		}
		count, memMi := len(en.GPUs), convert.GPUMemoryMiB(n)
		node := Node{Name: n.Name, Pool: n.Labels[v1alpha1.LabelNodePool], Model: n.Labels[v1alpha1.LabelGPUProduct], MemoryMi: memMi,
			Sharing: en.Sharing, Agent: n.Annotations[v1alpha1.AnnotationAgent], Accelerator: en.Accelerator}
		if en.Sharing == v1alpha1.SharingMPS || en.Sharing == v1alpha1.SharingHAMiCore {
			node.Compute = v1alpha1.EffectiveCompute(en.Compute, "")
		}
		if en.Accelerator != "" {
			// Another vendor's devices: their model and size are the kind's labels'.
			node.Model, node.MemoryMi, node.Sharing = en.GPUs[0].Model, en.GPUs[0].Memory>>20, ""
		}
		switch {
		case en.Unenforced != "" && en.Accelerator == "":
			node.SharingWarning = NoSlices
		case en.Sharing == v1alpha1.SharingNone:
			node.SharingWarning = SharingNotEnforced
		case en.Sharing == v1alpha1.SharingHAMiCore:
			node.SharingWarning = v1alpha1.SharingOnTrust
		}
		util := utilization(n.Annotations[v1alpha1.AnnotationGPUUtilization], count)
		layouts := migLayouts(n, &en, pods)
		for g := 0; g < count; g++ {
			if l := layouts[g]; l != nil {
				// A device in MIG mode is held instance by instance.
				h, used := migHolders(l)
				node.Allocated += used
				gpu := GPU{Index: g, Used: used, Holders: h, FreeMi: migFreeMi(l, l.MemoryMi), Utilization: util[g],
					Unhealthy: en.GPUs[g].Unhealthy, Cordoned: en.GPUs[g].Cordoned, UUID: en.GPUs[g].UUID, MIG: l}
				node.GPUs = append(node.GPUs, gpu)
				continue
			}
			h := held[n.Name][g]
			sort.Slice(h, func(a, b int) bool { return h[a].Pod < h[b].Pod })
			used := 0.0
			for _, x := range h {
				used += x.Share
			}
			used = min(used, 1)
			node.Allocated += used
			gpu := GPU{Index: g, Used: used, Holders: h, FreeMi: int64(float64(memMi) * (1 - used)), Utilization: util[g], Unhealthy: en.GPUs[g].Unhealthy,
				Cordoned: en.GPUs[g].Cordoned}
			if u := en.GPUs[g].UUID; u != strconv.Itoa(g) {
				gpu.UUID = u
			}
			node.GPUs = append(node.GPUs, gpu)
		}
		out = append(out, node)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// kinds are the kinds of accelerator the CLI and the dashboard read nodes by: the
// scheduler's defaults (its --accelerators is not known here).
var kinds = convert.DefaultTable()

// GPUs reads the GPUs in a resource list (a Queue's status) for display: 0 when absent,
// and 0 for a value that is not a finite, non-negative number (a status written by hand as
// "1e66666" would otherwise be +Inf, which JSON cannot carry).
func GPUs(l corev1.ResourceList) float64 {
	return Devices(l, corev1.ResourceName(v1alpha1.GPUResource))
}

// Devices reads the devices of a resource in a resource list as GPUs reads NVIDIA's:
// another kind's in a Queue's status, keyed by the kind's first resource.
func Devices(l corev1.ResourceList, name corev1.ResourceName) float64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	v := q.AsApproximateFloat64()
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	return v
}

// utilization parses the agent's per-device report; a report that does not name every
// device as a percentage is not trusted at all (nil for each).
func utilization(report string, gpus int) []*int {
	out := make([]*int, gpus)
	vals, ok := convert.ParseUtilization(report)
	if !ok || len(vals) != gpus {
		return out
	}
	for i, v := range vals {
		if v != convert.UtilizationUnread {
			out[i] = &v
		}
	}
	return out
}

// Queues reads the Queue objects with their status.
func Queues(ctx context.Context, allot versioned.Interface) ([]v1alpha1.Queue, error) {
	l, err := allot.AllotV1alpha1().Queues().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := l.Items
	if out == nil {
		out = []v1alpha1.Queue{}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// QueueNames lists the queues' names, for errors that list the choices.
func QueueNames(ctx context.Context, allot versioned.Interface) []string {
	qs, _ := Queues(ctx, allot)
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	return names
}

// Fits tells whether the cluster's nodes could ever hold a request, with what stands in the
// way when not: no node of the pool or model, more GPUs or GPU memory than any node has, or
// a gang larger than the nodes together.
func Fits(nodes []Node, r submit.Request) error {
	var cands []Node
	pools := map[string]bool{}
	for _, n := range nodes {
		if n.Pool != "" {
			pools[n.Pool] = true
		}
		if n.Pool != r.Pool || len(n.GPUs) == 0 || n.Accelerator != r.Accelerator || !modelAllowed(n, r.Models) {
			continue
		}
		cands = append(cands, n)
	}
	where := "the cluster's nodes"
	if r.Pool != "" {
		where = "the nodes of pool " + r.Pool
	}
	if len(cands) == 0 {
		switch {
		case r.Pool != "" && !pools[r.Pool]:
			return fmt.Errorf("--node-pool %s: no node is in that pool; pools: %s", r.Pool, orNone(keys(pools)))
		case r.Pool == "" && len(pools) > 0:
			return fmt.Errorf("no GPU node is outside the node pools: set --node-pool, one of %s", strings.Join(keys(pools), ", "))
		case len(r.Models) > 0:
			return fmt.Errorf("--gpu-type %s: %s have no %s of that model", strings.Join(r.Models, ","), where, device(r))
		}
		return fmt.Errorf("%s have no %ss", where, device(r))
	}
	if r.MIG != "" && r.MIGSingle {
		return fitsSingleMIG(cands, r, where)
	}
	if r.MIG != "" {
		return fitsMIG(cands, r, where)
	}
	most, mostOn := 0, ""
	var memMi int64
	holds := int64(0) // pods of the request the nodes hold at once
	inMIG := 0        // GPUs in MIG mode, which give out only instances
	asked := ""       // how a node's instances are asked where not by --mig (the single strategy)
	for _, n := range cands {
		gpus := 0
		for _, g := range n.GPUs {
			if g.MIG == nil {
				gpus++
			} else {
				inMIG++
				if g.MIG.AskedBy != "" && asked == "" {
					asked = fmt.Sprintf("; %s's instances are %s", n.Name, g.MIG.AskedBy)
				}
			}
		}
		if gpus > most {
			most, mostOn = gpus, n.Name
		}
		if gpus > 0 {
			memMi = max(memMi, n.MemoryMi)
		}
		if r.GPUs > 0 {
			holds += int64(gpus) / r.GPUs
		} else {
			holds += int64(len(n.GPUs)) * 1000 // shares of a GPU: many per device
		}
	}
	switch {
	case most == 0 && inMIG > 0 && (r.GPUs > 0 || r.MemoryMi > 0 || r.Fraction > 0):
		return fmt.Errorf("every GPU of %s is in MIG mode, given out only as instances: ask one with --mig PROFILE (a fixed layout's) or --mig-dynamic PROFILE (one Allot lays out)%s; allot top nodes shows the layouts", where, asked)
	case r.GPUs > int64(most):
		return fmt.Errorf("-g %d: no node can hold it: the most %ss on one node of %s is %d (%s)", r.GPUs, device(r), where, most, mostOn)
	case r.MemoryMi > 0 && memMi > 0 && r.MemoryMi > memMi:
		return fmt.Errorf("--gpu-memory %d Mi: more than one GPU of %s has (%d Mi at most)", r.MemoryMi, where, memMi)
	case int64(r.Pods) > holds:
		return fmt.Errorf("a gang of %d pods of %d %ss each starts whole or not at all, and %s hold %d such pods at most", r.Pods, r.GPUs, device(r), where, holds)
	}
	return nil
}

// device is what one device of the request is called: "GPU", "ascend device".
func device(r submit.Request) string {
	if r.Accelerator != "" {
		return r.Accelerator + " device"
	}
	return "GPU"
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// QueuePool is a queue's share of one node pool divided apart: its quota and limit there
// (spec.gpu.pools) and what its status says of the pool's GPUs.
type QueuePool struct {
	Name                 string
	Quota                int32
	Limit                *int32
	FairShare, Allocated float64
	Requested            float64
}

// QueuePools lists the pools the queue gives a quota of its own or its status counts, by
// name.
func QueuePools(q v1alpha1.Queue) []QueuePool {
	names := map[string]bool{}
	for p := range q.Spec.GPU.Pools {
		names[p] = true
	}
	for _, l := range []corev1.ResourceList{q.Status.FairShare, q.Status.Allocated, q.Status.Requested} {
		for r := range l {
			if p, ok := strings.CutPrefix(string(r), v1alpha1.PoolStatusPrefix); ok {
				names[p] = true
			}
		}
	}
	out := make([]QueuePool, 0, len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		r := corev1.ResourceName(v1alpha1.PoolStatusPrefix + name)
		spec := q.Spec.GPU.Pools[name]
		out = append(out, QueuePool{Name: name, Quota: spec.Quota, Limit: spec.Limit,
			FairShare: Devices(q.Status.FairShare, r), Allocated: Devices(q.Status.Allocated, r), Requested: Devices(q.Status.Requested, r)})
	}
	return out
}
