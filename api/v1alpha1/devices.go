package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strings"
)

// What the per-node agent (allot agent) writes, read by the scheduler, the CLI and the
// dashboard. A node without AnnotationAgent has no agent: Allot then knows its devices
// only from GPU Feature Discovery's labels and places by index, as before.
const (
	// AnnotationAgent on a node is the version of the agent reporting its devices. Its
	// presence tells the scheduler to wait for a reservation's reported device before
	// binding the fractions that share it.
	AnnotationAgent = "allot.dev/agent"
	// AnnotationGPUInventory is the node's devices as NVML reads them (JSON, []GPUInfo).
	AnnotationGPUInventory = "allot.dev/gpu-inventory"
	// AnnotationGPUMemoryUsed is each device's used memory in MiB, by index, comma-separated.
	AnnotationGPUMemoryUsed = "allot.dev/gpu-memory-used"
	// AnnotationGPUUnhealthy lists the node's failed devices (JSON, []UnhealthyGPU).
	AnnotationGPUUnhealthy = "allot.dev/gpu-unhealthy"
	// AnnotationGPUDevices on a pod is the devices the kubelet gave its containers, as the
	// agent read them from the kubelet's PodResources API (UUIDs, comma-separated). The
	// scheduler's books follow it rather than the index it chose.
	AnnotationGPUDevices = "allot.dev/gpu-devices"
	// AnnotationPodGPUMemoryUsed on a pod sharing one GPU (a slice, not a MIG instance) is
	// the GPU memory its processes hold, in MiB, as the agent of the pod's node last
	// measured it: NVML's processes of each device, each told apart by its cgroup. The
	// scheduler reads it as what a pod with a memory limit past its request uses beyond
	// it (a burst no other request may count on). The agent writes it, and only it: it
	// writes again once the use moved by 64 MiB or 5%, and 0 once when the use ends. A
	// tenant who wrote it could make a burster look idle, so the pod-fields policy
	// (FieldsPolicyName) must let only the agents change it, and the admission webhook
	// refuse a pod created with it, as they do for AnnotationGPUDevices.
	// (AnnotationGPUMemoryUsed is the node's per-device reading, on the agent's Lease.)
	AnnotationPodGPUMemoryUsed = "allot.dev/gpu-memory-used-mib"
	// LabelGPUSharing on a node says how GPU sharing is enforced there: SharingMPS,
	// SharingHAMiCore or SharingNone.
	LabelGPUSharing = "allot.dev/gpu-sharing"
	// LabelSimulated marks a node of allot up's simulated cluster, whose kubelet writes
	// its GPUs' readings on the Node itself. Only the embedded cluster (kube/stack's Local
	// functions) believes them there; a real cluster's scheduler never reads it.
	LabelSimulated = "allot.dev/simulated"
	// LabelFractionsOnTrust ("true") on a node that enforces no sharing (LabelGPUSharing
	// none, or none declared) says its admin lets pods take slices of its GPUs on trust:
	// nothing holds a container there to its slice. Without it such a node takes no slice.
	// The node's agent writes it from its pool's setting (--fractions-on-trust).
	LabelFractionsOnTrust = "allot.dev/gpu-fractions-on-trust"
)

// Unenforced says why a node's GPUs take no slice: it enforces no sharing and its admin
// has not said fractions there are on trust. Empty where slices are held to their share
// (mps, hami-core) or taken on trust.
func Unenforced(labels map[string]string) string {
	sharing, _ := ParseSharing(labels[LabelGPUSharing])
	if sharing == SharingMPS || sharing == SharingHAMiCore || labels[LabelFractionsOnTrust] == "true" {
		return ""
	}
	declared := "declares no GPU sharing (no label " + LabelGPUSharing + ")"
	if sharing == SharingNone {
		declared = "enforces no GPU sharing (" + LabelGPUSharing + "=none)"
	}
	return "the node " + declared + ", so nothing would hold a slice to its share, and its admin has not said slices there are on trust (label " +
		LabelFractionsOnTrust + "=true, the chart's agent.pools[].fractionsOnTrust; or a pool sharing with mps or hami-core)"
}

// AgentLeaseName is the Lease in SystemNamespace a node's agent renews while it runs
// (labelled LabelAgentLease with the node's name): the scheduler trusts the agent's
// reports on the node only while it is fresh.
func AgentLeaseName(node string) string { return "allot-agent-" + node }

// LabelAgentLease on an agent's Lease names its node.
const LabelAgentLease = "allot.dev/agent-node"

// The values of LabelGPUSharing.
const (
	SharingMPS      = "mps"       // NVIDIA MPS: the agent runs a control daemon per shared GPU
	SharingHAMiCore = "hami-core" // HAMi-core's library, preloaded into sharing containers
	SharingNone     = "none"      // pods may share, nothing holds them to their share
)

// SharingNotEnforced is what people are told of a node whose sharing is SharingNone: on
// the node's listing, and in the Event of each pod that shares a GPU there.
const SharingNotEnforced = "GPU sharing is not enforced here (allot.dev/gpu-sharing=none): pods sharing a GPU are not held to their memory or compute share, on trust (allot.dev/gpu-fractions-on-trust)"

// SharingOnTrust is what a hami-core node tells people: HAMi-core holds a process that
// cooperates, not one that means to get past it.
const SharingOnTrust = "GPU sharing here holds cooperative processes only (allot.dev/gpu-sharing=hami-core): HAMi-core is preloaded by glibc's loader and reads its limits from the process's environment, which a statically linked or musl program, dlmopen, or an entrypoint that unsets the limits gets past"

// MPSDir is where, under the sharing root (the host directory the agent shares with
// sharing pods), the MPS control daemon of one GPU keeps its pipes ("pipe") and logs
// ("log"): the agent starts the daemon there, the scheduler points sharing pods at it.
func MPSDir(root, uuid string) string { return root + "/mps/" + uuid }

// MPSClientDir is where a sharing container sees its GPU's MPS directory (MPSDir on the
// host: the daemon's pipes and logs). The webhook mounts there, read-only, the directory
// the bind names in ALLOT_MPS_DIR, and nothing else of the sharing root's mps: a pod
// reaches its own GPU's daemon, not another GPU's.
func MPSClientDir(root string) string { return root + "/mps-client" }

// MPSSubDir is MPSDir relative to the sharing root (ALLOT_MPS_DIR on an mps node).
func MPSSubDir(uuid string) string { return "mps/" + uuid }

// ShmDir is, under the sharing root, the directory whose subdirectories are sharing
// containers' /dev/shm (the webhook mounts one, named by the ALLOT_SHM_DIR the scheduler
// writes in the bind): on an MPS node the one the node's control daemons also have as
// their /dev/shm (ShmMPS), for the POSIX shared memory by which an MPS server and its
// clients talk; elsewhere one of the pod's own (ShmPodDir), shared with no one. The agent
// keeps it world-writable with the sticky bit, as /dev/shm is, and the kubelet makes each
// subdirectory with its mode.
func ShmDir(root string) string { return root + "/shm" }

// ShmMPS is the subdirectory of ShmDir the MPS daemons of a node and all their clients share.
const ShmMPS = "mps"

// ShmPodDir is the subdirectory of ShmDir that is the /dev/shm of the pod of this UID alone.
func ShmPodDir(uid string) string { return "pod-" + uid }

// HAMiCoreLibrary is where, under the sharing root, the agent puts HAMi-core's library for
// sharing pods to preload.
func HAMiCoreLibrary(root string) string { return root + "/hami-core/libvgpu.so" }

// PreloadListPath is, under the sharing root, the list of libraries the dynamic loader of
// every sharing container preloads (mounted read-only as its /etc/ld.so.preload): HAMi-core's
// library where the node enforces with it, nothing elsewhere. The agent writes it.
const PreloadListPath = "hami-core/ld.so.preload"

// HAMiLockDir is HAMi-core's node-wide lock directory, on the host and in each sharing
// container alike (HAMi's own layout): processes of different containers take its lock in
// turn while each finds its host PID among the driver's processes, by which HAMi-core
// counts what they hold. A private one per container lets two containers starting at once
// take each other's PID.
const HAMiLockDir = "/tmp/vgpulock"

// HAMiCacheFile is where a sharing container on a hami-core node keeps HAMi-core's cache
// of its processes and their use (CUDA_DEVICE_MEMORY_SHARED_CACHE): under the pod's own
// /dev/shm, which is writable where the image's root filesystem is read-only (HAMi-core's
// default, /tmp, is not there).
const HAMiCacheFile = "/dev/shm/allot-vgpu.cache"

// SharingModes are LabelGPUSharing's allowed values.
var SharingModes = []string{SharingMPS, SharingHAMiCore, SharingNone}

// ParseSharing reads a node's LabelGPUSharing: "" when the node does not declare one.
func ParseSharing(v string) (string, error) {
	for _, m := range SharingModes {
		if v == m {
			return v, nil
		}
	}
	if v == "" {
		return "", nil
	}
	return "", fmt.Errorf("label %s: %q is not one of %s", LabelGPUSharing, v, strings.Join(SharingModes, ", "))
}

// GPUInfo is one device of a node as its agent reads it through NVML.
type GPUInfo struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	// ReservedMiB is what of MemoryMiB the driver keeps for itself (NVML's second memory
	// query): no process can have it, so slices are booked of MemoryMiB less this (616 MiB
	// of an H200's 143771, seen in docs/gpu-nodes.md).
	ReservedMiB int64 `json:"reservedMiB,omitempty"`
	// MIG is true when the device is split into MIG instances; MIGDevices are their UUIDs
	// ("MIG-…"), which the device plugin names them by, each a part of this device.
	MIG        bool     `json:"mig,omitempty"`
	MIGDevices []string `json:"migDevices,omitempty"`
	// MIGInstances are the device's MIG instances by placement, so that the scheduler knows
	// which slices are taken, by what profile, and which instances a pod could have as they
	// are (idle) without the GPU being cut anew.
	MIGInstances []MIGInstance `json:"migInstances,omitempty"`
	// NUMA is the host NUMA node the device is attached to; -1 when NVML does not say.
	NUMA int `json:"numa"`
	// NVLink numbers the device's NVLink group: devices with the same number reach each
	// other over NVLink (directly or through NVSwitch). Numbered from 0 by lowest index.
	NVLink int `json:"nvlink"`
}

// MIGInstance is one MIG instance of a device: a GPU instance and the compute instance that
// takes the whole of it, which together are the MIG device the device plugin hands out.
type MIGInstance struct {
	// Profile is the GPU instance profile as the mig package and the device plugin name it
	// ("3g.40gb"); a media-extension instance is named by its base geometry.
	Profile string `json:"profile"`
	// Start is the first memory slice the instance occupies.
	Start int `json:"start"`
	// UUID is the MIG device's ("MIG-…"); empty while the GPU instance has no compute
	// instance, and so no MIG device, yet.
	UUID string `json:"uuid,omitempty"`
	// InUse is true when NVML lists compute processes on the instance, or cannot say
	// whether it does: such an instance is not offered as free.
	InUse bool `json:"inUse,omitempty"`
}

// UnhealthyGPU is a device the agent found failed, and why.
type UnhealthyGPU struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid"`
	Reason string `json:"reason"`
	Since  string `json:"since,omitempty"` // RFC 3339
}

// ParseInventory reads AnnotationGPUInventory; nil for none.
func ParseInventory(v string) ([]GPUInfo, error) {
	if v == "" {
		return nil, nil
	}
	var out []GPUInfo
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationGPUInventory, err)
	}
	return out, nil
}

// ParseUnhealthy reads AnnotationGPUUnhealthy; nil for none.
func ParseUnhealthy(v string) ([]UnhealthyGPU, error) {
	if v == "" {
		return nil, nil
	}
	var out []UnhealthyGPU
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationGPUUnhealthy, err)
	}
	return out, nil
}

// Islands groups a node's devices for multi-GPU pods: devices share an island when they
// share an NVLink group and a NUMA node. NVLink counts first (it carries the pod's
// collective traffic); within one NVLink domain (an NVSwitch system links all eight) the
// NUMA node decides, so a pod's processes stay near their host memory. Numbered from 0 by
// lowest index; nil when the inventory does not cover count devices.
func Islands(inv []GPUInfo, count int) []int {
	if len(inv) < count || count == 0 {
		return nil
	}
	type key struct{ nvlink, numa int }
	ids := map[key]int{}
	out := make([]int, count)
	for g := 0; g < count; g++ {
		if inv[g].Index != g {
			return nil // not the agent's order: trust none of it
		}
		k := key{inv[g].NVLink, inv[g].NUMA}
		id, ok := ids[k]
		if !ok {
			id = len(ids)
			ids[k] = id
		}
		out[g] = id
	}
	return out
}
