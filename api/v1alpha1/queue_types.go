package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Queue is a node of the queue tree: departments over projects. Workloads name their
// queue with the label allot.dev/queue.
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=aq
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parent`
// +kubebuilder:printcolumn:name="GPU Quota",type=integer,JSONPath=`.spec.gpu.quota`
// +kubebuilder:printcolumn:name="Fair Share",type=string,JSONPath=`.status.fairShare.nvidia\.com/gpu`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.status.allocated.nvidia\.com/gpu`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Usage GPU-s",type=integer,JSONPath=`.status.usage.gpuSeconds`,priority=1
type Queue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   QueueSpec   `json:"spec,omitempty"`
	Status QueueStatus `json:"status,omitempty"`
}

// QueueSpec is what an admin sets.
type QueueSpec struct {
	// Parent is the department this queue belongs to; empty for a top-level queue.
	// +optional
	Parent string `json:"parent,omitempty"`
	// GPU is the queue's guarantee and cap in whole GPUs.
	// +optional
	GPU GPUQuota `json:"gpu,omitempty"`
	// Accelerators are the queue's guarantees and caps of other vendors' devices, in whole
	// devices, by the kind's name as the scheduler's --accelerators table has it (ascend,
	// amd, …): accelerators: {ascend: {quota: 16}}. NVIDIA's GPUs stay under gpu.
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(k) <= 63)",message="accelerators: a kind's name is lower-case letters, digits and '-', as the scheduler's --accelerators names it (ascend, amd, …)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !has(self[k].pools))",message="accelerators: quotas per node pool are for NVIDIA GPUs only, under spec.gpu.pools"
	// +optional
	Accelerators map[string]GPUQuota `json:"accelerators,omitempty"`
	// BurstPolicy is what the queue's GPU slices do when their request needs memory that
	// pods using more than their requests hold (dynamic fractions, allot.dev/gpu-memory-limit):
	// evict (the default) stops the burster furthest past its request, its burst being a
	// loan; wait leaves the request waiting until the bursters give the memory back.
	// +kubebuilder:validation:Enum=evict;wait
	// +optional
	BurstPolicy string `json:"burstPolicy,omitempty"`
	// Clusters, on a manager's Queue (docs/multicluster.md), keeps parts of gpu.quota in
	// named worker clusters: the rest of the quota follows the queue's work to whichever
	// cluster it is dispatched to.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Clusters map[string]ClusterPart `json:"clusters,omitempty"`
	// CPU and Memory are optional guarantees and caps as Kubernetes quantities.
	// +optional
	CPU *ResourceQuota `json:"cpu,omitempty"`
	// +optional
	Memory *ResourceQuota `json:"memory,omitempty"`
	// Priority orders queues when dividing what is left over quota: higher first.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// Namespaces whose workloads may submit to this queue; empty means any namespace no
	// queue claims (none names it, and it has no default queue). The admission webhook
	// refuses a pod from any other namespace.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// NodePools are the node pools the queue's workloads may use (by their label
	// allot.dev/node-pool; "default" is the nodes without one), in the order a workload
	// that names none tries them: the first, then the next (Run:ai's ordered node pools).
	// Empty means any pool, and a workload that names none runs in the default pool. The
	// admission webhook refuses a pod that names a pool not listed.
	// +optional
	NodePools PoolList `json:"nodePools,omitempty"`
	// ClassNodePools, per class of work (train, interactive, inference), are the pools that
	// class's workloads try in order when they name none, in place of nodePools: training
	// on one pool, notebooks on another. Each must be one of nodePools where that is set.
	// +kubebuilder:validation:MaxProperties=3
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['train', 'interactive', 'inference'])",message="classNodePools: a class is train, interactive or inference"
	// +optional
	ClassNodePools map[string]PoolList `json:"classNodePools,omitempty"`
	// Class, when set, is the class of every workload of this queue (train, interactive or
	// inference): the webhook gives it to pods that name none and refuses pods that name
	// another, so that the queue's interactive time limit and idle timeout reach every
	// workload it runs, whatever its owner labels it (a notebook run as a Deployment
	// labelled train included).
	// +kubebuilder:validation:Enum=train;interactive;inference
	// +optional
	Class string `json:"class,omitempty"`
	// Spot is the queue's spot policy, the default of its workloads (a pod's annotations
	// allot.dev/spot, on-demand-after and interruption-budget override it, except that a
	// queue whose policy is never keeps its work off spot capacity).
	// +optional
	Spot *SpotSpec `json:"spot,omitempty"`
	// Growth says whether the scheduler may raise the count of this queue's elastic
	// workloads (an elastic indexed Job, a PyTorchJob with an elasticPolicy) as their
	// members fit: allowed (the default) or never (they run at the count they ask; their
	// members beyond the minimum are still taken back first, by lowering the count).
	// +kubebuilder:validation:Enum=allowed;never
	// +optional
	Growth string `json:"growth,omitempty"`
	// HostPaths, when set, is the queue's rule for its pods' hostPath volumes (allot submit
	// -v): a path of the node may be mounted only under one of the allowed directories, and
	// none when it lists none. The admission webhook refuses any other pod of the queue,
	// naming the volume. Unset, the cluster's own policy (PodSecurity) decides.
	// +optional
	HostPaths *HostPathPolicy `json:"hostPaths,omitempty"`
	// InteractiveTimeLimit stops interactive workloads that ran this long: a Go duration
	// such as 30m or 4h (checked here, so that a Queue the scheduler cannot read is
	// refused by the API server rather than ignored).
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="interactiveTimeLimit must be a positive duration such as 30m, 4h or 1h30m"
	// +optional
	InteractiveTimeLimit *metav1.Duration `json:"interactiveTimeLimit,omitempty"`
	// IdleTimeout returns the GPUs of workloads that hold them without using them: a
	// workload of a class named here whose GPUs all stayed under IdleThreshold for this long
	// is stopped (interactive ones suspended, inference ones scaled to zero) and waits for
	// allot resume. A class left out is never stopped for being idle.
	// +optional
	IdleTimeout *IdleTimeout `json:"idleTimeout,omitempty"`
	// IdleThreshold is the GPU utilisation, in percent from 1 to 100, under which a GPU
	// counts as idle for IdleTimeout; unset, 5.
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 100",message="idleThreshold must be a percentage of GPU utilisation from 1 to 100 (unset: 5)"
	// +optional
	IdleThreshold *int32 `json:"idleThreshold,omitempty"`
	// GangStaleGracePeriod is how long a gang of this queue may run with fewer than its
	// minimum of pods before the rest are stopped so that it starts again whole (a Go
	// duration such as 60s); a PodGroup's staleGracePeriod overrides it. Unset, the
	// parent's applies, else the scheduler's --gang-grace.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="gangStaleGracePeriod must be a duration such as 60s or 5m"
	// +optional
	GangStaleGracePeriod *metav1.Duration `json:"gangStaleGracePeriod,omitempty"`
	// ReclaimMinRuntime keeps a job of this queue from being reclaimed by another queue
	// until it has run this long (a Go duration such as 10m); unset, the parent's applies.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="reclaimMinRuntime must be a duration such as 10m or 1h30m"
	// +optional
	ReclaimMinRuntime *metav1.Duration `json:"reclaimMinRuntime,omitempty"`
	// PreemptMinRuntime keeps a job of this queue from being preempted by a job of higher
	// priority in the same queue until it has run this long; unset, the parent's applies.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="preemptMinRuntime must be a duration such as 10m or 1h30m"
	// +optional
	PreemptMinRuntime *metav1.Duration `json:"preemptMinRuntime,omitempty"`
}

// IdleTimeout is, per class of workload, how long its GPUs may stay idle: Go durations
// such as 30m or 2h.
type IdleTimeout struct {
	// Interactive workloads (notebooks) are suspended after this long idle.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="idleTimeout.interactive must be a duration of at least 1s, such as 30m, 2h or 1h30m"
	// +optional
	Interactive *metav1.Duration `json:"interactive,omitempty"`
	// Inference workloads (Deployments, StatefulSets) are scaled to zero after this long
	// idle.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="idleTimeout.inference must be a duration of at least 1s, such as 30m, 2h or 1h30m"
	// +optional
	Inference *metav1.Duration `json:"inference,omitempty"`
}

// DefaultIdleThreshold is the utilisation, in percent, under which a GPU counts as idle
// when a Queue sets no idleThreshold.
const DefaultIdleThreshold = 5

// GPUQuota is a queue's guarantee, over-quota weight and cap of whole devices: NVIDIA's
// GPUs under gpu, another kind's under accelerators.
// +kubebuilder:validation:XValidation:rule="!has(self.limit) || self.limit >= (has(self.quota) ? self.quota : 0)",message="limit must be at least quota"
type GPUQuota struct {
	// Quota is the number of devices guaranteed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Quota int32 `json:"quota"`
	// OverQuotaWeight divides idle devices among queues that want more; default: the quota.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OverQuotaWeight *int32 `json:"overQuotaWeight,omitempty"`
	// Limit caps the devices the queue may hold; absent means no cap.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Limit *int32 `json:"limit,omitempty"`
	// Pools gives the queue a quota of its own in node pools whose GPUs are divided apart
	// (Run:ai's quota per node pool): pools: {h100: {quota: 4}, a100: {quota: 8}}. A pool
	// that any queue names here is divided on its own: each queue is guaranteed, borrows
	// and is reclaimed from there by its quota of that pool (0 where it names none), and
	// quota, overQuotaWeight and limit above count the GPUs of the other pools.
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$') && size(k) <= 63 && k != 'default')",message="pools: a pool's name is the value of its nodes' label allot.dev/node-pool (letters, digits, '-', '_' and '.', at most 63); the default pool's quota is gpu.quota itself"
	// +optional
	Pools map[string]PoolQuota `json:"pools,omitempty"`
}

// SpotSpec is which capacity a queue's work may use: spot nodes (which their cloud may
// take back with notice, labelled so by the cloud or allot.dev/capacity-type) and
// on-demand ones.
type SpotSpec struct {
	// Policy: allowed (the default: either), never (on-demand only), or first (spot only,
	// until onDemandAfter has passed since a workload's submission).
	// +kubebuilder:validation:Enum=allowed;never;first
	// +optional
	Policy string `json:"policy,omitempty"`
	// OnDemandAfter, with policy first, is how long a workload waits for spot capacity
	// before it may use on-demand capacity too (a Go duration such as 10m); unset, it
	// waits for spot capacity alone.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) > duration('0s')",message="spot.onDemandAfter must be a positive duration such as 10m"
	// +optional
	OnDemandAfter *metav1.Duration `json:"onDemandAfter,omitempty"`
	// InterruptionBudget is how many interruptions of spot capacity a workload survives;
	// past it, it runs on on-demand capacity only. Unset: no budget.
	// +kubebuilder:validation:Minimum=0
	// +optional
	InterruptionBudget *int32 `json:"interruptionBudget,omitempty"`
}

// PoolList names node pools in order, by the value of their nodes' label
// allot.dev/node-pool ("default": the nodes without one).
// +kubebuilder:validation:MaxItems=16
// +kubebuilder:validation:items:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$`
// +kubebuilder:validation:items:MaxLength=63
type PoolList []string

// PoolQuota is a queue's guarantee, over-quota weight and cap of one node pool's GPUs.
// +kubebuilder:validation:XValidation:rule="!has(self.limit) || self.limit >= (has(self.quota) ? self.quota : 0)",message="limit must be at least quota"
type PoolQuota struct {
	// Quota is the number of the pool's GPUs guaranteed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Quota int32 `json:"quota"`
	// OverQuotaWeight divides the pool's idle GPUs among queues that want more; default:
	// the quota.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OverQuotaWeight *int32 `json:"overQuotaWeight,omitempty"`
	// Limit caps the pool's GPUs the queue may hold; absent means no cap.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Limit *int32 `json:"limit,omitempty"`
}

// ResourceQuota is a CPU or memory guarantee and cap.
type ResourceQuota struct {
	// +optional
	Quota *resource.Quantity `json:"quota,omitempty"`
	// +optional
	Limit *resource.Quantity `json:"limit,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	OverQuotaWeight *int32 `json:"overQuotaWeight,omitempty"`
}

// QueueStatus is the scheduler's accounting of the queue, keyed nvidia.com/gpu, cpu,
// memory, for another kind of accelerator the first resource of its kind
// (huawei.com/Ascend910 for ascend), and for the GPUs of a node pool divided apart
// pool.allot.dev/<pool> (nvidia.com/gpu then counts the other pools').
type QueueStatus struct {
	// +optional
	FairShare corev1.ResourceList `json:"fairShare,omitempty"`
	// +optional
	Allocated corev1.ResourceList `json:"allocated,omitempty"`
	// +optional
	AllocatedNonPreemptible corev1.ResourceList `json:"allocatedNonPreemptible,omitempty"`
	// +optional
	Requested corev1.ResourceList `json:"requested,omitempty"`
	// +optional
	Running int32 `json:"running,omitempty"`
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// Usage is the queue's past use of GPUs above its quota, kept here so that it
	// survives a restart of the scheduler; with the scheduler's --usage-strength above 0
	// it lowers the queue's part of idle GPUs.
	// +optional
	Usage *QueueUsage `json:"usage,omitempty"`
}

// QueueUsage is decayed GPU-seconds above quota: every second of one GPU held beyond the
// quota counts one, halved for each --usage-half-life since.
type QueueUsage struct {
	// GPUSeconds is the decayed use as of LastUpdated.
	// +kubebuilder:validation:Minimum=0
	GPUSeconds int64 `json:"gpuSeconds"`
	// LastUpdated is when GPUSeconds was worked out.
	LastUpdated metav1.Time `json:"lastUpdated"`
}

// QueueList is a list of queues.
// +kubebuilder:object:root=true
type QueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Queue `json:"items"`
}

// HostPathPolicy is a queue's rule for hostPath volumes.
type HostPathPolicy struct {
	// Allowed are the node's directories under which the queue's pods may mount paths
	// (absolute; "/data" allows "/data" and "/data/imagenet", not "/database").
	// +kubebuilder:validation:items:Pattern=`^/`
	// +optional
	Allowed []string `json:"allowed,omitempty"`
}
