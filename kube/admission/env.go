package admission

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A pod that shares a GPU is given its device and its limits by Allot, and a pod that asks
// for no GPU is given none. Both would reach more than that if the pod could set what the
// NVIDIA container runtime, the CUDA driver, an MPS client or HAMi-core read: the runtime
// (where it accepts the variable from unprivileged pods) gives a container every device
// named in NVIDIA_VISIBLE_DEVICES, a pod's own env beats an envFrom source, MPS clients and
// HAMi-core take their limits from the process environment, and LD_PRELOAD='' unloads a
// preloaded limiter. So the webhook refuses such pods that set any of these themselves, in
// any container, init container or ephemeral container, by name or through an envFrom
// source the tenant can rewrite after admission.

// guardedExact are refused by name.
var guardedExact = []string{
	"NVIDIA_VISIBLE_DEVICES",                                  // the NVIDIA runtime's device list
	"CUDA_VISIBLE_DEVICES",                                    // the CUDA driver's
	"LD_PRELOAD",                                              // unloads or replaces HAMi-core
	"NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", // MIG management rights
	"GPU_CORE_UTILIZATION_POLICY", // HAMi-core: "disable" lifts the SM limit
	"CUDA_OVERSUBSCRIBE",          // HAMi-core: memory beyond the limit, spilled to the host
	"CUDA_DISABLE_CONTROL",        // HAMi-core: turns its limits off
	"ALLOT_SHM_DIR",               // which shared-memory directory is the container's /dev/shm
	"ALLOT_MPS_DIR",               // which GPU's MPS daemon the container reaches
}

// guardedPrefixes are refused as families: MPS client settings (thread percentage, pinned
// memory, pipe directory) and HAMi-core's limits (CUDA_DEVICE_MEMORY_LIMIT[_n],
// CUDA_DEVICE_SM_LIMIT, CUDA_DEVICE_MEMORY_SHARED_CACHE).
var guardedPrefixes = []string{"CUDA_MPS_", "CUDA_DEVICE_"}

// guardedAllowed are the CUDA runtime's own CUDA_DEVICE_* settings, which order or tune the
// devices a process already has and reach nothing beyond them (Megatron sets the first).
var guardedAllowed = []string{"CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_DEVICE_ORDER"}

// capabilitiesNeeded are the NVIDIA driver capabilities a sharing pod may ask for: compute
// (CUDA) and utility (nvidia-smi, NVML). graphics, video, display and "all" mount more of
// the driver than a share of compute needs.
var capabilitiesNeeded = []string{"compute", "utility"}

// guarded tells whether a variable name is one a sharing or GPU-less pod may not set.
func guarded(name string) bool {
	if slices.Contains(guardedAllowed, name) {
		return false
	}
	if slices.Contains(guardedExact, name) {
		return true
	}
	for _, p := range guardedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// prefixSafe tells whether every name an envFrom source with this prefix can produce is
// outside the guarded ones, whatever keys the source holds: the prefix must not start a
// guarded name, nor be completed into one by a key.
func prefixSafe(prefix string) bool {
	return prefixAvoids(prefix, append(slices.Clone(guardedExact), append(guardedPrefixes, "NVIDIA_DRIVER_CAPABILITIES")...))
}

// prefixAvoids tells whether no name an envFrom source with this prefix can produce starts
// with one of names (exact names, or families by their prefix).
func prefixAvoids(prefix string, names []string) bool {
	if prefix == "" {
		return false
	}
	for _, g := range names {
		if strings.HasPrefix(g, prefix) || strings.HasPrefix(prefix, g) {
			return false
		}
	}
	return true
}

// wholeGPUGuarded are the variables by which the NVIDIA runtime, where it reads the
// environment, would give a container other devices than the device plugin's: the device
// list, and MIG management rights.
var wholeGPUGuarded = []string{"NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"}

// checkWholeGPUEnv refuses, in a pod given whole GPUs by the device plugin, the variables
// by which the NVIDIA runtime would give a container other devices than those, set by name
// or through an envFrom source the tenant can rewrite (a ConfigMap or Secret of its own,
// whose keys become variables): the pod's own value comes after the plugin's, and wins
// where the runtime reads the variable.
func checkWholeGPUEnv(p *corev1.Pod) error {
	for _, list := range []struct {
		kind string
		cs   []corev1.Container
	}{{"initContainers", p.Spec.InitContainers}, {"containers", p.Spec.Containers}} {
		for _, c := range list.cs {
			for _, e := range c.Env {
				if e.Name == "NVIDIA_VISIBLE_DEVICES" && !(e.Value == noDevice.Value && e.ValueFrom == nil) ||
					e.Name == "NVIDIA_MIG_CONFIG_DEVICES" || e.Name == "NVIDIA_MIG_MONITOR_DEVICES" {
					return fmt.Errorf("%s[%s].env: %s may not be set: the device plugin gives the pod its GPUs (remove the variable)", list.kind, c.Name, e.Name)
				}
			}
			for _, src := range c.EnvFrom {
				if prefixAvoids(src.Prefix, wholeGPUGuarded) {
					continue
				}
				kind, name := envFromSource(src)
				return fmt.Errorf("%s[%s].envFrom %s %q: a pod given whole GPUs may not take its whole environment from a source it can rewrite (it could hold %s): set a prefix such as APP_, or name each key with env[].valueFrom",
					list.kind, c.Name, kind, name, strings.Join(wholeGPUGuarded, ", "))
			}
		}
	}
	return nil
}

// envFromSource names an envFrom source: its kind and name.
func envFromSource(src corev1.EnvFromSource) (kind, name string) {
	if src.SecretRef != nil {
		return "secretRef", src.SecretRef.Name
	}
	if src.ConfigMapRef != nil {
		return "configMapRef", src.ConfigMapRef.Name
	}
	return "source", ""
}

// guardsEnv tells whether a pod's environment is checked: it shares a GPU, or asks for
// none (it gets no device, and must not take one).
func guardsEnv(p *corev1.Pod, share v1alpha1.GPUShare) bool {
	return share.Shared() || v1alpha1.WholeGPUs(p) == 0
}

// checkEnv refuses a sharing or GPU-less pod that sets a guarded variable, naming it and
// where it is set.
func checkEnv(p *corev1.Pod) error {
	type named struct {
		kind string
		c    *corev1.Container
	}
	var all []named
	for i := range p.Spec.InitContainers {
		all = append(all, named{"initContainers", &p.Spec.InitContainers[i]})
	}
	for i := range p.Spec.Containers {
		all = append(all, named{"containers", &p.Spec.Containers[i]})
	}
	for i := range p.Spec.EphemeralContainers {
		c := corev1.Container(p.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		all = append(all, named{"ephemeralContainers", &c})
	}
	given := "" // a pod given no slice reads none
	if sharesGPU(p) {
		given = v1alpha1.SliceContainer(p)
	}
	for _, n := range all {
		where := fmt.Sprintf("%s[%s]", n.kind, n.c.Name)
		for _, e := range n.c.Env {
			// The mutating webhook's own, read from annotations only Allot writes: in the
			// container given the slice only. Elsewhere (written by the pod's owner while
			// the mutating webhook was skipped) each container would hold the whole slice.
			if n.kind == "containers" && n.c.Name == given && isGPUEnv(e) {
				continue
			}
			// Every container of a sharing pod reads which /dev/shm and which MPS
			// directory it mounts: directory names, no device and no limit.
			if n.kind == "containers" && given != "" && (e.Name == shmDirEnv || e.Name == mpsDirEnv) && isGPUEnv(e) {
				continue
			}
			if e.Name == noDevice.Name && e.Value == noDevice.Value && e.ValueFrom == nil {
				continue // no device: narrows, never widens
			}
			if guarded(e.Name) {
				return fmt.Errorf("%s.env: %s may not be set by a pod %s: Allot sets the device and the limits itself (remove the variable)",
					where, e.Name, guardedWhy(p))
			}
			if e.Name == "NVIDIA_DRIVER_CAPABILITIES" && !capabilitiesOK(e) {
				return fmt.Errorf("%s.env: NVIDIA_DRIVER_CAPABILITIES %q is not allowed for a pod %s: %s or a part of it",
					where, e.Value, guardedWhy(p), strings.Join(capabilitiesNeeded, ","))
			}
		}
		for _, src := range n.c.EnvFrom {
			if prefixSafe(src.Prefix) {
				continue
			}
			kind, name := envFromSource(src)
			return fmt.Errorf("%s.envFrom %s %q: a pod %s may not take its whole environment from a source it can rewrite after admission (it could hold %s): set a prefix such as APP_, or name each key with env[].valueFrom",
				where, kind, name, guardedWhy(p), strings.Join(guardedExact[:3], ", "))
		}
	}
	return nil
}

// capabilitiesOK: a literal list within what a sharing pod needs.
func capabilitiesOK(e corev1.EnvVar) bool {
	if e.ValueFrom != nil {
		return false // its value could change after admission
	}
	for _, c := range strings.Split(e.Value, ",") {
		if c = strings.TrimSpace(c); c != "" && !slices.Contains(capabilitiesNeeded, c) {
			return false
		}
	}
	return true
}

func guardedWhy(p *corev1.Pod) string {
	if share, _ := v1alpha1.ParseGPUShare(p.Annotations); share.Shared() {
		return "sharing a GPU"
	}
	return "that asks for no GPU"
}

// checkOwnedAnnotations refuses a pod created with what only Allot writes: the device
// environment the scheduler hands a sharing pod, and CDI device requests, which the
// container runtime obeys.
func checkOwnedAnnotations(p *corev1.Pod) error {
	for k := range p.Annotations {
		if strings.HasPrefix(k, v1alpha1.AnnotationGPUEnvPrefix) || slices.Contains(writtenByAllot, k) ||
			slices.ContainsFunc(v1alpha1.CDIOwnedPrefixes, func(pre string) bool { return strings.HasPrefix(k, pre) }) {
			return fmt.Errorf("metadata.annotations: %s is written by Allot when it places the pod, not by its owner (remove it)", k)
		}
	}
	if _, ok := p.Labels[v1alpha1.LabelReservation]; ok {
		return fmt.Errorf("metadata.labels: %s marks the scheduler's own reservation pods in %s, not a workload's (remove it)",
			v1alpha1.LabelReservation, v1alpha1.SystemNamespace)
	}
	return nil
}

// writtenByAllot are the annotations the scheduler and the agents write on a placed pod,
// which the scheduler books by: a pod created with them would be booked where it said.
var writtenByAllot = []string{v1alpha1.AnnotationGPUs, v1alpha1.AnnotationGPUShare, v1alpha1.AnnotationGPUDevices,
	v1alpha1.AnnotationLeader, v1alpha1.AnnotationConfigMap, v1alpha1.AnnotationGPUShareMemory, v1alpha1.AnnotationGPUShareCompute,
	v1alpha1.AnnotationMIGInstances, v1alpha1.AnnotationPodGPUMemoryUsed}
