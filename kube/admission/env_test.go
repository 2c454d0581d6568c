package admission

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Each variable that would widen a sharing pod's GPU or lift its limits is refused by
// name, wherever the pod sets it; a GPU-less pod likewise; a whole-GPU pod, which the
// device plugin gives its devices, is not concerned.
func TestSharingPodsMayNotSetDeviceVariables(t *testing.T) {
	sharing := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"})
		giveGPUEnv(p, 1, "main") // as the mutating webhook does before the validator sees it
		edit(p)
		return p
	}
	lit := func(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }
	for _, name := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
		"CUDA_DEVICE_MEMORY_LIMIT_0", "GPU_CORE_UTILIZATION_POLICY", "NVIDIA_MIG_CONFIG_DEVICES", "ALLOT_SHM_DIR"} {
		for where, p := range map[string]*corev1.Pod{
			"containers[main].env": sharing(func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = append([]corev1.EnvVar{lit(name, "all")}, p.Spec.Containers[0].Env...)
			}),
			"containers[main].env (after Allot's)": sharing(func(p *corev1.Pod) { p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, lit(name, "all")) }),
			"initContainers[setup].env": sharing(func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "setup", Env: []corev1.EnvVar{lit(name, "all")}}}
			}),
			"GPU-less containers[main].env": func() *corev1.Pod {
				p := pod("team-a", 0, nil, nil)
				p.Spec.Containers[0].Env = []corev1.EnvVar{lit(name, "all")}
				return p
			}(),
		} {
			err := ValidatePod(p, view{}, nil)
			want := strings.TrimPrefix(strings.TrimSuffix(where, " (after Allot's)"), "GPU-less ") + ": " + name + " may not be set"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s sets %s: %v, want a refusal containing %q", where, name, err, want)
			}
		}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" = admitted
	}{
		{"Allot's own entries", sharing(func(*corev1.Pod) {}), ""},
		{"an ordinary variable", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, lit("HF_HOME", "/cache"))
		}), ""},
		{"CUDA's own connection count", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, lit("CUDA_DEVICE_MAX_CONNECTIONS", "1"))
		}), ""},
		{"capabilities it needs", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, lit("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"))
		}), ""},
		{"every capability", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, lit("NVIDIA_DRIVER_CAPABILITIES", "all"))
		}), `NVIDIA_DRIVER_CAPABILITIES "all" is not allowed`},
		{"a ConfigMap's whole environment", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
		}), `containers[main].envFrom configMapRef "app"`},
		{"a Secret's, in an init container", sharing(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}}}
		}), `initContainers[setup].envFrom secretRef "creds"`},
		{"a prefix that completes a guarded name", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "CUDA_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
		}), `envFrom configMapRef "app"`},
		{"a safe prefix", sharing(func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "APP_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
		}), ""},
		{"a CDI device asked by its owner", sharing(func(p *corev1.Pod) { p.Annotations["nvidia.cdi.k8s.io/container.main"] = "nvidia.com/gpu=all" }),
			"nvidia.cdi.k8s.io/container.main is written by Allot"},
		{"a CDI device for Allot's NRI plugin asked by its owner", sharing(func(p *corev1.Pod) { p.Annotations["cdi.allot.dev/main"] = "management.nvidia.com/gpu=all" }),
			"cdi.allot.dev/main is written by Allot"},
		{"its own device environment", sharing(func(p *corev1.Pod) { p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"] = "all" }),
			"allot.dev/gpu-env.NVIDIA_VISIBLE_DEVICES is written by Allot"},
		{"a whole-GPU pod sets its own", func() *corev1.Pod {
			p := pod("team-a", 1, nil, nil)
			p.Spec.Containers[0].Env = []corev1.EnvVar{lit("CUDA_VISIBLE_DEVICES", "0")}
			return p
		}(), ""},
	} {
		err := ValidatePod(c.pod, view{}, nil)
		if c.want == "" && err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
}

// The mutating webhook's entries come last in every container, read the pod's
// annotations of their names, and are not doubled when the webhook runs again.
func TestGPUEnvEntriesComeLast(t *testing.T) {
	p := pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"})
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "HF_HOME", Value: "/cache"}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}})
	giveGPUEnv(p, 1, "main")
	giveGPUEnv(p, 1, "main")
	// The slice goes to one container; the sidecar is given no GPU, once, last, and the
	// name of the pod's /dev/shm, which its mount reads.
	if side := p.Spec.Containers[1].Env; len(side) != 4 || side[1] != noDevice || !isGPUEnv(side[2]) || side[2].Name != "ALLOT_SHM_DIR" ||
		!isGPUEnv(side[3]) || side[3].Name != "ALLOT_MPS_DIR" {
		t.Errorf("sidecar env %+v, want its own, then NVIDIA_VISIBLE_DEVICES=void, ALLOT_SHM_DIR and ALLOT_MPS_DIR from the pod", side)
	}
	env := p.Spec.Containers[0].Env
	if len(env) != 1+len(v1alpha1.GPUEnvNames) || env[0].Name != "HF_HOME" {
		t.Fatalf("env %+v, want HF_HOME then one entry per name", env)
	}
	for i, name := range v1alpha1.GPUEnvNames {
		e := env[1+i]
		if e.Name != name || e.ValueFrom.FieldRef.FieldPath != "metadata.annotations['allot.dev/gpu-env."+name+"']" {
			t.Errorf("entry %d: %+v, want %s from its annotation", i, e, name)
		}
	}
}

// What a pod may not be created with: the records Allot books by, the reservation mark,
// and for a pod given whole GPUs by the device plugin a device list of its own.
func TestPodsAreNotCreatedWithWhatAllotWrites(t *testing.T) {
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a device record", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationGPUDevices: "GPU-x"}), "allot.dev/gpu-devices is written by Allot"},
		{"a GPU memory reading", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationPodGPUMemoryUsed: "0"}), "allot.dev/gpu-memory-used-mib is written by Allot"},
		{"its own booking", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationGPUs: "0"}), "allot.dev/gpu-indices is written by Allot"},
		{"a share booked", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5", v1alpha1.AnnotationGPUShare: "100"}), "allot.dev/gpu-share is written by Allot"},
		{"an old ConfigMap's name", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5", v1alpha1.AnnotationConfigMap: "mine"}), "allot.dev/gpu-configmap is written by Allot"},
		{"the reservation mark", pod("team-a", 1, map[string]string{v1alpha1.LabelReservation: "true"}, nil), "allot.dev/reservation marks the scheduler's own"},
		{"every GPU on a whole-GPU pod", func() *corev1.Pod {
			p := pod("team-a", 1, nil, nil)
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
			return p
		}(), "containers[main].env: NVIDIA_VISIBLE_DEVICES may not be set"},
	} {
		if err := ValidatePod(c.pod, view{}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
}

// CUDA images carry NVIDIA_VISIBLE_DEVICES=all: the containers Allot gives no device (a
// GPU-less pod's, a sharing pod's init containers) are told "void" last, and are admitted.
func TestContainersGivenNoDeviceAreToldSo(t *testing.T) {
	cpu := pod("team-a", 0, nil, nil)
	cpu.Spec.InitContainers = []corev1.Container{{Name: "setup"}}
	half := pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"})
	half.Spec.InitContainers = []corev1.Container{{Name: "setup"}}
	denyImageDevices(cpu, false)
	denyImageDevices(half, true)
	giveGPUEnv(half, 1, "main")
	last := func(c corev1.Container) corev1.EnvVar { return c.Env[len(c.Env)-1] }
	for _, c := range []corev1.Container{cpu.Spec.InitContainers[0], cpu.Spec.Containers[0], half.Spec.InitContainers[0]} {
		if len(c.Env) == 0 || last(c) != noDevice {
			t.Errorf("container %s ends with %+v, want NVIDIA_VISIBLE_DEVICES=void", c.Name, c.Env)
		}
	}
	if last(half.Spec.Containers[0]).Name == noDevice.Name && last(half.Spec.Containers[0]).Value == "void" {
		t.Error("the sharing pod's own container was told void")
	}
	for _, p := range []*corev1.Pod{cpu, half} {
		if err := ValidatePod(p, view{}, nil); err != nil {
			t.Errorf("refused after the mutating webhook: %v", err)
		}
	}
}

// A sharing pod's /dev/shm is the host directory the bind names, in place of one of its
// own; a volume of the pod's own under the sharing volume's name does not stand for the
// host directory (HAMi-core's preload list would be the pod's to empty); and a second
// pass of the webhook changes nothing.
func TestSharingMountsAreAllotsOwn(t *testing.T) {
	p := pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"})
	p.Spec.Volumes = []corev1.Volume{
		{Name: sharingVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "dshm", MountPath: "/dev/shm/"}, {Name: sharingVolume, MountPath: "/etc/ld.so.preload"}, {Name: "data", MountPath: "/data"}}
	mountSharing(p, "/run/allot/sharing")
	once := p.DeepCopy()
	mountSharing(p, "/run/allot/sharing")
	if !equality.Semantic.DeepEqual(once, p) {
		t.Errorf("a second pass changed the pod:\n%+v\n%+v", once.Spec, p.Spec)
	}
	hostPaths := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		} else if v.Name == sharingVolume || v.Name == shmVolume {
			t.Errorf("volume %s is the pod's own %+v", v.Name, v.VolumeSource)
		}
	}
	if hostPaths[sharingVolume] != "/run/allot/sharing" || hostPaths[shmVolume] != "/run/allot/sharing/shm" || hostPaths[lockVolume] != "/tmp/vgpulock" {
		t.Errorf("host directories %v, want the sharing root, its shm and HAMi-core's node-wide lock directory", hostPaths)
	}
	at := map[string]corev1.VolumeMount{}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if _, twice := at[m.MountPath]; twice {
			t.Errorf("two mounts at %s", m.MountPath)
		}
		at[m.MountPath] = m
	}
	if m := at["/dev/shm"]; m.Name != shmVolume || m.SubPathExpr != "$(ALLOT_SHM_DIR)" || m.ReadOnly {
		t.Errorf("/dev/shm is %+v, want the shm directory the bind names, writable", m)
	}
	if m := at["/etc/ld.so.preload"]; m.Name != sharingVolume || m.SubPath != v1alpha1.PreloadListPath || !m.ReadOnly {
		t.Errorf("/etc/ld.so.preload is %+v, want the agent's list, read-only", m)
	}
	// Of the sharing root, only HAMi-core's directory and the MPS directory the bind names:
	// not the root, where every GPU's daemon and every pod's directory are.
	if m, ok := at["/run/allot/sharing"]; ok {
		t.Errorf("the whole sharing root is mounted: %+v", m)
	}
	if m := at["/run/allot/sharing/hami-core"]; m.Name != sharingVolume || m.SubPath != "hami-core" || !m.ReadOnly {
		t.Errorf("/run/allot/sharing/hami-core is %+v, want the root's hami-core, read-only", m)
	}
	if m := at[v1alpha1.MPSClientDir("/run/allot/sharing")]; m.Name != sharingVolume || m.SubPathExpr != "$(ALLOT_MPS_DIR)" || !m.ReadOnly {
		t.Errorf("%s is %+v, want the directory the bind names, read-only", v1alpha1.MPSClientDir("/run/allot/sharing"), m)
	}
	// HAMi-core's lock directory is the node's, as HAMi mounts it: its processes in every
	// container find their host PIDs in turn.
	if m := at["/tmp/vgpulock"]; m.Name != lockVolume || m.SubPath != "" || m.SubPathExpr != "" {
		t.Errorf("/tmp/vgpulock is %+v, want the node's lock directory", m)
	}
	if m := at["/data"]; m.Name != "data" {
		t.Errorf("the pod's own /data mount is %+v", m)
	}
	if _, ok := at["/dev/shm/"]; ok {
		t.Error("the pod's own /dev/shm is still mounted")
	}
}

// admit runs a pod through the mutating webhook as the API server would, applying its
// patch, and returns the pod it stores.
func admit(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	return admitWith(t, view{}, Workload{Labels: map[string]string{}}, p)
}

// admitWith is admit on a cluster v, the pod's owners being w.
func admitWith(t *testing.T, v View, w Workload, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	return admitThrough(t, &Mutator{View: v, Owners: func(context.Context, *corev1.Pod) Workload { return w }}, p)
}

// admitThrough is admit through the webhook handler m.
func admitThrough(t *testing.T, m admission.Handler, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r := m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "t", Namespace: p.Namespace, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
	if !r.Allowed {
		t.Fatalf("the mutating webhook refused: %v", r.Result)
	}
	ops, err := json.Marshal(r.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = patch.Apply(raw); err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// A pod given its devices by the device plugin (a static MIG instance, whole GPUs): each
// container that asks for one keeps the plugin's device list, and every other container
// (init, sidecar, regular) built on a CUDA image is given no GPU, last; the pod is then
// admitted by the validator.
func TestPluginPodsOtherContainersGetNoDevice(t *testing.T) {
	cudaImage := []corev1.EnvVar{{Name: "PATH", Value: "/usr/bin"}}
	for _, c := range []struct {
		name string
		ask  corev1.ResourceName
	}{{"static MIG", "nvidia.com/mig-1g.10gb"}, {"whole GPU", v1alpha1.GPUResource}} {
		p := pod("team-a", 0, nil, nil)
		one := corev1.ResourceList{c.ask: resource.MustParse("1")}
		p.Spec.Containers[0].Resources.Limits = one
		p.Spec.Containers = append(p.Spec.Containers,
			corev1.Container{Name: "sidecar", Env: cudaImage},
			corev1.Container{Name: "second", Resources: corev1.ResourceRequirements{Requests: one, Limits: one}})
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Env: cudaImage},
			{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		out := admit(t, p)
		voided := func(ct corev1.Container) bool { return len(ct.Env) > 0 && ct.Env[len(ct.Env)-1] == noDevice }
		for _, ct := range append(slices.Clone(out.Spec.InitContainers), out.Spec.Containers[1]) {
			if !voided(ct) {
				t.Errorf("%s: container %s ends with %+v, want NVIDIA_VISIBLE_DEVICES=void", c.name, ct.Name, ct.Env)
			}
		}
		for _, ct := range []corev1.Container{out.Spec.Containers[0], out.Spec.Containers[2]} {
			if slices.ContainsFunc(ct.Env, func(e corev1.EnvVar) bool { return e.Name == noDevice.Name }) {
				t.Errorf("%s: container %s asking %s was given %+v: the device plugin's list would be overridden", c.name, ct.Name, c.ask, ct.Env)
			}
		}
		if err := ValidatePod(out, view{}, nil); err != nil {
			t.Errorf("%s: refused after the mutating webhook: %v", c.name, err)
		}
		// The same pod as it is when the mutating webhook was skipped (down under
		// failurePolicy Ignore): the validator, which always runs, refuses it.
		if err := ValidatePod(p, view{}, nil); err == nil || !strings.Contains(err.Error(), "initContainers[setup]: asks for no nvidia.com/gpu") {
			t.Errorf("%s: without the mutating webhook: %v, want a refusal naming initContainers[setup]", c.name, err)
		}
		// A sidecar with a limit of 0 asks for nothing, and is told so.
		zero := pod("team-a", 0, nil, nil)
		zero.Spec.Containers[0].Resources.Limits = one
		zero.Spec.Containers = append(zero.Spec.Containers, corev1.Container{Name: "zero", Env: cudaImage,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{c.ask: resource.MustParse("0")}}})
		if err := ValidatePod(zero, view{}, nil); err == nil || !strings.Contains(err.Error(), "containers[zero]: asks for no") {
			t.Errorf("%s: a sidecar asking 0, not mutated: %v, want a refusal naming containers[zero]", c.name, err)
		}
		if z := admit(t, zero); !voided(z.Spec.Containers[1]) {
			t.Errorf("%s: a sidecar asking 0 ends with %+v, want NVIDIA_VISIBLE_DEVICES=void", c.name, z.Spec.Containers[1].Env)
		}
	}
}

// The chart's copy of the mutating webhook's needs-defaults condition is the one Allot
// installs itself (MutateCondition): a hole closed in one and left in the other would be a
// hole on every cluster the chart installs.
func TestChartMutateConditionIsTheSame(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/helm/allot/templates/webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "- name: needs-defaults" })
	if i < 0 || strings.TrimSpace(lines[i+1]) != "expression: >-" {
		t.Fatal("the chart has no needs-defaults condition as a folded block")
	}
	var folded []string
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "          ") {
			break
		}
		folded = append(folded, strings.TrimSpace(l))
	}
	chart := strings.Join(folded, " ")
	ours := strings.Join(strings.Fields(MutateCondition), " ")
	if strings.Join(strings.Fields(chart), " ") != ours {
		t.Errorf("the chart's needs-defaults condition differs from admission.MutateCondition:\nchart: %s\ngo:    %s", chart, ours)
	}
}

// A sharing pod holds its slice in one container: the validator refuses the slice's
// entries written by the pod's owner in another container (as when the mutating webhook
// was skipped), and what the mutating webhook writes, sidecar and init container
// included, is admitted and is the layout the scheduler binds by.
func TestSliceEntriesInOneContainerOnly(t *testing.T) {
	half := func() *corev1.Pod {
		p := pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"})
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar"})
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		return p
	}
	out := admit(t, half())
	if err := ValidatePod(out, view{}, nil); err != nil {
		t.Errorf("refused after the mutating webhook: %v", err)
	}
	out.CreationTimestamp = metav1.Now()
	if !v1alpha1.HasGPUEnv(out) {
		t.Errorf("the webhook's layout is not the one the scheduler binds by: %+v", out.Spec)
	}
	every := half()
	for i := range every.Spec.Containers {
		every.Spec.Containers[i].Env = []corev1.EnvVar{gpuEnvVar("NVIDIA_VISIBLE_DEVICES")}
	}
	if err := ValidatePod(every, view{}, nil); err == nil || !strings.Contains(err.Error(), "containers[sidecar].env: NVIDIA_VISIBLE_DEVICES may not be set") {
		t.Errorf("the slice read in every container: %v, want a refusal naming the sidecar", err)
	}
	cpu := pod("team-a", 0, nil, nil)
	cpu.Spec.Containers[0].Env = []corev1.EnvVar{gpuEnvVar("NVIDIA_VISIBLE_DEVICES")}
	if err := ValidatePod(cpu, view{}, nil); err == nil || !strings.Contains(err.Error(), "containers[main].env: NVIDIA_VISIBLE_DEVICES may not be set") {
		t.Errorf("a GPU-less pod reading a slice: %v, want a refusal", err)
	}
}

// Allot's sharing volumes are mounted by the webhook alone: an init container's (a sidecar's)
// own mount of the sharing volume is taken out at admission, and a pod reaching the
// validator with one (the mutating webhook skipped), with a container mounting the root
// whole, or an ephemeral container mounting it, is refused naming the container.
func TestSharingVolumesMountedByTheWebhookAlone(t *testing.T) {
	p := pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"})
	p.Spec.InitContainers = []corev1.Container{{Name: "grab", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{{Name: sharingVolume, MountPath: "/root-rw"}}}}
	mountSharing(p, "/run/allot/sharing")
	if len(p.Spec.InitContainers[0].VolumeMounts) != 0 {
		t.Errorf("the sidecar keeps its mounts %+v", p.Spec.InitContainers[0].VolumeMounts)
	}
	if err := checkSharingMounts(p, false); err != nil {
		t.Errorf("the webhook's own mounts refused: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*corev1.Pod)
		want string
	}{
		{"a sidecar's", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: sharingVolume, MountPath: "/root-rw"}}
		}, "initContainers[grab].volumeMounts: volume " + sharingVolume},
		{"the whole root", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: sharingVolume, MountPath: "/all", ReadOnly: true})
		}, "containers[main].volumeMounts"},
		{"an ephemeral container's", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg",
				VolumeMounts: []corev1.VolumeMount{{Name: shmVolume, MountPath: "/shm"}}}}}
		}, "ephemeralContainers[dbg].volumeMounts"},
	} {
		q := p.DeepCopy()
		c.edit(q)
		if err := checkSharingMounts(q, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
