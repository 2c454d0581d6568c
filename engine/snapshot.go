package engine

import (
	"fmt"
	"time"

	"github.com/allot-dev/allot/mig"
)

// Snapshot is everything one scheduling cycle may look at. The engine reads it and never
// changes it; the caller builds a new one per cycle.
type Snapshot struct {
	Now    time.Time
	Nodes  []Node
	Queues []Queue
	Jobs   []Job
	// Rules judges placements that depend on other pods' places in this same cycle (pod
	// affinity and anti-affinity, topology spread, host ports, resources the engine does
	// not count). The engine asks it only about jobs whose NodeFilter is Dynamic; nil when
	// no job needs it.
	Rules PlacementRules
	// Accelerators names the kinds of accelerator besides NVIDIA's GPUs the cluster has
	// ("ascend", "amd"), at most MaxAccelerators: kind Accelerators[i] is counted as
	// AcceleratorResource(i) in queues' quotas, fair shares and allocations.
	Accelerators []string
	// Pools names the node pools whose NVIDIA GPUs are divided apart, at most MaxPools:
	// pool Pools[k]'s GPUs are counted as PoolResource(k) in queues' quotas, fair shares
	// and allocations, so that a queue is guaranteed, borrows and is reclaimed from in each
	// such pool on its own. The GPUs of every other pool count as ResourceGPU.
	Pools []string
}

// PlacementRules is how the engine learns the placement rules it does not evaluate itself:
// the Kubernetes adapter answers with kube-scheduler's own plugins, the simulator with the
// few rules scenario files express. The engine tells it every bind and unbind of the
// session (trials that are rolled back included) so that its answers follow the session.
type PlacementRules interface {
	// Fits reports whether the pod may run on the node given the pods placed so far.
	Fits(pod PodID, node NodeID) bool
	// Placed and Removed report a pod bound to or unbound from a node in the session.
	Placed(pod PodID, node NodeID)
	Removed(pod PodID, node NodeID)
	// Why says, for a person, why the pod fits none of the given nodes.
	Why(pod PodID, nodes []NodeID) string
}

// NodeFilter is what a job's pod spec alone decides about nodes (node selectors and
// affinity, taints and tolerations, volumes' topology, cordons), worked out by the caller
// once per pod shape and shared by the jobs of that shape.
type NodeFilter struct {
	// Allowed lists the nodes the pods may run on; every other node is ruled out.
	Allowed []NodeID
	// Excluded says why the other nodes are ruled out, in the words people know from
	// kube-scheduler: "8 node(s) had untolerated taint(s)".
	Excluded string
	// Preference ranks allowed nodes (higher is better; preferred node affinity, taints
	// the pod would rather avoid) among placements that are otherwise equal.
	Preference map[NodeID]int64
	// Dynamic marks jobs whose placements must also pass Snapshot.Rules.
	Dynamic bool
}

// Node is a schedulable machine with its GPUs.
type Node struct {
	ID     NodeID
	Labels map[string]string
	// Pool is the node pool (label allot.dev/node-pool); empty means the default pool.
	Pool string
	// Domain is the node's topology domain (a rack or a network block); a gang that needs
	// several nodes prefers nodes of one domain.
	Domain string
	GPUs   []GPU
	// CPU in millicores and Memory in bytes that pods may request on this node.
	CPU    int64
	Memory int64
	// MaxPods caps how many of the snapshot's pods the node may run (its pod capacity
	// less the pods the snapshot does not hold); nil means no cap.
	MaxPods *int
	// Unschedulable nodes keep their running pods but take no new ones.
	Unschedulable bool
	// Sharing is how the node enforces GPU sharing (SharingNone, or a mode that enforces
	// limits); empty when the node does not say. A pod asking for a hard GPU memory cap
	// is never placed where sharing is SharingNone.
	Sharing string
	// Compute is the loosest compute mode the node allows its sharing pods (capped, fair
	// or shared; empty: capped). The engine books compute the same in each: the bind
	// tells each pod how its share holds.
	Compute string
	// NoFractions, when set, says why pods sharing a GPU cannot be given one here (the
	// node declares no way to hand a fraction its device); they are placed elsewhere, or
	// wait with this reason.
	NoFractions string
	// Unenforced, when set, says why a slice of a GPU would not be held to its share here
	// (the node enforces no sharing, and its admin has not said fractions there are on
	// trust): pods taking a slice are placed elsewhere, or wait with this reason. A MIG
	// instance, which the GPU itself holds to its size, is not concerned.
	Unenforced string
	// MIGNotLaidOut, when set, says why the node's GPUs in MIG mode are not Allot's to lay
	// out though the node asks for it (another component acts on their instances): they
	// keep the layout they have, and a pod asking Allot for an instance is told this.
	MIGNotLaidOut string
	// MaxSharers caps how many pods may share one of the node's GPUs (HAMi's split count);
	// zero means no cap.
	MaxSharers int
	// Accelerator is the kind of the node's GPUs: empty for NVIDIA's, else one of
	// Snapshot.Accelerators. A node's devices are of one kind; a kind the snapshot does
	// not name is no capacity for anyone.
	Accelerator string
	// Spot marks capacity its cloud may take back with notice (spot.go): jobs place there
	// as their SpotPolicy allows, and victims there are taken first.
	Spot bool
	// Interruption, when set, says why the node goes soon (a spot notice, its deletion):
	// the caller marks it Unschedulable too. From InterruptAt on (the end of the grace the
	// caller gives its pods to checkpoint), what runs there is stopped: a job that keeps
	// its minimum without those pods shrinks, any other is stopped whole, to start again
	// whole elsewhere (spot.go).
	Interruption string
	InterruptAt  time.Time
}

// SharingNone is a node that lets pods share a GPU without holding them to their share.
const SharingNone = "none"

// GPU is one physical device of a node.
type GPU struct {
	Model  string
	Memory int64 // bytes
	UUID   string
	// Island groups GPUs that share NVLink or a NUMA node; multi-GPU pods prefer one island.
	Island int
	// Unhealthy, when set, says why the device failed (an XID error, off the bus): nothing
	// new is placed on it, it counts as no capacity, and the pods on it keep running until
	// their owners act.
	Unhealthy string
	// Cordoned, when set, says why an admin took the device out of service: as Unhealthy,
	// nothing new is placed on it and it counts as no capacity; the pods on it keep running.
	Cordoned string
	// MIG, when set, says the device is in MIG mode: it is given out only as MIG instances,
	// to pods that ask for one (PodRequest.WantsMIG), never whole or in slices.
	MIG *MIGDevice
}

// MIGDevice is a GPU in MIG mode: its geometry and the instances it has now.
type MIGDevice struct {
	Model *mig.Model
	// Dynamic lets the engine choose the layout: an instance of any of the model's
	// profiles may be placed on memory slices no running pod holds, the idle instances
	// there destroyed first. Without it the layout is fixed (the GPU Operator's MIG
	// manager made it) and pods take the instances it has.
	Dynamic bool
	// Instances are the GPU instances the device has now, held or idle.
	Instances []MIGInstance
	// AskedBy, when set, says how a pod asks for the device's instances where that is not
	// by their profile's own resource (the NVIDIA device plugin's single strategy gives
	// them as plain GPUs): a whole-GPU pod's reason tells it, where such nodes are all
	// there is.
	AskedBy string
}

// MIGInstance is one GPU instance of a device in MIG mode.
type MIGInstance struct {
	Profile string // "1g.10gb"
	Start   int    // its first memory slice
	UUID    string // the MIG device's UUID; empty where not known
}

// OutOfService says why nothing new may be placed on the device; empty when it is in
// service.
func (g *GPU) OutOfService() string {
	if g.Unhealthy != "" {
		return g.Unhealthy
	}
	return g.Cordoned
}

// Queue is a node of the queue tree. Jobs are submitted to leaf queues.
type Queue struct {
	ID     QueueID
	Parent QueueID // empty for a top-level queue
	// Quota, weight and limit per resource; index with ResourceGPU, ResourceCPU, ResourceMemory.
	Resources [numResources]QueueResource
	// Priority orders queues when dividing what is left over quota: higher first.
	Priority int32
	// InteractiveTimeLimit stops interactive jobs that ran this long; zero means none.
	InteractiveTimeLimit time.Duration
	// ReclaimMinRuntime keeps a job of this queue from being reclaimed by another queue
	// until it has run this long; PreemptMinRuntime from being preempted by a job of
	// higher priority in its own queue. Nil inherits the parent's (none at the top).
	ReclaimMinRuntime, PreemptMinRuntime *time.Duration
	// GangGrace is how long the queue's gangs may run below MinMember before the rest are
	// stopped (see Options.GangGrace); nil inherits the parent's, then the engine's.
	GangGrace *time.Duration
	// Usage is the queue's past use above its quota at Snapshot.Now, in decayed
	// GPU-seconds (see Usage); it matters only with Options.UsageStrength above 0.
	Usage float64
	// BurstPolicy is what a slice of the queue does when its request needs GPU memory
	// that pods bursting past their requests hold: BurstEvict (the default) stops the
	// burster furthest past its request, BurstWait waits for them.
	BurstPolicy BurstPolicy
}

// BurstPolicy resolves a request colliding with memory lent to bursting pods.
type BurstPolicy string

const (
	BurstEvict BurstPolicy = ""     // the request is honoured; the burst was a loan
	BurstWait  BurstPolicy = "wait" // the request waits until the bursters give it back
)

// QueueResource is the guarantee and cap of one resource for a queue.
type QueueResource struct {
	Quota int64
	// OverQuotaWeight divides what is left after quotas; nil means "equal to Quota".
	OverQuotaWeight *float64
	// Limit caps the allocation; nil means no cap.
	Limit *int64
}

// Weight returns the effective over-quota weight.
func (r QueueResource) Weight() float64 {
	if r.OverQuotaWeight != nil {
		return *r.OverQuotaWeight
	}
	return float64(r.Quota)
}

// Job is a gang of pods scheduled together: MinMember pods start at once or none do;
// pods beyond MinMember are elastic and added one at a time.
type Job struct {
	ID          JobID
	Queue       QueueID
	Class       Class
	Preemptible Preemptibility
	Priority    int32
	MinMember   int
	Pods        []Pod
	SubmitTime  time.Time
	// StartTime is when the job last reached MinMember running pods (zero if pending).
	StartTime time.Time
	// PartialSince is when the job was first seen running fewer than MinMember pods (and
	// more than none) without a break since; zero when it is not, or not known to be.
	PartialSince time.Time
	// MembersEvicted says some of the job's pods are leaving by an eviction: with the job
	// running partly, that is a whole-gang eviction or move cut short (its maker died
	// between the requests), and the rest are stopped at once.
	MembersEvicted bool
	// GangGrace is the job's own grace period below MinMember (its PodGroup's); nil: its
	// queue's.
	GangGrace *time.Duration
	// Lost names the members the job lost since it went below MinMember ("worker-3 on
	// node-7"), for the reason given when the rest are stopped.
	Lost     []string
	NodePool string
	// MorePools are the node pools the job may run in when it fits nowhere in NodePool,
	// tried in this order (Run:ai's ordered node pools). Only a job with no pod running
	// moves between them; one that runs stays in the pool its pods are in.
	MorePools []string
	// Topology, when set, keeps the job's pods within one domain of a level of node labels
	// (required) or packs them into the narrowest one that holds them (preferred).
	Topology *Topology
	// GPUTypes lists acceptable GPU models; empty accepts any. ExcludeGPUTypes lists
	// models the job's pods must not be given.
	GPUTypes, ExcludeGPUTypes []string
	// GPUUUIDs, when set, are the only devices the job's pods may be given;
	// ExcludeGPUUUIDs are devices they must not be given.
	GPUUUIDs, ExcludeGPUUUIDs []string
	// SameIsland requires each pod's GPUs to share one NVLink/NUMA island (the pod waits
	// rather than straddle two); without it one island is only preferred.
	SameIsland bool
	// NodePacking and GPUPacking override, for this job, how nodes and a node's GPUs are
	// chosen (HAMi's node and GPU scheduler policies); PackingDefault follows the engine's
	// options.
	NodePacking, GPUPacking Packing
	// Nodes narrows the nodes the job's pods may use; nil allows every node.
	Nodes *NodeFilter
	// Accelerator is the kind of device the job's pods ask (GPUs counts them): empty for
	// NVIDIA's GPUs, else one of Snapshot.Accelerators. Its pods run only on nodes of that
	// kind and count against the queue's quota of it. Slices and MIG are NVIDIA's only.
	Accelerator string
	// Invalid, when set, says what in the job's spec cannot be scheduled (an annotation
	// nobody validated, say): the job waits with it as its reason, and its running pods
	// keep their GPUs.
	Invalid string
	// Spot is which capacity the job may use (spot.go); OnDemandAfter, with SpotFirst,
	// how long after its submission it may use on-demand capacity too. Interruptions
	// counts how often spot capacity was taken from under it; past InterruptionBudget (nil:
	// no budget) it runs on on-demand capacity only.
	Spot               SpotPolicy
	OnDemandAfter      time.Duration
	Interruptions      int
	InterruptionBudget *int
	// Growth, when set, is what the job's workload may still add of itself (an elastic
	// job submitted below its maximum): Plan.Grow says how many members fit now.
	Growth *Growth
}

// IsPreemptible resolves the class default and the override.
func (j *Job) IsPreemptible() bool {
	switch j.Preemptible {
	case PreemptibleYes:
		return true
	case PreemptibleNo:
		return false
	}
	return j.Class == ClassTrain
}

// Pod is one member of a job.
type Pod struct {
	ID      PodID
	Request PodRequest
	// Binding is where the pod runs; nil while pending.
	Binding *Binding
}

// PodRequest is what one pod needs: whole GPUs, or a slice of each of Devices GPUs. A
// slice is GPUFraction of a device's memory and compute alike, or GPUMemory bytes and
// GPUCompute thousandths of its compute (either alone: the other in proportion to the
// device). GPUs and a slice are never both set.
type PodRequest struct {
	GPUs        int      // whole devices
	GPUFraction MilliGPU // a share of each device, memory and compute alike, 1..999
	GPUMemory   int64    // bytes of each device's memory
	GPUCompute  MilliGPU // thousandths of each device's compute (SMs), 1..1000
	// Devices is how many devices a shared request takes its slice of, one each (HAMi's
	// nvidia.com/gpu: 2 with nvidia.com/gpumem); 0 means 1.
	Devices int
	// MIG asks for an instance of that profile ("1g.10gb") on each of Devices devices in
	// MIG mode (the device plugin's nvidia.com/mig-1g.10gb: N). MIGShare and MIGMemory ask
	// for the smallest profile holding that share of a device's compute and memory and
	// that many bytes of memory (allot submit -g 0.5 --mig). Never set with GPUs or a slice.
	MIG       string
	MIGShare  MilliGPU
	MIGMemory int64
	// MIGFrom says which devices may give the instances: any (the simulator), only fixed
	// layouts (a device plugin hands the instance to a pod asking its resource), or only
	// devices the engine lays out (the node agent makes the instance, Allot delivers it).
	MIGFrom MIGSource
	// GPUMemoryLimit and GPUFractionLimit let a slice use more memory than it asks while
	// the device has it free (a dynamic fraction): it is placed and counted by its
	// request, held to the limit, and what it uses beyond its request is a loan that a
	// pod's request takes back (Queue.BurstPolicy). Zero: the request is the limit.
	GPUMemoryLimit   int64
	GPUFractionLimit MilliGPU
	CPU              int64 // millicores
	Memory           int64 // bytes
}

// MIGSource is which devices in MIG mode may give a pod its instances.
type MIGSource int

const (
	MIGAny MIGSource = iota
	MIGFixed
	MIGDynamic
)

// WantsMIG reports whether the pod asks for MIG instances.
func (r PodRequest) WantsMIG() bool { return r.MIG != "" || r.MIGShare > 0 || r.MIGMemory > 0 }

// Shared reports whether the pod takes a slice of GPUs rather than whole ones.
func (r PodRequest) Shared() bool { return r.GPUFraction > 0 || r.GPUMemory > 0 || r.GPUCompute > 0 }

// SharedDevices is how many devices a shared request takes a slice of.
func (r PodRequest) SharedDevices() int { return max(r.Devices, 1) }

// Binding is a pod's place: the node, the GPU indices on it, and for shared GPUs the slice
// it holds of each: its share (what it counts against its queue, per device), the bytes of
// memory and the thousandths of compute booked for it. A binding with a Share and neither
// Memory nor Compute (written before they were booked apart) holds its share of both.
type Binding struct {
	Node    NodeID
	GPUs    []int
	Share   MilliGPU // set only for shared pods
	Memory  int64    // bytes of each device's memory; shared pods only
	Compute MilliGPU // thousandths of each device's compute; shared pods only
	// MIG is the profile of the instance the pod holds on each of its GPUs, and MIGStarts
	// each instance's first memory slice (one per entry of GPUs, which may repeat a
	// device); Share is then what the profile counts. A start where the device has no
	// instance of the profile is one the engine chose on a dynamic device, to be created.
	MIG       string
	MIGStarts []int
	// MemoryLimit is the GPU memory a dynamic fraction may use, in bytes (0: its request,
	// Memory); the engine writes it. MemoryUsed is what the pod was measured to use (the
	// agent's reading; 0 unknown); the engine reads it: above Memory it is a burst.
	MemoryLimit int64
	MemoryUsed  int64
}

// Packing says which nodes or GPUs are filled first.
type Packing int

const (
	PackingDefault Packing = iota // as the engine's placement policy does
	PackingBinPack                // the fullest that fits
	PackingSpread                 // the emptiest
)

var packingNames = [...]string{"", "binpack", "spread"}

func (p Packing) String() string {
	if int(p) < len(packingNames) {
		return packingNames[p]
	}
	return fmt.Sprintf("Packing(%d)", int(p))
}

// ParsePacking reads "binpack" or "spread" (empty: the default).
func ParsePacking(s string) (Packing, error) {
	for i, n := range packingNames {
		if n == s {
			return Packing(i), nil
		}
	}
	return 0, fmt.Errorf("unknown packing %q: allowed values are binpack, spread", s)
}
