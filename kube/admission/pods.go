package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/workload"
)

// Workload is what the mutating webhook learns from a pod's owners.
type Workload struct {
	Kind, Name string            // the top owner Allot knows, e.g. Job train-1; empty for a bare pod
	Labels     map[string]string // merged, nearest owner first
	Object     *unstructured.Unstructured
	// APIVersion is the top owner's.
	APIVersion string
	// Chain are the owners from the pod's controller up to the top one, nearest first.
	Chain []Owner
}

// Owner is one controller in a pod's chain of owners.
type Owner struct {
	APIVersion, Kind, Name string
	// Object is the owner as read; nil when it could not be read (not yet there, or not
	// readable): the pod is then grouped by the reference alone.
	Object *unstructured.Unstructured
}

// Owners walks a pod's controller references up through the kinds Allot knows.
type Owners func(ctx context.Context, p *corev1.Pod) Workload

// DynamicOwners reads owners with a dynamic client.
func DynamicOwners(dyn dynamic.Interface) Owners {
	return func(ctx context.Context, p *corev1.Pod) Workload {
		w := Workload{Labels: map[string]string{}}
		refs := p.OwnerReferences
		for range workload.MaxOwners {
			ref := metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: refs})
			if ref == nil {
				break
			}
			gvr, _, ok := workload.KindOf(ref.APIVersion, ref.Kind)
			if !ok {
				break
			}
			o, err := dyn.Resource(gvr).Namespace(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err == nil && o.GetUID() != ref.UID {
				err = fmt.Errorf("%s %s was made again", ref.Kind, ref.Name) // not the owner referred to
			}
			w.Kind, w.Name, w.APIVersion = ref.Kind, ref.Name, ref.APIVersion
			if err != nil {
				// Not readable (yet): group by the reference alone.
				w.Object = nil
				w.Chain = append(w.Chain, Owner{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name})
				break
			}
			w.Object = o
			w.Chain = append(w.Chain, Owner{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, Object: o})
			for k, v := range o.GetLabels() {
				if _, set := w.Labels[k]; !set {
					w.Labels[k] = v
				}
			}
			refs = o.GetOwnerReferences()
		}
		return w
	}
}

// Mutator fills in what a pod scheduled by Allot leaves out: its queue (from the pod, its
// owners, else its namespace's default), its class (Deployments, StatefulSets,
// LeaderWorkerSets, Knative Services and InferenceServices serve inference, batch and
// training jobs train; gangs.go), its gang (all pods of a Job, JobSet, Kubeflow job or
// RayCluster, a TrainJob's nodes, one group of a LeaderWorkerSet), and for a pod sharing a GPU an envFrom reference to the ConfigMap the
// scheduler fills with its device and limits before binding.
type Mutator struct {
	View   View
	Owners Owners
	// SharingRoot, when set, is the host directory the nodes' agents share with pods
	// sharing a GPU (MPS pipes, HAMi-core's library): it is mounted into them at the same
	// path. Set where some node enforces sharing with mps or hami-core; left empty, no
	// hostPath is added (PodSecurity's baseline refuses hostPath volumes).
	SharingRoot string
	// RuntimeClass, when set, is given to sharing pods that name none: the runtime class
	// under which the NVIDIA runtime reads NVIDIA_VISIBLE_DEVICES on nodes whose delivery
	// is env and whose default runtime is not NVIDIA's.
	RuntimeClass string
	// Peers says which other schedulers' pods it takes over, and HAMi's default device
	// memory (peers.go).
	Peers Peers
}

// sharingVolume is the name of the mounted SharingRoot in a sharing pod.
const sharingVolume = "allot-gpu-sharing"

// shmVolume is the name of the directory under it whose subdirectories are /dev/shm.
const shmVolume = "allot-gpu-shm"

// lockVolume is the name of HAMi-core's node-wide lock directory (v1alpha1.HAMiLockDir).
const lockVolume = "allot-hami-lock"

// Handle implements admission.Handler.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	p, err := decodePod(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if req.SubResource == "" {
		// HAMi's and KAI-Scheduler's names become Allot's, once, before anything reads them.
		if err := m.Peers.Translate(&p); err != nil {
			return admission.Denied(err.Error())
		}
		if _, err := m.Peers.takeForeign(&p, m.View); err != nil {
			return admission.Denied(err.Error())
		}
	}
	if !subject(&p) {
		return admission.Allowed("not a workload scheduled by allot")
	}
	if req.SubResource == "ephemeralcontainers" {
		// kubectl debug's containers get no device either, whatever their image says.
		out := p.DeepCopy()
		for i := range out.Spec.EphemeralContainers {
			c := &out.Spec.EphemeralContainers[i]
			if !slices.Contains(c.Env, noDevice) {
				c.Env = append(c.Env, noDevice)
			}
		}
		cur, err := json.Marshal(out)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		return admission.PatchResponseFromRaw(req.Object.Raw, cur)
	}
	out := p.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	w := m.Owners(ctx, &p)
	setDefault := func(key, val string) {
		if _, ok := out.Labels[key]; !ok && val != "" {
			out.Labels[key] = val
		}
	}
	setDefault(v1alpha1.LabelQueue, w.Labels[v1alpha1.LabelQueue])
	setDefault(v1alpha1.LabelQueue, m.View.NamespaceLabels(p.Namespace)[v1alpha1.LabelQueue])
	// A queue that fixes its class gives it first: an owner's label does not step around
	// the queue's time limit or idle timeout (a pod's own label other than it is refused).
	if q, ok := m.View.Queue(out.Labels[v1alpha1.LabelQueue]); ok && q.Spec.Class != "" {
		setDefault(v1alpha1.LabelClass, q.Spec.Class)
	}
	setDefault(v1alpha1.LabelClass, w.Labels[v1alpha1.LabelClass])
	setDefault(v1alpha1.LabelPreemptible, w.Labels[v1alpha1.LabelPreemptible])
	g := gangOf(&p, w)
	setDefault(v1alpha1.LabelClass, g.class)
	if g.name != "" {
		setDefault(v1alpha1.LabelPodGroup, g.name)
		// The gang's size travels with the pod: the PodGroup the workload controller makes
		// may land after the first pods, which must not start alone meanwhile.
		if g.pods > 0 && out.Labels[v1alpha1.LabelPodGroup] == g.name {
			out.Annotations[v1alpha1.AnnotationMinMember] = strconv.FormatInt(g.pods, 10)
		}
	}
	share, shareErr := v1alpha1.ParseGPUShare(p.Annotations)
	// A MIG instance Allot lays out reaches the pod as a slice's device does; one of a fixed
	// layout comes from the device plugin, as a whole GPU does.
	_, dynMIG := p.Annotations[v1alpha1.AnnotationMIG]
	if shareErr == nil {
		// CUDA images carry NVIDIA_VISIBLE_DEVICES=all in their own environment, which the
		// NVIDIA runtime reads: containers given no device by Allot or the device plugin
		// are told so, last.
		denyImageDevices(out, share.Shared() || dynMIG)
	}
	if shareErr == nil && (share.Shared() || dynMIG) {
		giveGPUEnv(out, share.Devices(), v1alpha1.SliceContainer(&p))
		// The pod's node is not known yet: the directory goes in whatever the node's mode,
		// and the environment the scheduler writes for that node says what in it to use.
		// A MIG instance is held to its size by the GPU itself: nothing to mount.
		if m.SharingRoot != "" && !dynMIG {
			mountSharing(out, m.SharingRoot)
		}
		if m.RuntimeClass != "" && out.Spec.RuntimeClassName == nil {
			out.Spec.RuntimeClassName = &m.RuntimeClass
		}
	}
	cur, err := json.Marshal(out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, cur)
}

// giveGPUEnv appends to the container given the slice (v1alpha1.SliceContainer) an env
// entry for each variable the scheduler sets for a sharing pod, read from the pod's
// annotation of that name through the downward API when the container starts: last, so
// that it wins over anything before it, and from the pod itself, which its owner may not
// change there (FieldsPolicyName). Until the bind writes the values they are empty: no
// device. The other containers are given no GPU: each container holding the whole slice
// would let a pod of several hold it several times (HAMi-core counts per container; one
// cache for two containers does not hold them together, docs/gpu-nodes.md).
func giveGPUEnv(p *corev1.Pod, devices int, given string) {
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		// Entries of its own from an earlier pass go (a webhook may be called again); a
		// pod's own setting of these names stays, for the validator to refuse by name.
		c.Env = slices.DeleteFunc(c.Env, isGPUEnv)
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e == noDevice })
		if c.Name != given {
			// No device, but the pod's /dev/shm and MPS directory: mountSharing gives every
			// container the mounts whose subPathExpr read ALLOT_SHM_DIR and ALLOT_MPS_DIR,
			// and the kubelet refuses to make a container whose expression names a variable
			// it lacks.
			c.Env = append(c.Env, noDevice, gpuEnvVar(shmDirEnv), gpuEnvVar(mpsDirEnv))
			continue
		}
		for _, name := range v1alpha1.GPUEnvNamesFor(devices) {
			c.Env = append(c.Env, gpuEnvVar(name))
		}
	}
}

// mountSharing mounts into each container of a sharing pod the sharing root (read-only),
// the dynamic loader's preload list from it and the /dev/shm the bind names. Whatever the
// pod itself put at those names or paths goes first: a volume of the pod's own under the
// sharing volume's name (an emptyDir) would otherwise stand for the host directory and
// leave HAMi-core unloaded. Run again on its own output it changes nothing.
func mountSharing(p *corev1.Pod, root string) {
	ours := func(name string) bool { return name == sharingVolume || name == shmVolume || name == lockVolume }
	p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return ours(v.Name) })
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: sharingVolume,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: root, Type: &dirOrCreate}}},
		corev1.Volume{Name: shmVolume,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v1alpha1.ShmDir(root), Type: &dirOrCreate}}},
		corev1.Volume{Name: lockVolume,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v1alpha1.HAMiLockDir, Type: &dirOrCreate}}})
	taken := []string{path.Clean(root), path.Clean(root) + "/hami-core", v1alpha1.MPSClientDir(path.Clean(root)), "/etc/ld.so.preload", "/dev/shm", v1alpha1.HAMiLockDir}
	// Init containers (sidecars included) get none of these volumes: a mount of its own of
	// the sharing volume would be the whole root, read-write.
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return ours(m.Name) })
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return ours(m.Name) || slices.Contains(taken, path.Clean(m.MountPath))
		})
		c.VolumeMounts = append(c.VolumeMounts,
			// Of the sharing root, only what this pod uses, read-only: HAMi-core's library
			// (where the preload list names it), and at MPSClientDir the directory the bind
			// names (ALLOT_MPS_DIR): on an mps node its GPU's daemon's pipes and logs,
			// elsewhere the pod's own shared-memory directory. Not the whole root: every
			// GPU's daemon and every pod's directory are there. (The MPS pipes are FIFOs,
			// which a read-only mount still lets a client open for writing.)
			corev1.VolumeMount{Name: sharingVolume, MountPath: path.Clean(root) + "/hami-core", SubPath: "hami-core", ReadOnly: true},
			corev1.VolumeMount{Name: sharingVolume, MountPath: v1alpha1.MPSClientDir(path.Clean(root)), SubPathExpr: "$(" + mpsDirEnv + ")", ReadOnly: true},
			// HAMi-core is preloaded by the dynamic loader's own list, which a process
			// cannot empty as it can LD_PRELOAD; the agent writes the file on every node
			// (empty where HAMi-core does not enforce).
			corev1.VolumeMount{Name: sharingVolume, MountPath: "/etc/ld.so.preload", SubPath: v1alpha1.PreloadListPath, ReadOnly: true},
			// The directory the bind names (ALLOT_SHM_DIR): on an MPS node the one the
			// node's MPS servers have, through whose POSIX shared memory they talk to
			// their clients; elsewhere the pod's own. It replaces a /dev/shm of the pod's
			// (often a memory emptyDir to be larger than the runtime's 64M; this one has
			// no size of its own, its pages count against the container's memory).
			corev1.VolumeMount{Name: shmVolume, MountPath: "/dev/shm", SubPathExpr: "$(ALLOT_SHM_DIR)"},
			// HAMi-core's node-wide lock directory, as HAMi mounts it: its processes in
			// every container find their host PIDs one at a time (v1alpha1.HAMiLockDir).
			corev1.VolumeMount{Name: lockVolume, MountPath: v1alpha1.HAMiLockDir})
	}
}

// noDevice is the setting of NVIDIA_VISIBLE_DEVICES by which the NVIDIA runtime gives a
// container no GPU (and none of the driver).
var noDevice = corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"}

// denyImageDevices appends noDevice to the containers given no device: the init
// containers of a sharing pod (its containers are giveGPUEnv's), and in any other pod
// every init, sidecar or regular container that asks the device plugin for neither
// nvidia.com/gpu nor a MIG instance (nvidia.com/mig-<profile>). Those that ask keep what
// the plugin gives them: the pod's own entry comes after the plugin's and would win.
// Without this, a whole-GPU or static MIG pod's sidecar built on a CUDA image would be
// given every GPU of the node by the legacy NVIDIA runtime.
func denyImageDevices(p *corev1.Pod, sharing bool) {
	deny := func(cs []corev1.Container, all bool) {
		for i := range cs {
			c := &cs[i]
			if !all && asksPluginGPU(c) {
				continue
			}
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e == noDevice })
			c.Env = append(c.Env, noDevice)
		}
	}
	deny(p.Spec.InitContainers, sharing)
	if !sharing {
		deny(p.Spec.Containers, false)
	}
}

// checkPluginOthersVoid refuses a pod given devices by the device plugin (whole GPUs,
// static MIG instances) in which a container that asks for none was not told
// NVIDIA_VISIBLE_DEVICES=void: the mutating webhook writes it, so such a pod skipped the
// webhook (down under failurePolicy Ignore, or a condition it slipped past), and under the
// legacy runtime that container would keep its image's device list, often every GPU of the
// node. This check runs whether or not the mutating webhook did.
func checkPluginOthersVoid(p *corev1.Pod) error {
	if !podAsksPluginGPU(p) {
		return nil
	}
	for _, list := range []struct {
		kind string
		cs   []corev1.Container
	}{{"initContainers", p.Spec.InitContainers}, {"containers", p.Spec.Containers}} {
		for i := range list.cs {
			c := &list.cs[i]
			if asksPluginGPU(c) || toldNoDevice(c) {
				continue
			}
			return fmt.Errorf("%s[%s]: asks for no %s or %s* but was not told %s=%s by Allot's mutating webhook (it was skipped or failed); its image's device list would stand: create the pod again once the webhook answers",
				list.kind, c.Name, v1alpha1.GPUResource, v1alpha1.MIGResourcePrefix, noDevice.Name, noDevice.Value)
		}
	}
	return nil
}

// toldNoDevice tells whether a container's last NVIDIA_VISIBLE_DEVICES entry (the one that
// counts) is the literal void.
func toldNoDevice(c *corev1.Container) bool {
	void := false
	for _, e := range c.Env {
		if e.Name == noDevice.Name {
			void = e.Value == noDevice.Value && e.ValueFrom == nil
		}
	}
	return void
}

// asksPluginGPU tells whether a container asks the NVIDIA device plugin for a device: a
// whole GPU or a MIG instance of a fixed layout, in its limits or its requests.
func asksPluginGPU(c *corev1.Container) bool {
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name, q := range list {
			if (name == v1alpha1.GPUResource || strings.HasPrefix(string(name), v1alpha1.MIGResourcePrefix)) && q.Sign() > 0 {
				return true
			}
		}
	}
	return false
}

func gpuEnvVar(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		APIVersion: "v1", FieldPath: v1alpha1.GPUEnvFieldPath(name)}}}
}

// shmDirEnv names the directory under the sharing root that is a sharing pod's /dev/shm,
// which every container of the pod mounts.
const shmDirEnv = "ALLOT_SHM_DIR"

// mpsDirEnv names the directory under the sharing root mounted at v1alpha1.MPSClientDir.
const mpsDirEnv = "ALLOT_MPS_DIR"

// isGPUEnv tells an entry giveGPUEnv makes: the name read from the annotation of that name.
func isGPUEnv(e corev1.EnvVar) bool {
	if !v1alpha1.IsGPUEnvName(e.Name) {
		return false
	}
	want := gpuEnvVar(e.Name)
	return e.Value == "" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && *e.ValueFrom.FieldRef == *want.ValueFrom.FieldRef
}

// podAsksPluginGPU tells whether any container of the pod, init containers and sidecars
// included, asks the NVIDIA device plugin for a device.
func podAsksPluginGPU(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return asksPluginGPU(&c) }) ||
		slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return asksPluginGPU(&c) })
}
