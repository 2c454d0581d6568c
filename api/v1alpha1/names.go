package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The labels and annotations users set on pods and workloads (DESIGN.md section 2), and
// the ones Allot writes.
const (
	SchedulerName = "allot"
	GPUResource   = "nvidia.com/gpu"

	LabelQueue       = "allot.dev/queue"       // pod, owner or namespace
	LabelPodGroup    = "allot.dev/pod-group"   // pod
	LabelClass       = "allot.dev/class"       // train | interactive | inference
	LabelPreemptible = "allot.dev/preemptible" // "true" | "false"
	LabelNodePool    = "allot.dev/node-pool"   // node label and pod node selector
	// AnnotationNodePools lists the node pools a workload tries in order ("h100,a100"), on
	// the pod or its owner, in place of its queue's; never beside a node selector on
	// allot.dev/node-pool, which pins one.
	AnnotationNodePools = "allot.dev/node-pools"
	// DefaultPool names the nodes without a label allot.dev/node-pool where a list of
	// pools names them.
	DefaultPool = "default"
	// PoolStatusPrefix keys a pool's GPUs in a Queue's status: pool.allot.dev/h100.
	PoolStatusPrefix = "pool.allot.dev/"
	// LabelCapacityType on a node says, over what its cloud's labels say, whether it is
	// spot capacity (its cloud may take it back with notice): spot or on-demand.
	LabelCapacityType = "allot.dev/capacity-type"
	CapacitySpot      = "spot"
	CapacityOnDemand  = "on-demand"
	// A pod's spot policy, over its queue's spec.spot: which capacity it may use
	// (allowed, never, first), after how long waiting it may use on-demand too (with
	// first), and how many interruptions it survives before it is given on-demand only.
	// AnnotationInterruption, written by the scheduler on a pod whose node goes soon (a
	// spot notice), is when the pod is stopped (RFC 3339): the signal to checkpoint, read
	// through the downward API. Only the scheduler's memory decides the time.
	AnnotationInterruption       = "allot.dev/interruption"
	AnnotationSpot               = "allot.dev/spot"
	AnnotationOnDemandAfter      = "allot.dev/on-demand-after"
	AnnotationInterruptionBudget = "allot.dev/interruption-budget"
	SpotAllowed                  = "allowed"
	SpotNever                    = "never"
	SpotFirst                    = "first"
	LabelDomain                  = "allot.dev/topology-domain"

	AnnotationGPUFraction = "allot.dev/gpu-fraction" // "0.5"
	AnnotationGPUMemory   = "allot.dev/gpu-memory"   // "8Gi"
	AnnotationGPUCompute  = "allot.dev/gpu-compute"  // percent of the GPU's SMs, "30"
	// A dynamic fraction's limit: the GPU memory it may use while the GPU has it free,
	// past its request (gpu-memory or gpu-fraction), which it is guaranteed. Either form:
	// a quantity ("40Gi") or a fraction of the GPU ("0.5").
	AnnotationGPUMemoryLimit   = "allot.dev/gpu-memory-limit"
	AnnotationGPUFractionLimit = "allot.dev/gpu-fraction-limit"
	AnnotationGPUTypes         = "allot.dev/gpu-type" // "A100-80GB,H100"
	// A slice (fraction, memory or compute) of each of several GPUs: "2".
	AnnotationGPUCount = "allot.dev/gpu-count"
	// AnnotationGPUContainer names the container of a sharing pod that is given its slice
	// (the first when absent); the others are given no GPU, so that a pod holds its slice
	// once, not once per container.
	AnnotationGPUContainer = "allot.dev/gpu-container"
	// Devices a pod may be given, or must not be, by UUID; models it must not be given.
	AnnotationGPUUUIDPick    = "allot.dev/gpu-uuid"         // "GPU-1a2b…,GPU-3c4d…"
	AnnotationGPUUUIDExclude = "allot.dev/gpu-uuid-exclude" // "GPU-1a2b…"
	AnnotationGPUTypeExclude = "allot.dev/gpu-type-exclude" // "T4,V100"
	// AnnotationGPUIsland "required" keeps a multi-GPU pod's devices on one NVLink/NUMA
	// island: it waits rather than straddle two.
	AnnotationGPUIsland = "allot.dev/gpu-island"
	// How this pod's nodes and GPUs are chosen: "binpack" or "spread".
	AnnotationNodePolicy = "allot.dev/node-policy"
	AnnotationGPUPolicy  = "allot.dev/gpu-policy"
	// AnnotationGPUCordon on a node takes devices out of service (indices or UUIDs,
	// comma-separated; "all"): nothing new is placed on them, running pods stay. Nodes are
	// written by admins only.
	AnnotationGPUCordon = "allot.dev/gpu-cordon"
	// AnnotationGPUMaxSharers on a node caps how many pods share one of its GPUs.
	AnnotationGPUMaxSharers = "allot.dev/gpu-max-sharers"
	// A gang within one domain of a level of a Topology (its name or node label), or packed
	// as tightly as the levels allow; on the pod or its owner. AnnotationTopology names the
	// Topology object when the cluster has several.
	AnnotationTopologyRequired  = "allot.dev/topology-required"  // "rack"
	AnnotationTopologyPreferred = "allot.dev/topology-preferred" // "block"
	AnnotationTopology          = "allot.dev/topology"           // "default"

	// Written by Allot.
	AnnotationGPUs     = "allot.dev/gpu-indices" // pod: device indices on its node
	AnnotationGPUShare = "allot.dev/gpu-share"   // pod: its share of a shared GPU, in thousandths
	// The slice of each of its shared GPUs booked for a pod: bytes of memory, thousandths
	// of compute. The scheduler's books and the limits the pod is held to read these.
	AnnotationGPUShareMemory  = "allot.dev/gpu-share-memory"
	AnnotationGPUShareCompute = "allot.dev/gpu-share-compute"
	AnnotationConfigMap       = "allot.dev/gpu-configmap" // pod: the ConfigMap its containers read their GPU from
	AnnotationMinMember       = "allot.dev/min-member"    // pod: its gang's size, from the workload at admission
	// AnnotationMaxMember on an Indexed Job whose completions equal its parallelism (an
	// elastic indexed Job, as allot submit --workers MIN:MAX makes it) is how many pods
	// the scheduler may grow it to, raising both together when its members fit.
	AnnotationMaxMember = "allot.dev/max-member"
	// AnnotationTranslated records, on a pod the webhook admitted with another scheduler's
	// names (HAMi's, KAI-Scheduler's), what was read from which name and what Allot's name
	// it became: "nvidia.com/gpumem=8000 → allot.dev/gpu-memory=8000Mi; …".
	AnnotationTranslated = "allot.dev/translated"
	// AnnotationCreatedBy names who created a workload (its top object: a Job, a
	// Deployment, a bare pod…), as the API server authenticated the request: the webhook
	// writes it at creation, and the allot-created-by policy refuses any other value then
	// and any change after (CreatorPolicyName).
	AnnotationCreatedBy = "allot.dev/created-by"
	// AnnotationProgress on a workload's top object (or, where that has none, on its pods)
	// is how far it has come, as its owner or its own training code writes it, in its own
	// words ("step 4500/10000", "epoch 3/10", "45%"): shown by allot list -o wide, describe
	// and the dashboard, at most MaxProgress characters, and read by nothing that books or
	// places anything.
	AnnotationProgress = "allot.dev/progress"
	// MultiClusterManagedBy, in a Job's spec.managedBy, hands it to a multi-cluster manager;
	// AnnotationDispatchCluster and AnnotationDispatchWaiting, written on it by the manager
	// alone, say where it was dispatched and why it waits (kube/multicluster).
	MultiClusterManagedBy     = "allot.dev/multicluster"
	AnnotationDispatchCluster = "allot.dev/cluster"
	AnnotationDispatchWaiting = "allot.dev/waiting"
	// CreatorPolicyName is the ValidatingAdmissionPolicy that keeps AnnotationCreatedBy.
	CreatorPolicyName = "allot-created-by"
	// ElasticBoundsPolicyName is the ValidatingAdmissionPolicy that refuses a PyTorchJob's
	// elastic range that cannot be run: a minimum under 1 or above the maximum, or a
	// worker count outside the range.
	ElasticBoundsPolicyName = "allot-elastic-bounds"
	// CapacityTypePolicyName is the ValidatingAdmissionPolicy that refuses a value of
	// LabelCapacityType other than spot or on-demand.
	CapacityTypePolicyName = "allot-capacity-type"
	// AnnotationLeader on a bind or an eviction (and so on the bound pod) names the
	// scheduler replica that made it, checked against the Lease by the API server.
	AnnotationLeader    = "allot.dev/leader"
	AnnotationGPUUUIDs  = "allot.dev/gpu-uuids"     // node: device UUIDs by index, comma-separated
	AnnotationOccupancy = "allot.dev/gpu-occupancy" // node: JSON, who holds each GPU
	// AnnotationGPUUtilization is how busy each device was over the agent's last report
	// interval, in percent by index, comma-separated ("97,0,55,…"). The per-node agent
	// writes it from the GPU's counters; on simulated nodes the simulated kubelet does.
	AnnotationGPUUtilization = "allot.dev/gpu-utilization"
	LabelReservation         = "allot.dev/reservation" // reservation pods holding shared GPUs

	// SystemNamespace holds Allot's own objects, such as reservation pods.
	SystemNamespace = "allot-system"
)

// Allot's resources, for dynamic clients and informers.
var (
	Queues         = GroupVersion.WithResource("queues")
	PodGroups      = GroupVersion.WithResource("podgroups")
	Topologies     = GroupVersion.WithResource("topologies")
	WorkerClusters = GroupVersion.WithResource("workerclusters")
)

// Node labels NVIDIA GPU Feature Discovery writes, which Allot reads its inventory from.
const (
	LabelGPUProduct = "nvidia.com/gpu.product"
	LabelGPUMemory  = "nvidia.com/gpu.memory" // MiB per GPU
	LabelGPUCount   = "nvidia.com/gpu.count"
)

// IsReservation tells a scheduler's reservation pod: the label, in Allot's namespace. The
// label alone, on a pod elsewhere, is a tenant's and means nothing (the webhook refuses it).
func IsReservation(p *corev1.Pod) bool {
	return p.Namespace == SystemNamespace && p.Labels[LabelReservation] == "true"
}

// WholeGPUs is the whole GPUs a pod holds at most (PodAmount of nvidia.com/gpu): its
// containers', its sidecars' and its init containers', as the kubelet allocates them.
func WholeGPUs(p *corev1.Pod) int64 {
	return PodAmount(p, func(c *corev1.Container) int64 { return ContainerAsks(c, GPUResource) })
}

// ContainerAsks is how many devices of an extended resource a container asks for: its
// limit, else its request (the API server sets one from the other). A negative amount (the
// API server refuses one; a fake or an old object may carry it) asks for nothing, and the
// amount is kept far from overflowing a sum.
func ContainerAsks(c *corev1.Container, name corev1.ResourceName) int64 {
	if q, ok := c.Resources.Limits[name]; ok {
		return min(max(q.Value(), 0), 1<<20)
	}
	if q, ok := c.Resources.Requests[name]; ok {
		return min(max(q.Value(), 0), 1<<20)
	}
	return 0
}

// PodAmount is the most a pod holds at once of what each container asks (ask), by the rule
// kube-scheduler and the kubelet's device manager follow for init containers and sidecars:
// a sidecar (an init container with restartPolicy Always) runs from its start to the pod's
// end, beside everything after it; a plain init container runs alone beside the sidecars
// before it, and hands its devices on to the containers after it. So the pod holds the
// larger of its containers plus all its sidecars, and each plain init container plus the
// sidecars started before it. Reading spec.containers alone, a pod whose GPUs are asked by a
// sidecar would be booked nothing while the kubelet gives it the devices.
func PodAmount(p *corev1.Pod, ask func(*corev1.Container) int64) int64 {
	var sidecars, initPeak, main int64
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		n := ask(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars += n
			initPeak = max(initPeak, sidecars)
		} else {
			initPeak = max(initPeak, sidecars+n)
		}
	}
	for i := range p.Spec.Containers {
		main += ask(&p.Spec.Containers[i])
	}
	return max(initPeak, main+sidecars)
}

// Classes of workload.
const (
	ClassTrain       = "train"
	ClassInteractive = "interactive"
	ClassInference   = "inference"
)

// GPUShare is what a pod asks of the GPUs it shares: a slice of each of Count devices.
type GPUShare struct {
	Fraction float64 // of each device's memory and compute, in (0, 1); 0 when memory or compute is asked instead
	Memory   int64   // bytes of each device's memory; 0 when a fraction is asked, or compute alone
	// Compute is the percent of each device's compute (SMs); 0 = in proportion to the
	// memory or fraction. Alone, it is the slice, and memory is in proportion to it.
	Compute int32
	// Count is how many devices the slice is taken of, one each (allot.dev/gpu-count); 0
	// or 1 is one.
	Count int
	// MemoryLimit (bytes) and FractionLimit (of the device) are a dynamic fraction's
	// limit past its request; 0 when it has none.
	MemoryLimit   int64
	FractionLimit float64
}

// Shared tells whether the pod asks for part of a GPU.
func (s GPUShare) Shared() bool { return s.Fraction > 0 || s.Memory > 0 || s.Compute > 0 }

// Devices is how many devices the slice is taken of.
func (s GPUShare) Devices() int { return max(s.Count, 1) }

// MaxGPUCount bounds allot.dev/gpu-count: no node has more devices.
const MaxGPUCount = 64

// ParseGPUShare reads a pod's sharing annotations. Its errors name the annotation and the
// allowed values, for the admission webhook to show as they are.
func ParseGPUShare(annotations map[string]string) (GPUShare, error) {
	var s GPUShare
	frac, hasFrac := annotations[AnnotationGPUFraction]
	mem, hasMem := annotations[AnnotationGPUMemory]
	if hasFrac && hasMem {
		return s, fmt.Errorf("%s and %s are both set: ask for a fraction or for memory, not both", AnnotationGPUFraction, AnnotationGPUMemory)
	}
	if hasFrac {
		f, err := strconv.ParseFloat(strings.TrimSpace(frac), 64)
		if err != nil || !(f > 0 && f < 1) {
			return s, fmt.Errorf("%s: %q is not allowed: a fraction is a number between 0 and 1 such as 0.5 (for whole GPUs request nvidia.com/gpu)", AnnotationGPUFraction, frac)
		}
		// The engine counts thousandths of a GPU: a fraction that rounds to nothing is none.
		if f < 0.001 {
			return s, fmt.Errorf("%s: %q is not allowed: the smallest fraction is 0.001", AnnotationGPUFraction, frac)
		}
		s.Fraction = f
	}
	if hasMem {
		q, err := resource.ParseQuantity(strings.TrimSpace(mem))
		// A petabyte bounds it: no GPU has more, and a larger number would overflow the
		// int64 bytes (found by FuzzParseGPUShare: "10000000000000000000" read as negative).
		// AsInt64, not Cmp: comparing "1e66666666" takes Quantity's big decimals seconds.
		v, whole := q.AsInt64()
		// At least 1Mi: limits are whole MiB, and HAMi-core reads a limit of 0 as none.
		if err != nil || !whole || v < 1<<20 || v > 1<<50 {
			return s, fmt.Errorf("%s: %q is not allowed: a whole quantity of GPU memory from 1Mi up to 1Pi, such as 8Gi or 20000Mi", AnnotationGPUMemory, mem)
		}
		s.Memory = v
	}
	if c, ok := annotations[AnnotationGPUCompute]; ok {
		v, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || v < 1 || v > 100 {
			return s, fmt.Errorf("%s: %q is not allowed: a whole percentage of each GPU's compute from 1 to 100", AnnotationGPUCompute, c)
		}
		// Alone it is the slice: that much of the compute, and memory in proportion.
		s.Compute = int32(v)
	}
	if c, ok := annotations[AnnotationGPUCount]; ok {
		v, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || v < 1 || v > MaxGPUCount {
			return s, fmt.Errorf("%s: %q is not allowed: how many GPUs the slice is taken of, a whole number from 1 to %d", AnnotationGPUCount, c, MaxGPUCount)
		}
		if !s.Shared() {
			return s, fmt.Errorf("%s is set without %s, %s or %s: it says how many GPUs a slice is taken of (for whole GPUs request nvidia.com/gpu: %d)",
				AnnotationGPUCount, AnnotationGPUFraction, AnnotationGPUMemory, AnnotationGPUCompute, v)
		}
		s.Count = v
	}
	if m, ok := annotations[AnnotationComputeMode]; ok {
		if m == "" || !slices.Contains(ComputeModes, m) {
			return s, fmt.Errorf("%s: %q is not allowed: one of %s (how a slice's compute share holds while its GPU's other sharers are idle)",
				AnnotationComputeMode, m, strings.Join(ComputeModes, ", "))
		}
		if !s.Shared() {
			return s, fmt.Errorf("%s is set without %s, %s or %s: it says how a slice's compute share holds (a whole GPU's compute is its own)",
				AnnotationComputeMode, AnnotationGPUFraction, AnnotationGPUMemory, AnnotationGPUCompute)
		}
	}
	if err := parseLimits(annotations, &s); err != nil {
		return GPUShare{}, err
	}
	return s, nil
}

// parseLimits reads a dynamic fraction's limit: one form, with a request of memory or a
// fraction on one GPU, and no less than the request in the same form.
func parseLimits(annotations map[string]string, s *GPUShare) error {
	ml, hasML := annotations[AnnotationGPUMemoryLimit]
	fl, hasFL := annotations[AnnotationGPUFractionLimit]
	switch {
	case !hasML && !hasFL:
		return nil
	case hasML && hasFL:
		return fmt.Errorf("%s and %s are both set: give the limit one way", AnnotationGPUMemoryLimit, AnnotationGPUFractionLimit)
	case s.Fraction == 0 && s.Memory == 0:
		return fmt.Errorf("%s needs a request to go past: %s or %s", map[bool]string{true: AnnotationGPUMemoryLimit, false: AnnotationGPUFractionLimit}[hasML], AnnotationGPUMemory, AnnotationGPUFraction)
	case s.Count > 1:
		return fmt.Errorf("a memory limit past the request is for a slice of one GPU, not of %d (%s)", s.Count, AnnotationGPUCount)
	}
	if hasML {
		q, err := resource.ParseQuantity(strings.TrimSpace(ml))
		v, whole := q.AsInt64()
		if err != nil || !whole || v < 1<<20 || v > 1<<50 {
			return fmt.Errorf("%s: %q is not allowed: a whole quantity of GPU memory from 1Mi up to 1Pi, such as 40Gi", AnnotationGPUMemoryLimit, ml)
		}
		if s.Memory > 0 && v < s.Memory {
			return fmt.Errorf("%s: %q is less than the request %s: a limit is at least the memory asked", AnnotationGPUMemoryLimit, ml, annotations[AnnotationGPUMemory])
		}
		s.MemoryLimit = v
		return nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(fl), 64)
	if err != nil || !(f > 0 && f <= 1) {
		return fmt.Errorf("%s: %q is not allowed: a fraction of the GPU above 0 and up to 1, such as 0.75", AnnotationGPUFractionLimit, fl)
	}
	if s.Fraction > 0 && f < s.Fraction {
		return fmt.Errorf("%s: %q is less than the request %s: a limit is at least the fraction asked", AnnotationGPUFractionLimit, fl, annotations[AnnotationGPUFraction])
	}
	s.FractionLimit = f
	return nil
}

// GPUChoice is which devices a pod may be given, beyond how much of them: by UUID, by
// model it must not be given, one island, and how its nodes and GPUs are chosen.
type GPUChoice struct {
	UUIDs, ExcludeUUIDs, ExcludeTypes []string
	SameIsland                        bool
	NodePolicy, GPUPolicy             string // "", "binpack" or "spread"
}

// Policies are the values of AnnotationNodePolicy and AnnotationGPUPolicy.
var Policies = []string{"binpack", "spread"}

// ParseGPUChoice reads a pod's device-choice annotations (gpu-uuid, gpu-uuid-exclude,
// gpu-type-exclude, gpu-island, node-policy, gpu-policy; gpu-type only for its length).
// Its errors name the annotation and the allowed values or the limit.
func ParseGPUChoice(annotations map[string]string) (GPUChoice, error) {
	var c GPUChoice
	list := func(key string, into *[]string) error {
		v, ok := annotations[key]
		if !ok {
			return nil
		}
		// Counted before it is split: a list of a million commas is refused unread.
		if n := strings.Count(v, ",") + 1; n > MaxChoiceEntries {
			return fmt.Errorf("%s: %d entries is too many: at most %d (name a pool, a product or a node label instead)", key, n, MaxChoiceEntries)
		}
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				if len(f) > MaxChoiceEntryLength {
					return fmt.Errorf("%s: an entry of %d characters is too long: at most %d (a GPU UUID or product name)", key, len(f), MaxChoiceEntryLength)
				}
				*into = append(*into, f)
			}
		}
		if len(*into) == 0 {
			return fmt.Errorf("%s: %q names nothing: a comma-separated list (remove the annotation to allow any)", key, v)
		}
		return nil
	}
	var types []string // read where the snapshot reads it; checked here for its length
	if _, ok := annotations[AnnotationGPUTypes]; ok && strings.TrimSpace(annotations[AnnotationGPUTypes]) != "" {
		if err := list(AnnotationGPUTypes, &types); err != nil {
			return c, err
		}
	}
	for _, l := range []struct {
		key  string
		into *[]string
	}{{AnnotationGPUUUIDPick, &c.UUIDs}, {AnnotationGPUUUIDExclude, &c.ExcludeUUIDs}, {AnnotationGPUTypeExclude, &c.ExcludeTypes}} {
		if err := list(l.key, l.into); err != nil {
			return c, err
		}
	}
	if v, ok := annotations[AnnotationGPUIsland]; ok {
		if strings.TrimSpace(v) != "required" {
			return c, fmt.Errorf("%s: %q is not allowed: \"required\" keeps a pod's GPUs on one NVLink/NUMA island (remove it to only prefer one)", AnnotationGPUIsland, v)
		}
		c.SameIsland = true
	}
	for _, p := range []struct {
		key  string
		into *string
	}{{AnnotationNodePolicy, &c.NodePolicy}, {AnnotationGPUPolicy, &c.GPUPolicy}} {
		if v, ok := annotations[p.key]; ok {
			v = strings.TrimSpace(v)
			if !slices.Contains(Policies, v) {
				return c, fmt.Errorf("%s: %q is not allowed: %s", p.key, annotations[p.key], strings.Join(Policies, " or "))
			}
			*p.into = v
		}
	}
	return c, nil
}

// MaxChoiceEntries and MaxChoiceEntryLength bound the device-choice lists a pod's owner
// writes (allot.dev/gpu-type, gpu-type-exclude, gpu-uuid, gpu-uuid-exclude): each is read
// for every device, job and pass of a cycle, and only the API server's 256 KiB limit on
// annotations would bound it otherwise. 256 is a pool of 32 eight-GPU nodes named device by
// device; more than that is a pool, a product or a node label.
const (
	MaxChoiceEntries     = 256
	MaxChoiceEntryLength = 128
)

// ParseBookedSlice reads the slice of each shared GPU the scheduler booked for a bound pod
// (allot.dev/gpu-share-memory, bytes; allot.dev/gpu-share-compute, thousandths); 0 where
// it wrote none (a pod bound before they were written) or the value is not one it writes.
func ParseBookedSlice(annotations map[string]string) (memory int64, compute int) {
	if v, err := strconv.ParseInt(strings.TrimSpace(annotations[AnnotationGPUShareMemory]), 10, 64); err == nil && v > 0 && v <= 1<<50 {
		memory = v
	}
	if v, err := strconv.Atoi(strings.TrimSpace(annotations[AnnotationGPUShareCompute])); err == nil && v > 0 && v <= 1000 {
		compute = v
	}
	return memory, compute
}

// HeldGPUs reads where the scheduler placed a bound pod: the device indices on its node
// (allot.dev/gpu-indices) and the part of each it holds, 1 for whole GPUs or its share of
// a shared one (allot.dev/gpu-share, in thousandths).
func HeldGPUs(p *corev1.Pod) (indices []int, share float64) {
	share = 1
	// A share is a part of one device, 1 to 999 thousandths; anything else written there
	// (by hand: the scheduler writes none other) means the whole device, no more.
	if s, err := strconv.Atoi(strings.TrimSpace(p.Annotations[AnnotationGPUShare])); err == nil && s > 0 && s < 1000 {
		share = float64(s) / 1000
	}
	for _, f := range strings.Split(p.Annotations[AnnotationGPUs], ",") {
		if g, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && g >= 0 {
			indices = append(indices, g)
		}
	}
	return indices, share
}

// MaxGang bounds a gang's size: no workload runs more pods at once, and a spec or an
// annotation that says otherwise (a number a CRD's schema did not check) is refused by
// name rather than left to wait for pods that will never come or overflow a sum.
const MaxGang = 100_000

// ResourceClaimsProblem says why a pod may not ask for devices through Dynamic Resource
// Allocation claims as it does: beside nvidia.com/gpu or a GPU share, which would count
// its GPUs twice and be handed out by two different agents. Empty when the pod has no
// claims or asks only through them. The admission webhook refuses such a pod with it, and
// the scheduler makes one admitted past the webhook wait with it.
func ResourceClaimsProblem(p *corev1.Pod) string {
	if len(p.Spec.ResourceClaims) == 0 {
		return ""
	}
	share, _ := ParseGPUShare(p.Annotations)
	if WholeGPUs(p) == 0 && !share.Shared() {
		return ""
	}
	return fmt.Sprintf("spec.resourceClaims (%s) with %s, %s or %s: a pod asks for its GPUs one way, through ResourceClaims or through those",
		p.Spec.ResourceClaims[0].Name, GPUResource, AnnotationGPUFraction, AnnotationGPUMemory)
}

// SliceContainer is the container of a sharing pod given its slice: the one
// AnnotationGPUContainer names, else the first. Empty when the pod has no such container.
func SliceContainer(p *corev1.Pod) string {
	name, named := p.Annotations[AnnotationGPUContainer]
	for _, c := range p.Spec.Containers {
		if !named || c.Name == name {
			return c.Name
		}
	}
	return ""
}
