package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// How a pod sharing a GPU is given its device. It asks the kubelet for no nvidia.com/gpu
// (a reservation pod holds the device), so the device reaches its containers another way,
// which depends on how the node's container runtime injects NVIDIA devices.
const (
	// LabelGPUDelivery on a node says which way works there: DeliveryCDI or DeliveryEnv.
	// The agent sets it from its pool's setting or from what the GPU Operator says of the
	// node; a node without it gets no fractions, with a reason naming the setting.
	LabelGPUDelivery = "allot.dev/gpu-delivery"

	// DeliveryCDI: NVIDIA's NRI plugin (nvidia-container-toolkit 1.19 and later; the GPU
	// Operator's cdi.nriPluginEnabled, 26.3 and later) injects into each container the CDI
	// devices its annotation AnnotationNRIContainerPrefix+<container> names, under any
	// runtime, runc included. The environment is not read.
	DeliveryCDI = "cdi"
	// DeliveryEnv: the NVIDIA container runtime in legacy mode reads NVIDIA_VISIBLE_DEVICES
	// from the container's environment: the node's default runtime, or a runtime class the
	// admin names (the GPU Operator's nvidia-legacy where CDI is on, nvidia otherwise).
	DeliveryEnv = "env"

	// AnnotationNRIContainerPrefix + a container's name is the annotation NVIDIA's NRI
	// plugin reads that container's CDI devices from (a comma-separated list of CDI names);
	// AnnotationNRIPod applies to every container of the pod, init containers included.
	AnnotationNRIContainerPrefix = "nvidia.cdi.k8s.io/container."
	AnnotationNRIPod             = "nvidia.cdi.k8s.io/pod"

	// LabelCDIDeviceIDs on a node says how the NVIDIA device plugin's CDI spec names each
	// GPU there, as its DEVICE_ID_STRATEGY does: CDIIDsUUID (its default; also when the
	// label is absent) or CDIIDsIndex. The agent writes it from its pool's setting; the
	// bind names a slice's devices that way.
	LabelCDIDeviceIDs = "allot.dev/cdi-device-ids"
	CDIIDsUUID        = "uuid"
	CDIIDsIndex       = "index"

	// AnnotationCDIPrefix + a container's name is the annotation Allot's own NRI plugin
	// (kube/nriplugin, run by the agent's pod on cdi and hami-core pools) reads that container's CDI
	// devices from. The scheduler writes it in the bind for the container given a slice;
	// the chart writes it on the agent's pod for its management devices. A container's
	// name (a DNS label, at most 63 characters) always fits an annotation key's name part.
	AnnotationCDIPrefix = "cdi.allot.dev/"

	// DefaultCDIKind is the CDI kind of the devices the NVIDIA device plugin writes a spec
	// for when CDI is on (device-list-strategy cdi-cri or cdi-annotations), naming each GPU
	// by UUID; "nvidia.com/gpu" where an admin generated the spec with nvidia-ctk.
	DefaultCDIKind = "k8s.device-plugin.nvidia.com/gpu"

	// AnnotationGPUEnvPrefix starts the annotations that hold a sharing pod's device
	// environment (AnnotationGPUEnvPrefix + "NVIDIA_VISIBLE_DEVICES", …). The webhook gives
	// each container an env entry for each name of GPUEnvNames reading its annotation
	// through the downward API, last in its env so that it wins; the scheduler writes the
	// values in the bind. Unlike a ConfigMap in the tenant's namespace, the pod's
	// annotations are kept from its owner by FieldsPolicyName.
	AnnotationGPUEnvPrefix = "allot.dev/gpu-env."
)

// GPUEnvNames are the variables a sharing pod's containers get from the scheduler: the
// device, the limits in the forms MPS and HAMi-core read, and Allot's own notes.
var GPUEnvNames = []string{
	"NVIDIA_VISIBLE_DEVICES",
	"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
	"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
	"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "GPU_CORE_UTILIZATION_POLICY", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
	"ALLOT_GPU_SHARE", "ALLOT_GPU_SHARING", "ALLOT_GPU_COMPUTE",
	// Not for the process: the subdirectory of ShmDir mounted as the container's /dev/shm,
	// and the directory under the sharing root mounted at MPSClientDir (its GPU's MPS
	// directory on an mps node, the pod's own shared-memory directory elsewhere); the
	// volume mounts' subPathExpr read them.
	"ALLOT_SHM_DIR", "ALLOT_MPS_DIR",
}

// DeviceMemoryLimitEnv is HAMi-core's memory limit of the i-th device a container sees,
// which it reads beside CUDA_DEVICE_MEMORY_LIMIT (every device's).
func DeviceMemoryLimitEnv(i int) string { return "CUDA_DEVICE_MEMORY_LIMIT_" + strconv.Itoa(i) }

// GPUEnvNamesFor are the variables of a pod sharing a slice of devices GPUs: GPUEnvNames,
// and beyond one device HAMi-core's memory limit of each.
func GPUEnvNamesFor(devices int) []string {
	if devices <= 1 {
		return GPUEnvNames
	}
	out := slices.Clone(GPUEnvNames)
	for i := range min(devices, MaxGPUCount) {
		out = append(out, DeviceMemoryLimitEnv(i))
	}
	return out
}

// IsGPUEnvName tells a variable the scheduler may set for a sharing pod.
func IsGPUEnvName(name string) bool {
	if slices.Contains(GPUEnvNames, name) {
		return true
	}
	i, err := strconv.Atoi(strings.TrimPrefix(name, "CUDA_DEVICE_MEMORY_LIMIT_"))
	return strings.HasPrefix(name, "CUDA_DEVICE_MEMORY_LIMIT_") && err == nil && i >= 0 && i < MaxGPUCount && DeviceMemoryLimitEnv(i) == name
}

// GPUEnvFieldPath is the downward API path of the annotation a sharing pod's variable
// name is read from.
func GPUEnvFieldPath(name string) string {
	return "metadata.annotations['" + AnnotationGPUEnvPrefix + name + "']"
}

// OneContainerSliceSince is when the mutating webhook began giving a sharing pod's slice
// to one container alone (AnnotationGPUContainer; before, every container read it). A
// pod the API server created before it may hold that older layout and still runs as it
// was admitted; one created since must hold the current layout. A tenant cannot choose
// its pod's creationTimestamp (the API server sets it), so the older layout, which lets
// each container hold the whole slice, cannot be written on a new pod while the webhooks
// are skipped and then bound.
var OneContainerSliceSince = time.Date(2026, time.November, 26, 3, 2, 31, 0, time.UTC)

// CreatedBeforeOneContainerSlice tells whether the API server created p before
// OneContainerSliceSince: a pod that may hold the older layouts.
func CreatedBeforeOneContainerSlice(p *corev1.Pod) bool {
	return !p.CreationTimestamp.IsZero() && p.CreationTimestamp.Time.Before(OneContainerSliceSince)
}

// HasGPUEnv tells whether the container of a sharing pod given its slice reads its device
// from the scheduler's annotations, and every other container and init container is
// given none (the entries the mutating webhook appends): a pod admitted while the webhook
// was skipped has neither, and would start with no device or its image's, or would hold
// its slice in several containers.
func HasGPUEnv(p *corev1.Pod) bool {
	want := GPUEnvFieldPath("NVIDIA_VISIBLE_DEVICES")
	reads := func(c corev1.Container) (reads, void bool) {
		last := corev1.EnvVar{}
		for _, e := range c.Env {
			if e.Name == "NVIDIA_VISIBLE_DEVICES" {
				last = e
			}
		}
		return last.ValueFrom != nil && last.ValueFrom.FieldRef != nil && last.ValueFrom.FieldRef.FieldPath == want,
			last.ValueFrom == nil && last.Value == "void"
	}
	old := CreatedBeforeOneContainerSlice(p)
	given := SliceContainer(p)
	for _, c := range p.Spec.Containers {
		// The container given the slice reads its device from the pod; the others are
		// given none (their last word on it is "void", whatever their image says). A pod
		// created before one container alone was given the slice may read it in every
		// container: it runs as it was admitted.
		r, v := reads(c)
		if (c.Name == given && !r) || (c.Name != given && !v && !(old && r)) {
			return false
		}
	}
	if old {
		return true // judged as when it was admitted: its init containers were not looked at
	}
	for _, c := range p.Spec.InitContainers {
		// A sidecar (an init container that keeps running) would hold the slice beside
		// the container given it.
		if _, v := reads(c); !v {
			return false
		}
	}
	return given != ""
}

// ParseCDIDeviceIDs reads a node's LabelCDIDeviceIDs: CDIIDsUUID when absent.
func ParseCDIDeviceIDs(v string) (string, error) {
	switch v {
	case "", CDIIDsUUID:
		return CDIIDsUUID, nil
	case CDIIDsIndex:
		return CDIIDsIndex, nil
	}
	return "", fmt.Errorf("label %s: %q is not one of %s, %s (the device plugin's DEVICE_ID_STRATEGY)", LabelCDIDeviceIDs, v, CDIIDsUUID, CDIIDsIndex)
}

// CDIDeviceIDs are the names the device plugin's CDI spec gives GPUs uuids (comma-separated)
// on a node naming them by ids (ParseCDIDeviceIDs), whose GPUs by index are nodeUUIDs (its
// AnnotationGPUUUIDs).
func CDIDeviceIDs(uuids, ids, nodeUUIDs string) (string, error) {
	if ids != CDIIDsIndex {
		return uuids, nil
	}
	byUUID := map[string]int{}
	for i, u := range strings.Split(nodeUUIDs, ",") {
		if u != "" {
			byUUID[u] = i
		}
	}
	var out []string
	for _, u := range strings.Split(uuids, ",") {
		i, ok := byUUID[u]
		if !ok && strings.HasPrefix(u, "MIG-") {
			return "", fmt.Errorf("the node names its CDI devices by index (%s=%s), under which NVIDIA's device plugin gives a MIG instance made after it started no name: use deviceIDStrategy uuid on dynamic MIG pools", LabelCDIDeviceIDs, CDIIDsIndex)
		}
		if !ok {
			return "", fmt.Errorf("the node names its CDI devices by index (%s=%s) but does not list GPU %s among its GPUs (%s): is its agent running?", LabelCDIDeviceIDs, CDIIDsIndex, u, AnnotationGPUUUIDs)
		}
		out = append(out, strconv.Itoa(i))
	}
	return strings.Join(out, ","), nil
}

// Deliveries are LabelGPUDelivery's allowed values.
var Deliveries = []string{DeliveryCDI, DeliveryEnv}

// ParseDelivery reads a node's LabelGPUDelivery: "" when the node does not declare one.
func ParseDelivery(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	for _, d := range Deliveries {
		if v == d {
			return v, nil
		}
	}
	return "", fmt.Errorf("label %s: %q is not one of %s", LabelGPUDelivery, v, strings.Join(Deliveries, ", "))
}

// CDIOwnedPrefixes start the annotations that ask a container runtime or its NRI
// plugins for devices: the NRI plugin's domain, and the Container Device Interface's own
// (which containerd passes on where its pod_annotations setting lets it). Only the
// scheduler writes them, in the bind; the webhook refuses them on pods it admits and the
// API server refuses any later change (FieldsPolicyName).
var CDIOwnedPrefixes = []string{"nvidia.cdi.k8s.io", "cdi.k8s.io/", AnnotationCDIPrefix}

// CDIAnnotations are the annotations that give the containers of a sharing pod the
// devices ids (comma-separated, one or several) of kind (DefaultCDIKind when empty),
// for Allot's NRI plugin: one per container (AnnotationCDIPrefix+name), each device a fully
// qualified CDI name. There is no pod-wide form: it would give the device to every
// container of the pod, init containers included.
func CDIAnnotations(containers []string, kind, ids string) map[string]string {
	if kind == "" {
		kind = DefaultCDIKind
	}
	var devs []string
	for _, u := range strings.Split(ids, ",") {
		devs = append(devs, kind+"="+u)
	}
	dev := strings.Join(devs, ",")
	out := map[string]string{}
	for _, c := range containers {
		out[AnnotationCDIPrefix+c] = dev
	}
	return out
}

// FieldsPolicyName is the ValidatingAdmissionPolicy that keeps the labels and annotations
// Allot books by, and those that reach a container's devices, as they were admitted or
// written by Allot.
const FieldsPolicyName = "allot-pod-fields"
