package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
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

// Handle implements admission.Handler.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	var p corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if p.Namespace == "" {
		p.Namespace = req.Namespace
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
	ours := func(name string) bool { return name == sharingVolume || name == shmVolume }
	p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return ours(v.Name) })
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: sharingVolume,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: root, Type: &dirOrCreate}}},
		corev1.Volume{Name: shmVolume,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v1alpha1.ShmDir(root), Type: &dirOrCreate}}})
	taken := []string{path.Clean(root), path.Clean(root) + "/hami-core", v1alpha1.MPSClientDir(path.Clean(root)), "/etc/ld.so.preload", "/dev/shm"}
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
			corev1.VolumeMount{Name: shmVolume, MountPath: "/dev/shm", SubPathExpr: "$(ALLOT_SHM_DIR)"})
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
	asks := false
	for i := range p.Spec.Containers {
		asks = asks || asksPluginGPU(&p.Spec.Containers[i])
	}
	for i := range p.Spec.InitContainers {
		asks = asks || asksPluginGPU(&p.Spec.InitContainers[i])
	}
	if !asks {
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

// Validator refuses pods that could never run as asked.
type Validator struct {
	View View
	// Accelerators are the kinds of other vendors' devices the scheduler schedules (nil:
	// NVIDIA's GPUs only).
	Accelerators *convert.Accelerators
	// Peers says what becomes of other schedulers' GPU pods in tenants' namespaces (the
	// mutating webhook's, checked again here).
	Peers Peers
}

// Handle implements admission.Handler.
func (v *Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	var p corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if p.Namespace == "" {
		p.Namespace = req.Namespace
	}
	if req.SubResource == "" {
		if err := v.Peers.checkForeign(&p, v.View); err != nil {
			return admission.Denied(err.Error())
		}
	}
	if req.SubResource == "ephemeralcontainers" {
		// kubectl debug adds a container to a running pod: its environment is held to
		// what the pod's own containers are.
		if err := ValidateEphemeral(&p); err != nil {
			return admission.Denied(err.Error())
		}
		return admission.Allowed("")
	}
	if err := ValidatePod(&p, v.View, v.Accelerators); err != nil {
		return admission.Denied(err.Error())
	}
	return admission.Allowed("")
}

// ValidateEphemeral checks the ephemeral containers of a running pod scheduled by Allot
// (added through pods/ephemeralcontainers, as kubectl debug does) as its containers were
// checked at admission.
func ValidateEphemeral(p *corev1.Pod) error {
	if !subject(p) {
		return nil
	}
	if err := checkSharingMounts(p, true); err != nil {
		return err
	}
	share, _ := v1alpha1.ParseGPUShare(p.Annotations)
	only := p.DeepCopy()
	only.Spec.InitContainers, only.Spec.Containers = nil, nil
	if guardsEnv(p, share) {
		return checkEnv(only)
	}
	for _, e := range p.Spec.EphemeralContainers {
		only.Spec.Containers = append(only.Spec.Containers, corev1.Container(e.EphemeralContainerCommon))
	}
	return checkWholeGPUEnv(only)
}

// checkSharingMounts refuses a pod in which a container mounts Allot's sharing volumes
// (the host's sharing root and its shm directory) other than as the mutating webhook
// mounts them: an init or ephemeral container mounting them at all, or a container
// mounting the root whole or writable, would reach every GPU's MPS daemon, every pod's
// shared memory and the library every sharing pod preloads.
func checkSharingMounts(p *corev1.Pod, ephemeralOnly bool) error {
	webhook := func(m corev1.VolumeMount) bool {
		switch m.Name {
		case sharingVolume:
			return m.ReadOnly && ((m.SubPath == "hami-core" || m.SubPath == v1alpha1.PreloadListPath) && m.SubPathExpr == "" ||
				m.SubPath == "" && m.SubPathExpr == "$("+mpsDirEnv+")")
		case shmVolume:
			return m.SubPath == "" && m.SubPathExpr == "$("+shmDirEnv+")"
		}
		return true
	}
	check := func(kind, name string, mounts []corev1.VolumeMount, none bool) error {
		for _, m := range mounts {
			if m.Name != sharingVolume && m.Name != shmVolume {
				continue
			}
			if none || !webhook(m) {
				return fmt.Errorf("%s[%s].volumeMounts: volume %s is Allot's (the host's GPU sharing directory), mounted by its webhook alone: remove the mount", kind, name, m.Name)
			}
		}
		return nil
	}
	for _, c := range p.Spec.EphemeralContainers {
		if err := check("ephemeralContainers", c.Name, c.VolumeMounts, true); err != nil {
			return err
		}
	}
	if ephemeralOnly {
		return nil // a running pod's own containers are as they were admitted
	}
	for _, c := range p.Spec.InitContainers {
		if err := check("initContainers", c.Name, c.VolumeMounts, true); err != nil {
			return err
		}
	}
	for _, c := range p.Spec.Containers {
		if err := check("containers", c.Name, c.VolumeMounts, false); err != nil {
			return err
		}
	}
	return nil
}

// ValidatePod checks a pod scheduled by Allot against the cluster: its sharing annotations,
// the kind of device it asks for (kinds: the scheduler's table of other vendors' kinds),
// its queue and its gang.
func ValidatePod(p *corev1.Pod, view View, kinds *convert.Accelerators) error {
	if !subject(p) {
		return nil
	}
	if msg := v1alpha1.ResourceClaimsProblem(p); msg != "" {
		return errors.New(msg)
	}
	if err := checkSharingMounts(p, false); err != nil {
		return err
	}
	if notes, err := untranslated(p, kinds); err != nil {
		return err
	} else if notes != "" {
		return fmt.Errorf("another scheduler's names were not translated by Allot's mutating webhook (%s): is it installed, and does its condition send such pods to it?", notes)
	}
	share, err := v1alpha1.ParseGPUShare(p.Annotations)
	if err != nil {
		return err
	}
	// Before the slice is read against nvidia.com/gpu: a slice beside another vendor's
	// device is that device's problem, said as such.
	if err := kinds.CheckAsks(p, kinds.Asks(p)); err != nil {
		return err
	}
	whole := v1alpha1.WholeGPUs(p)
	if share.Shared() && whole > 0 {
		return fmt.Errorf("%s.resources: nvidia.com/gpu with %s, %s or %s: a pod takes a slice of GPUs or whole GPUs, not both (a slice of each of N GPUs: %s: N)",
			askerOf(p, v1alpha1.GPUResource), v1alpha1.AnnotationGPUFraction, v1alpha1.AnnotationGPUMemory, v1alpha1.AnnotationGPUCompute, v1alpha1.AnnotationGPUCount)
	}
	if _, err := v1alpha1.ParseGPUChoice(p.Annotations); err != nil {
		return err
	}
	_, dynMIG := p.Annotations[v1alpha1.AnnotationMIG]
	if name, ok := p.Annotations[v1alpha1.AnnotationGPUContainer]; ok && (!(share.Shared() || dynMIG) || v1alpha1.SliceContainer(p) == "") {
		var names []string
		for _, c := range p.Spec.Containers {
			names = append(names, c.Name)
		}
		return fmt.Errorf("%s: %q is not allowed: the container of a pod that shares a GPU given its slice, one of %s", v1alpha1.AnnotationGPUContainer, name, strings.Join(names, ", "))
	}
	if err := convert.MIGProblem(p); err != nil {
		return err
	}
	if dynMIG && share.Devices() > 1 {
		return fmt.Errorf("%s with %s: a MIG instance Allot lays out is one per pod", v1alpha1.AnnotationMIG, v1alpha1.AnnotationGPUCount)
	}
	if share.Devices() > 1 && len(p.Spec.ResourceClaims) > 0 {
		return fmt.Errorf("%s with spec.resourceClaims: a slice of several GPUs is not offered through DRA", v1alpha1.AnnotationGPUCount)
	}
	if err := checkOwnedAnnotations(p); err != nil {
		return err
	}
	if guardsEnv(p, share) {
		if err := checkEnv(p); err != nil {
			return err
		}
	} else if err := checkWholeGPUEnv(p); err != nil {
		return err
	}
	if err := checkPluginOthersVoid(p); err != nil {
		return err
	}
	if c, ok := p.Labels[v1alpha1.LabelClass]; ok && c != v1alpha1.ClassTrain && c != v1alpha1.ClassInteractive && c != v1alpha1.ClassInference {
		return fmt.Errorf("%s: %q is not allowed: train, interactive or inference", v1alpha1.LabelClass, c)
	}
	if v, ok := p.Labels[v1alpha1.LabelPreemptible]; ok && v != "true" && v != "false" {
		return fmt.Errorf("%s: %q is not allowed: true or false", v1alpha1.LabelPreemptible, v)
	}
	// A level that is not in the cluster's Topology would leave the gang waiting forever.
	if p.Annotations[v1alpha1.AnnotationTopologyRequired] != "" || p.Annotations[v1alpha1.AnnotationTopologyPreferred] != "" {
		if _, err := convert.JobTopology(p.Annotations, view.Topologies()); err != nil {
			return err
		}
	}
	total, maxMem := view.GPUs()
	if share.Memory > 0 && maxMem > 0 && share.Memory > maxMem {
		return fmt.Errorf("%s: %q is more than any GPU in the cluster has: at most %s", v1alpha1.AnnotationGPUMemory,
			p.Annotations[v1alpha1.AnnotationGPUMemory], resource.NewQuantity(maxMem, resource.BinarySI))
	}
	qname := p.Labels[v1alpha1.LabelQueue]
	if qname == "" {
		return fmt.Errorf("%s: no queue: set the label on the pod or its workload, or a default on namespace %s; queues: %s",
			v1alpha1.LabelQueue, p.Namespace, queueList(view))
	}
	q, ok := view.Queue(qname)
	if !ok {
		return fmt.Errorf("%s: queue %q does not exist; queues: %s", v1alpha1.LabelQueue, qname, queueList(view))
	}
	if len(q.Spec.Namespaces) > 0 && !slices.Contains(q.Spec.Namespaces, p.Namespace) {
		return fmt.Errorf("%s: namespace %q may not use queue %q; it admits namespaces %s", v1alpha1.LabelQueue, p.Namespace, qname,
			strings.Join(q.Spec.Namespaces, ", "))
	}
	if c := p.Labels[v1alpha1.LabelClass]; q.Spec.Class != "" && c != q.Spec.Class {
		return fmt.Errorf("%s: %q is not allowed in queue %s, which runs %s workloads only (its time limit and idle timeout are theirs): remove the label, or use another queue",
			v1alpha1.LabelClass, c, qname, q.Spec.Class)
	}
	if g := p.Labels[v1alpha1.LabelPodGroup]; g != "" && whole > 0 && total > 0 {
		if pg, ok := view.PodGroup(p.Namespace, g); ok && int64(pg.Spec.MinMember)*whole > total {
			return fmt.Errorf("%s: gang %q needs %d GPUs at once (%d pods × %d) but the cluster has %d", v1alpha1.LabelPodGroup, g,
				int64(pg.Spec.MinMember)*whole, pg.Spec.MinMember, whole, total)
		}
	}
	return nil
}

// askerOf names the first container (init containers and sidecars first) that asks for a
// resource, as a path in the pod's spec: "initContainers[name]".
func askerOf(p *corev1.Pod, name corev1.ResourceName) string {
	for _, list := range []struct {
		kind string
		cs   []corev1.Container
	}{{"initContainers", p.Spec.InitContainers}, {"containers", p.Spec.Containers}} {
		for i := range list.cs {
			if v1alpha1.ContainerAsks(&list.cs[i], name) > 0 {
				return fmt.Sprintf("%s[%s]", list.kind, list.cs[i].Name)
			}
		}
	}
	return "spec"
}

// subject tells whether the webhooks act on a pod: Allot schedules it, and it is not one of
// the scheduler's own reservations.
func subject(p *corev1.Pod) bool {
	return p.Spec.SchedulerName == v1alpha1.SchedulerName &&
		!(p.Namespace == v1alpha1.SystemNamespace && p.Labels[v1alpha1.LabelReservation] == "true")
}

func queueList(view View) string {
	names := view.QueueNames()
	if len(names) == 0 {
		return "none yet (an admin creates Queue objects)"
	}
	return strings.Join(names, ", ")
}
