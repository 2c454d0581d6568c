package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A GPU pod naming another scheduler in a tenant's namespace (ml: queue ml-only names it)
// is Allot's under adopt, refused under refuse, left alone under off; elsewhere (default, an
// exempt namespace, the system's) it is always left alone. A system-class pod is refused in
// ml only.
func TestForeignGPUPods(t *testing.T) {
	gpuPod := func(ns, scheduler string) *corev1.Pod {
		p := pod("ml-only", 1, nil, nil)
		p.Namespace, p.Spec.SchedulerName = ns, scheduler
		return p
	}
	claiming := func(template string) *corev1.Pod {
		p := pod("ml-only", 0, nil, nil)
		p.Namespace, p.Spec.SchedulerName = "ml", "default-scheduler"
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(template)}}
		return p
	}
	for _, c := range []struct {
		name    string
		peers   Peers
		pod     *corev1.Pod
		adopted bool
		refused string // "" = admitted
	}{
		{"adopt, kube-scheduler's GPU pod in ml", Peers{}, gpuPod("ml", "default-scheduler"), true, ""},
		{"refuse, the same", Peers{ForeignGPUPods: ForeignRefuse}, gpuPod("ml", "default-scheduler"),
			false, `spec.schedulerName: "default-scheduler" is not allowed for a pod asking for GPUs in namespace ml`},
		{"off, the same", Peers{ForeignGPUPods: ForeignOff}, gpuPod("ml", "default-scheduler"), false, ""},
		{"adopt, a namespace no queue names", Peers{}, gpuPod("default", "default-scheduler"), false, ""},
		{"adopt, an exempt namespace", Peers{ForeignExempt: []string{"ml"}}, gpuPod("ml", "default-scheduler"), false, ""},
		{"adopt, kube-system", Peers{}, gpuPod("kube-system", "default-scheduler"), false, ""},
		{"adopt, a pod asking no GPU", Peers{}, func() *corev1.Pod {
			p := pod("ml-only", 0, nil, nil)
			p.Namespace = "ml"
			p.Spec.SchedulerName = "x"
			return p
		}(), false, ""},
		{"a sidecar's MIG instance", Peers{}, func() *corev1.Pod {
			p := pod("ml-only", 0, nil, nil)
			p.Namespace, p.Spec.SchedulerName = "ml", "volcano"
			p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resourceOf(1)}}}}
			return p
		}(), true, ""},
		// Any claim: it may be made, or made again, of a GPU class after the pod.
		{"a claim", Peers{}, claiming("one-gpu"), true, ""},
		{"refuse, a claim", Peers{ForeignGPUPods: ForeignRefuse}, claiming("nic"),
			false, `spec.schedulerName: "default-scheduler" is not allowed for a pod with ResourceClaims (any of which may be made or made again for GPUs before it is placed) in namespace ml`},
		{"a claim by name", Peers{}, func() *corev1.Pod {
			p := claiming("")
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To("later")}}
			return p
		}(), true, ""},
	} {
		p := c.pod.DeepCopy()
		adopted, err := c.peers.takeForeign(p, view{})
		if adopted != c.adopted || (err == nil) != (c.refused == "") || err != nil && !strings.Contains(err.Error(), c.refused) {
			t.Errorf("%s: adopted %v, %v; want adopted %v, refusal %q", c.name, adopted, err, c.adopted, c.refused)
		}
		if adopted && (p.Spec.SchedulerName != v1alpha1.SchedulerName || !strings.Contains(p.Annotations[v1alpha1.AnnotationTranslated], "spec.schedulerName=")) {
			t.Errorf("%s: adopted as %q with %q", c.name, p.Spec.SchedulerName, p.Annotations[v1alpha1.AnnotationTranslated])
		}
		// The validating webhook says the same of the pod as it arrived, were the mutating
		// webhook skipped.
		if err := c.peers.checkForeign(c.pod, view{}); (err == nil) != (c.refused == "" && !c.adopted) {
			t.Errorf("%s: validated unmutated: %v", c.name, err)
		}
	}
	critical := pod("ml-only", 0, nil, nil)
	critical.Namespace, critical.Spec.PriorityClassName, critical.Spec.Priority = "ml", "system-cluster-critical", ptr.To(int32(2_000_000_000))
	if err := (Peers{}).checkForeign(critical, view{}); err == nil || !strings.Contains(err.Error(), `spec.priorityClassName: "system-cluster-critical"`) {
		t.Errorf("a system-class pod in ml: %v", err)
	}
	critical.Namespace = "monitoring"
	if err := (Peers{}).checkForeign(critical, view{}); err != nil {
		t.Errorf("a system-class pod outside tenants' namespaces: %v", err)
	}
}

func resourceOf(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

// A GPU pod made with its node set in a tenant's namespace is refused, whichever scheduler
// it names: no scheduler would place it, and no queue would book it.
func TestNodeNameSetGPUPodsAreRefused(t *testing.T) {
	for _, sched := range []string{v1alpha1.SchedulerName, "default-scheduler"} {
		p := pod("ml-only", 1, nil, nil)
		p.Namespace, p.Spec.SchedulerName, p.Spec.NodeName = "ml", sched, "dgx-1"
		err := (Peers{}).checkForeign(p, view{})
		if want := `spec.nodeName: "dgx-1" is not allowed for a pod asking for GPUs in namespace ml`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", sched, err, want)
		}
	}
	cpu := pod("ml-only", 0, nil, nil)
	cpu.Namespace, cpu.Spec.NodeName = "ml", "dgx-1"
	if err := (Peers{}).checkForeign(cpu, view{}); err != nil {
		t.Errorf("a CPU pod with its node set: %v", err)
	}
}

// Another scheduler's pod in a tenant's namespace (ml), GPU or not, whatever the foreign-pod
// rule (devices.mutate.allot.dev): each container asking no GPU of the device plugin is
// told it has none, last, which beats its own and its envFrom sources'
// NVIDIA_VISIBLE_DEVICES (and its image's, under NVIDIA's legacy runtime); a container
// given a GPU by the plugin keeps the plugin's list. Outside tenants' namespaces, and for
// a static pod's mirror, the pod is left as it came.
func TestOtherSchedulersPodsInTenantsNamespacesGetNoDevice(t *testing.T) {
	plain := func(ns string) *corev1.Pod {
		p := pod("ml-only", 0, nil, nil)
		p.Namespace, p.Spec.SchedulerName = ns, "default-scheduler"
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "devices"}}}}})
		p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
		return p
	}
	lastDevices := func(c corev1.Container) string {
		v := "(unset)"
		for _, e := range c.Env {
			if e.Name == "NVIDIA_VISIBLE_DEVICES" {
				v = e.Value
			}
		}
		return v
	}
	devices := func(peers Peers) Devices { return Devices{Mutator: &Mutator{View: view{}, Peers: peers}} }
	out := admitThrough(t, devices(Peers{}), plain("ml"))
	for _, c := range append(out.Spec.InitContainers, out.Spec.Containers...) {
		if got := lastDevices(c); got != "void" {
			t.Errorf("ml: container %s's last NVIDIA_VISIBLE_DEVICES is %q, want void", c.Name, got)
		}
	}
	if out.Spec.SchedulerName != "default-scheduler" {
		t.Errorf("ml: a pod asking no GPU became %q's", out.Spec.SchedulerName)
	}
	off := plain("ml")
	off.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resourceOf(1)}
	off.Spec.Containers[0].Env = nil
	out = admitThrough(t, devices(Peers{ForeignGPUPods: ForeignOff}), off)
	if got := lastDevices(out.Spec.Containers[0]); got != "(unset)" {
		t.Errorf("off: the container given a GPU by the plugin has NVIDIA_VISIBLE_DEVICES %q, want the plugin's (unset in the pod)", got)
	}
	if got := lastDevices(out.Spec.Containers[1]); got != "void" {
		t.Errorf("off: the container asking no GPU has NVIDIA_VISIBLE_DEVICES %q, want void", got)
	}
	for name, p := range map[string]*corev1.Pod{"default (no queue names it)": plain("default"), "a static pod's mirror": func() *corev1.Pod {
		p := plain("ml")
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		return p
	}()} {
		out = admitThrough(t, devices(Peers{}), p)
		if got := lastDevices(out.Spec.Containers[0]); got != "all" {
			t.Errorf("%s: NVIDIA_VISIBLE_DEVICES %q, want the pod's own all", name, got)
		}
	}
}
