// Package convert turns the Kubernetes objects Allot schedules (Nodes, pods, Queues) into
// the engine's inputs. It trusts an object no further than the values that make sense: a
// node no further than its nvidia.com/gpu capacity, a count never negative, a label that
// is not a number as unknown; NodeProblems names what was not trusted, for a person. It is
// kept apart from the scheduler (which links kube-scheduler) so that its fuzz targets build
// in seconds.
package convert

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// GPUResource is the extended resource whole GPUs are requested and counted by.
const GPUResource = corev1.ResourceName(v1alpha1.GPUResource)

func Node(n *corev1.Node) engine.Node {
	goes := Interrupted(n)
	out := engine.Node{ID: engine.NodeID(n.Name), Labels: n.Labels, Pool: nodePool(n), Domain: n.Labels[v1alpha1.LabelDomain],
		CPU: n.Status.Allocatable.Cpu().MilliValue(), Memory: n.Status.Allocatable.Memory().Value(),
		Unschedulable: n.Spec.Unschedulable || !ready(n) || goes != "", Spot: Spot(n), Interruption: goes}
	// A label outside the allowed values declares nothing (NodeProblems says so).
	out.Sharing, _ = v1alpha1.ParseSharing(n.Labels[v1alpha1.LabelGPUSharing])
	out.Compute, _ = v1alpha1.ParseComputeMode("label "+v1alpha1.LabelComputeMode, n.Labels[v1alpha1.LabelComputeMode])
	out.NoFractions = NoFractions(n)
	out.Unenforced = v1alpha1.Unenforced(n.Labels)
	out.MaxSharers, _ = maxSharers(n)
	// A node is trusted no further than its capacity: a negative quantity an admin wrote
	// counts as none, and a GPU memory label past 2^40 MiB (or not a number) as unknown.
	out.CPU, out.Memory = max(out.CPU, 0), max(out.Memory, 0)
	count, memMi := GPUCount(n), GPUMemoryMiB(n)
	uuids := strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
	// The kubelet's allocatable leaves out the devices the plugin took out, so its count
	// alone would drop the last index, whichever failed. Where the agent lists the node's
	// devices (no more than its capacity), each keeps its index and the failed one is
	// marked by the agent's health list.
	if capacity := n.Status.Capacity[GPUResource]; n.Annotations[v1alpha1.AnnotationGPUUUIDs] != "" &&
		len(uuids) > count && int64(len(uuids)) <= capacity.Value() {
		count = len(uuids)
	}
	// The agent's inventory, read through NVML, says how the devices are linked; without
	// it, two halves is the guess (two sockets, or two NVLink halves of a PCIe board).
	all, _ := v1alpha1.ParseInventory(n.Annotations[v1alpha1.AnnotationGPUInventory])
	if n.Labels[v1alpha1.LabelMIGDynamic] == "true" {
		// Asked to lay out its MIG GPUs: not where another component acts on them.
		out.MIGNotLaidOut = migLayoutConflict(n, all)
	}
	// Devices in MIG mode are listed after the whole ones (migGPUs); the whole ones are
	// numbered among themselves, as the device plugin's nvidia.com/gpu counts them.
	inv, anyMIG := wholeInventory(all)
	if anyMIG {
		uuids = uuids[:0]
		for _, g := range inv {
			uuids = append(uuids, g.UUID)
		}
		count = min(count, len(inv))
	}
	if singleMIG(n).ok || singleMIGProblem(n) != "" {
		// The device plugin's single MIG strategy: its nvidia.com/gpu are MIG instances,
		// listed as such (migGPUs), none a whole GPU.
		count = 0
	}
	islands := v1alpha1.Islands(inv, count)
	unhealthy := map[int]string{}
	if bad, err := v1alpha1.ParseUnhealthy(n.Annotations[v1alpha1.AnnotationGPUUnhealthy]); err == nil {
		for _, u := range bad {
			unhealthy[u.Index] = u.Reason
		}
	}
	cordoned, _ := Cordoned(n, count, uuids)
	for g := 0; g < count; g++ {
		// Without the UUIDs (no agent on the node yet), the device index: NVIDIA's
		// container runtime takes either in NVIDIA_VISIBLE_DEVICES.
		uuid := strconv.Itoa(g)
		if g < len(uuids) && strings.TrimSpace(uuids[g]) != "" {
			uuid = strings.TrimSpace(uuids[g])
		}
		island := g * 2 / count
		if islands != nil {
			island = islands[g]
		}
		why, bad := unhealthy[g]
		if bad && why == "" {
			why = "reported unhealthy"
		}
		var cordon string
		if cordoned[g] {
			cordon = CordonReason
		}
		out.GPUs = append(out.GPUs, engine.GPU{Model: n.Labels[v1alpha1.LabelGPUProduct], Memory: bookable(inv, g, uuid, memMi) << 20,
			UUID: uuid, Island: island, Unhealthy: why, Cordoned: cordon})
	}
	if out.NoFractions == "" && slices.ContainsFunc(out.GPUs, func(g engine.GPU) bool { return g.Memory <= 0 }) {
		out.NoFractions = noGPUMemory
	}
	out.GPUs = append(out.GPUs, migGPUs(n, all, out.MIGNotLaidOut)...)
	return out
}

// bookable is the memory, in MiB, of device g that slices may be booked of: where the
// agent's inventory lists the device (by index and UUID), its own size less what the
// driver reserves, which no process can have (three slices of an H200's whole 143771 MiB
// could not all be held; docs/gpu-nodes.md); else GPU Feature Discovery's label, one size
// for every device of the node.
func bookable(inv []v1alpha1.GPUInfo, g int, uuid string, label int64) int64 {
	if g < len(inv) && inv[g].Index == g && inv[g].UUID == uuid && inv[g].MemoryMiB > 0 && inv[g].MemoryMiB <= 1<<40 {
		return inv[g].MemoryMiB - min(max(inv[g].ReservedMiB, 0), inv[g].MemoryMiB)
	}
	return label
}

// CordonReason is why a device an admin listed in allot.dev/gpu-cordon takes nothing new.
var CordonReason = "cordoned by an admin (" + v1alpha1.AnnotationGPUCordon + ")"

// Cordoned reads a node's allot.dev/gpu-cordon: the indices of its count devices an admin
// took out of service ("all", or indices and UUIDs, comma-separated; uuids are the
// agent's, by index), and the entries that name none of them.
func Cordoned(n *corev1.Node, count int, uuids []string) (map[int]bool, []string) {
	v, ok := n.Annotations[v1alpha1.AnnotationGPUCordon]
	if !ok {
		return nil, nil
	}
	out := map[int]bool{}
	var unknown []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		switch i, err := strconv.Atoi(f); {
		case f == "":
		case f == "all":
			for g := 0; g < count; g++ {
				out[g] = true
			}
		case err == nil && i >= 0 && i < count:
			out[i] = true
		default:
			if u := slices.IndexFunc(uuids, func(u string) bool { return strings.TrimSpace(u) == f }); u >= 0 && u < count {
				out[u] = true
			} else {
				unknown = append(unknown, f)
			}
		}
	}
	return out, unknown
}

// maxSharers reads a node's allot.dev/gpu-max-sharers: 0 (no cap) when absent; ok is false
// when it is not a whole number from 1 to 1000 (then no cap either).
func maxSharers(n *corev1.Node) (int, bool) {
	v, set := n.Annotations[v1alpha1.AnnotationGPUMaxSharers]
	if !set {
		return 0, true
	}
	m, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || m < 1 || m > int(engine.OneGPU) {
		return 0, false
	}
	return m, true
}

// RecordedGPUs reads the devices the kubelet gave a pod (the agent's allot.dev/gpu-devices
// record, by UUID) as indices of node; ok is false without a record, or when it names a
// device the node does not list (then the scheduler's own annotation stands).
func RecordedGPUs(p *corev1.Pod, node *engine.Node) (indices []int, ok bool) {
	rec := p.Annotations[v1alpha1.AnnotationGPUDevices]
	if rec == "" || node == nil {
		return nil, false
	}
	for _, u := range strings.Split(rec, ",") {
		i := slices.IndexFunc(node.GPUs, func(g engine.GPU) bool { return g.UUID == strings.TrimSpace(u) })
		if i < 0 {
			return nil, false
		}
		indices = append(indices, i)
	}
	return indices, true
}

// GPUCount is a node's devices as Allot trusts them: its nvidia.com/gpu allocatable, none
// when negative, at most 64.
func GPUCount(n *corev1.Node) int {
	q := n.Status.Allocatable[GPUResource]
	return int(min(max(q.Value(), 0), 64))
}

// GPUMemoryMiB is the device memory GPU Feature Discovery labels the node with; 0 (unknown)
// when the label is not a number of MiB up to 2^40.
func GPUMemoryMiB(n *corev1.Node) int64 {
	m, _ := gpuMemoryMiB(n)
	return m
}

// gpuMemoryMiB also says whether a label that is there was readable.
func gpuMemoryMiB(n *corev1.Node) (int64, bool) {
	v, ok := n.Labels[v1alpha1.LabelGPUMemory]
	if !ok {
		return 0, true
	}
	m, err := strconv.ParseInt(v, 10, 64)
	if err != nil || m < 0 || m > 1<<40 {
		return 0, false
	}
	return m, true
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// UtilizationUnread in allot.dev/gpu-utilization is a device its agent could not read
// (NVML did not answer): no reading, neither idle nor busy, and no problem with the report.
// Every reader of the annotation takes it, as any value outside 0-100, for unknown.
const UtilizationUnread = -1

// ParseUtilization reads allot.dev/gpu-utilization, the one reader of it: a whole
// percentage per device by index, UtilizationUnread for a device its agent could not read.
// ok is false for an empty report or one with any field that is not a whole number from -1
// to 100: such a report says nothing of any device (none of them idle, none busy), whoever
// reads it (the pages, the idle controller, the custom metrics API). The count of devices
// is the caller's to check against the node's.
func ParseUtilization(report string) (values []int, ok bool) {
	if strings.TrimSpace(report) == "" {
		return nil, false
	}
	fields := strings.Split(report, ",")
	values = make([]int, len(fields))
	for i, f := range fields {
		u, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || u < UtilizationUnread || u > 100 {
			return nil, false
		}
		values[i] = u
	}
	return values, true
}

// NodeProblems names what Node did not trust on a node, field by field: agents,
// admins and GPU Feature Discovery write these, and one bad value must be seen by a person
// without taking the node, or the cycle, down.
func NodeProblems(n *corev1.Node) []string {
	var out []string
	gpus := int64(GPUCount(n))
	for _, r := range []corev1.ResourceName{GPUResource, corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := n.Status.Allocatable[r]; ok && q.Sign() < 0 {
			out = append(out, fmt.Sprintf("allocatable %s is %s: counted as none", r, q.String()))
		}
	}
	if why := singleMIGProblem(n); why != "" {
		out = append(out, why)
	}
	if why := capacityProblem(n); why != "" {
		out = append(out, why)
	}
	if n.Labels[v1alpha1.LabelMIGDynamic] == "true" {
		if why := MIGLayoutConflict(n); why != "" {
			out = append(out, fmt.Sprintf("label %s=true: its GPUs in MIG mode keep the layout they have, not laid out by Allot: %s", v1alpha1.LabelMIGDynamic, why))
		}
	}
	if _, ok := gpuMemoryMiB(n); !ok {
		out = append(out, fmt.Sprintf("label %s: %q is not a number of MiB: device memory unknown", v1alpha1.LabelGPUMemory, n.Labels[v1alpha1.LabelGPUMemory]))
	}
	if v, ok := n.Annotations[v1alpha1.AnnotationGPUUUIDs]; ok && int64(len(strings.Split(v, ","))) > gpus {
		out = append(out, fmt.Sprintf("annotation %s names %d devices, capacity %s is %d: the node is trusted no further than its capacity",
			v1alpha1.AnnotationGPUUUIDs, len(strings.Split(v, ",")), GPUResource, gpus))
	}
	if v, ok := n.Annotations[v1alpha1.AnnotationGPUUtilization]; ok && v != "" {
		if vals, ok := ParseUtilization(v); !ok || int64(len(vals)) != gpus {
			out = append(out, fmt.Sprintf("annotation %s: %q is not a percentage for each of the %d devices: not shown", v1alpha1.AnnotationGPUUtilization, v, gpus))
		}
	}
	if _, err := v1alpha1.ParseSharing(n.Labels[v1alpha1.LabelGPUSharing]); err != nil {
		out = append(out, err.Error()+": the node is taken to declare nothing")
	}
	if _, err := v1alpha1.ParseDelivery(n.Labels[v1alpha1.LabelGPUDelivery]); err != nil {
		out = append(out, err.Error()+": no pod sharing a GPU is placed there")
	}
	if inv, err := v1alpha1.ParseInventory(n.Annotations[v1alpha1.AnnotationGPUInventory]); err != nil {
		out = append(out, err.Error()+": NVLink and NUMA grouping guessed")
	} else if inv != nil && !singleMIG(n).ok && v1alpha1.Islands(inv, int(gpus)) == nil {
		// (On a single-strategy node nvidia.com/gpu counts MIG instances and the inventory
		// the GPUs that hold them, so the two never match and neither is wrong.)
		out = append(out, fmt.Sprintf("annotation %s lists %d devices (not in index order, or fewer than the %d of %s): NVLink and NUMA grouping guessed",
			v1alpha1.AnnotationGPUInventory, len(inv), gpus, GPUResource))
	}
	if _, err := v1alpha1.ParseUnhealthy(n.Annotations[v1alpha1.AnnotationGPUUnhealthy]); err != nil {
		out = append(out, err.Error()+": no device is taken to have failed")
	}
	if v, ok := n.Annotations[v1alpha1.AnnotationGPUCordon]; ok {
		if _, unknown := Cordoned(n, int(gpus), strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")); len(unknown) > 0 {
			out = append(out, fmt.Sprintf("annotation %s: %q: %s names no device of the node (an index below %d, a UUID of %s, or \"all\"): not cordoned",
				v1alpha1.AnnotationGPUCordon, v, strings.Join(unknown, ", "), gpus, v1alpha1.AnnotationGPUUUIDs))
		}
	}
	if _, ok := maxSharers(n); !ok {
		out = append(out, fmt.Sprintf("annotation %s: %q is not a whole number of pods from 1 to %d: no cap on the pods sharing a GPU",
			v1alpha1.AnnotationGPUMaxSharers, n.Annotations[v1alpha1.AnnotationGPUMaxSharers], engine.OneGPU))
	}
	if _, err := ParseOccupancy(n); err != nil {
		out = append(out, fmt.Sprintf("annotation %s is not the scheduler's JSON (%v): rewritten at the next change", v1alpha1.AnnotationOccupancy, err))
	}
	return out
}

// NoFractions says why a node cannot hand a pod sharing a GPU its device: it declares no
// delivery (LabelGPUDelivery), or one Allot does not know. Empty when it can.
func NoFractions(n *corev1.Node) string {
	d, err := v1alpha1.ParseDelivery(n.Labels[v1alpha1.LabelGPUDelivery])
	switch {
	case err != nil:
		return fmt.Sprintf("%v (set the agent's --delivery, the chart's agent.pools[].delivery)", err)
	case d == "":
		return noDelivery // every cycle, for every node without the label: made once
	}
	return ""
}

// noGPUMemory is why a node whose GPUs' size is not known takes no slice: its limit would be
// of nothing, which HAMi-core reads as none.
var noGPUMemory = fmt.Sprintf("the size of the node's GPUs is not known (no %s label from GPU Feature Discovery, no inventory of an allot agent): a slice could not be held to its memory",
	v1alpha1.LabelGPUMemory)

var noDelivery = fmt.Sprintf("the node does not say how a container is given a device it did not ask the kubelet for (label %s: %s; set the chart's agent.pools[].delivery, or let the agent read it from the GPU Operator)",
	v1alpha1.LabelGPUDelivery, strings.Join(v1alpha1.Deliveries, " or "))

// PodRequest reads what a pod asks for. A sharing annotation the webhook would have
// refused (it may not be installed) leaves the pod asking for nothing shared; invalid
// reports why, for the pod's pending reason.
func PodRequest(p *corev1.Pod) engine.PodRequest {
	r := engine.PodRequest{GPUs: int(v1alpha1.WholeGPUs(p))}
	if share, err := v1alpha1.ParseGPUShare(p.Annotations); err == nil && r.GPUs == 0 {
		r.GPUFraction = engine.MilliGPU(math.Round(share.Fraction * float64(engine.OneGPU)))
		r.GPUMemory = share.Memory
		r.GPUCompute = engine.MilliGPU(share.Compute) * engine.OneGPU / 100
		if share.Count > 1 {
			r.Devices = share.Count
		}
		r.GPUMemoryLimit = share.MemoryLimit
		r.GPUFractionLimit = engine.MilliGPU(math.Round(share.FractionLimit * float64(engine.OneGPU)))
	}
	// A MIG request the webhook would refuse leaves the pod asking no instance; the
	// snapshot makes its job wait with MIGRequest's reason.
	if m := r; MIGRequest(p, &m) == nil {
		r = m
	}
	// As kube-scheduler counts them: init containers, sidecars and the pod's overhead.
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	r.CPU, r.Memory = req.Cpu().MilliValue(), req.Memory().Value()
	return r
}

func Indices(s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v >= 0 {
			out = append(out, v)
		}
	}
	return out
}

func Queue(q *v1alpha1.Queue) engine.Queue {
	out := engine.Queue{ID: engine.QueueID(q.Name), Parent: engine.QueueID(q.Spec.Parent), Priority: q.Spec.Priority}
	if q.Spec.BurstPolicy == "wait" {
		out.BurstPolicy = engine.BurstWait // "evict" and unset: the default; the CRD allows no other
	}
	out.Resources[engine.ResourceGPU] = devices(q.Spec.GPU)
	set := func(r engine.Resource, rq *v1alpha1.ResourceQuota, milli bool) {
		if rq == nil {
			return
		}
		val := func(q *resource.Quantity) int64 {
			if milli {
				return q.MilliValue()
			}
			return q.Value()
		}
		if rq.Quota != nil {
			out.Resources[r].Quota = val(rq.Quota)
		}
		if rq.Limit != nil {
			v := val(rq.Limit)
			out.Resources[r].Limit = &v
		}
	}
	set(engine.ResourceCPU, q.Spec.CPU, true)
	set(engine.ResourceMemory, q.Spec.Memory, false)
	for _, m := range []struct {
		in  *metav1.Duration
		out **time.Duration
	}{{q.Spec.ReclaimMinRuntime, &out.ReclaimMinRuntime}, {q.Spec.PreemptMinRuntime, &out.PreemptMinRuntime}} {
		if m.in != nil {
			d := max(m.in.Duration, 0)
			*m.out = &d
		}
	}
	if d := q.Spec.GangStaleGracePeriod; d != nil {
		out.GangGrace = &d.Duration
	}
	if d := q.Spec.InteractiveTimeLimit; d != nil {
		out.InteractiveTimeLimit = d.Duration
	}
	return out
}

// devices is a quota of whole devices (GPUs, or another kind's) in the engine's
// thousandths of a device.
func devices(d v1alpha1.GPUQuota) engine.QueueResource {
	out := engine.QueueResource{Quota: int64(d.Quota) * int64(engine.OneGPU)}
	if w := d.OverQuotaWeight; w != nil {
		f := float64(*w) * float64(engine.OneGPU)
		out.OverQuotaWeight = &f
	}
	if l := d.Limit; l != nil {
		v := int64(*l) * int64(engine.OneGPU)
		out.Limit = &v
	}
	return out
}

// Occupancy is what the node annotation allot.dev/gpu-occupancy holds: the node's shared
// GPUs, who holds each and how much, for the CLI and the dashboard. Whole GPUs are not
// listed: their holders say so themselves (allot.dev/gpu-indices on the pod), and writing
// them would cost a node write for nearly every bind.
type Occupancy struct {
	GPUs []GPUOccupancy `json:"gpus"`
}

// GPUOccupancy is one device's holders; Used and Share are in thousandths of the GPU.
type GPUOccupancy struct {
	Index   int           `json:"index"`
	UUID    string        `json:"uuid"`
	Used    int           `json:"used"`
	Holders []GPUHolderOf `json:"holders,omitempty"`
}

// GPUHolderOf is one pod's part of a GPU.
type GPUHolderOf struct {
	Pod   string `json:"pod"` // namespace/name
	Share int    `json:"share"`
}

// ParseOccupancy reads a node's allot.dev/gpu-occupancy annotation.
func ParseOccupancy(n *corev1.Node) (Occupancy, error) {
	var occ Occupancy
	v := strings.TrimSpace(n.Annotations[v1alpha1.AnnotationOccupancy])
	if v == "" {
		return occ, nil
	}
	err := json.Unmarshal([]byte(v), &occ)
	return occ, err
}

// JobChoice sets on job what a pod's device-choice annotations ask (allot.dev/gpu-uuid,
// gpu-uuid-exclude, gpu-type-exclude, gpu-island, node-policy, gpu-policy); the error
// names the annotation that could not be read.
func JobChoice(job *engine.Job, annotations map[string]string) error {
	c, err := v1alpha1.ParseGPUChoice(annotations)
	if err != nil {
		return err
	}
	job.GPUUUIDs, job.ExcludeGPUUUIDs, job.ExcludeGPUTypes, job.SameIsland = c.UUIDs, c.ExcludeUUIDs, c.ExcludeTypes, c.SameIsland
	// ParseGPUChoice let only the values ParsePacking knows through.
	job.NodePacking, _ = engine.ParsePacking(c.NodePolicy)
	job.GPUPacking, _ = engine.ParsePacking(c.GPUPolicy)
	return nil
}

// BookedSlice reads back the slice of each shared GPU the scheduler booked for a bound pod
// (allot.dev/gpu-share-memory and gpu-share-compute): none on a pod bound before they
// were written, whose binding then holds its share of both.
func BookedSlice(p *corev1.Pod) (memory int64, compute engine.MilliGPU) {
	m, c := v1alpha1.ParseBookedSlice(p.Annotations)
	return m, engine.MilliGPU(c)
}
