package stack_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// What a tenant with edit in namespace ml gets is what its queue books, however it asks:
//
//	dgx-1: 4 GPUs             team-a (ml)            team-b
//	  ml/side: a sidecar      books the sidecar's 4  its 1-GPU pod waits: the node is full
//	  asking 4, main none     (not 0)                (not bound and refused by the kubelet)
//
// A thousandth of each of four GPUs waits on a node that holds no slice to its share until
// its admin says slices there are on trust. A ConfigMap of hers read whole into a whole-GPU pod, which could say
// NVIDIA_VISIBLE_DEVICES=all after the device plugin's list, is refused; so is a GPU asked
// by an init container of a pod sharing one, naming the container. A GPU pod of hers that
// names no scheduler is Allot's all the same (booked to her queue, not bound by
// kube-scheduler beside the books), and a pod of hers at a system priority class is
// refused: kube-scheduler would preempt other teams' pods for it. A pod claiming a GPU
// through a ResourceClaimTemplate of hers is Allot's too.
func TestTenantGetsWhatItsQueueBooks(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 4, map[string]any{"namespaces": []string{"ml"}})
	e.Queue(t, "team-b", 0, nil)
	alice := tenant(t, e)
	create := func(p *corev1.Pod) error {
		p.Namespace = "ml"
		_, err := alice.CoreV1().Pods("ml").Create(e.Ctx, p, metav1.CreateOptions{})
		return err
	}
	gpus := func(n int64) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}}
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "devices", Namespace: "ml"},
		Data: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_MIG_CONFIG_DEVICES": "all"}}
	if _, err := alice.CoreV1().ConfigMaps("ml").Create(e.Ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	whole := func(name string) *corev1.Pod { return kubetest.PodSpec{Name: name, Queue: "team-a", GPUs: 1}.Pod() }
	from := func(prefix string) []corev1.EnvFromSource {
		return []corev1.EnvFromSource{{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "devices"}}}}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a whole-GPU container reads the ConfigMap whole", func() *corev1.Pod {
			p := whole("every-gpu")
			p.Spec.Containers[0].EnvFrom = from("")
			return p
		}(), `containers[main].envFrom configMapRef "devices"`},
		{"its init container does, under a prefix that completes the name", func() *corev1.Pod {
			p := whole("every-gpu-init")
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox", EnvFrom: from("NVIDIA_")}}
			return p
		}(), `initContainers[setup].envFrom configMapRef "devices"`},
		{"a sharing pod's init container asks a whole GPU", func() *corev1.Pod {
			p := halfPod("half-and-whole", nil)
			p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "busybox", Resources: gpus(1)}}
			return p
		}(), "initContainers[warmup].resources: nvidia.com/gpu with allot.dev/gpu-fraction"},
		{"a GPU pod placed by hand", func() *corev1.Pod {
			p := whole("by-hand")
			p.Spec.NodeName = "dgx-1"
			return p
		}(), `spec.nodeName: "dgx-1" is not allowed for a pod asking for GPUs in namespace ml`},
		{"another team's open queue", kubetest.PodSpec{Name: "borrow", Queue: "team-b", GPUs: 1}.Pod(),
			`namespace "ml" may not use queue "team-b", which admits only namespaces no queue claims`},
		{"a pick list longer than the scheduler reads", func() *corev1.Pod {
			p := whole("many-uuids")
			p.Annotations = map[string]string{v1alpha1.AnnotationGPUUUIDExclude: strings.Repeat("GPU-0,", v1alpha1.MaxChoiceEntries) + "GPU-0"}
			return p
		}(), fmt.Sprintf("allot.dev/gpu-uuid-exclude: %d entries is too many: at most %d", v1alpha1.MaxChoiceEntries+1, v1alpha1.MaxChoiceEntries)},
	} {
		if err := create(c.pod); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %s", c.name, err, c.want)
		}
	}
	// Under a prefix that makes no device variable, the ConfigMap is hers to read.
	safe := whole("prefixed")
	safe.Namespace = "ml"
	safe.Spec.Containers[0].EnvFrom = from("APP_")
	if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, safe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a whole-GPU pod reading the ConfigMap under APP_: %v", err)
	}

	// A thousandth of each of four GPUs on a node that holds no slice to its share would
	// be four whole GPUs booked as 0.004: such a node takes no slice unless its admin says
	// slices there are on trust.
	labelNode(t, e, "dgx-1", v1alpha1.LabelGPUSharing, v1alpha1.SharingNone)
	labelNode(t, e, "dgx-1", v1alpha1.LabelFractionsOnTrust, nil)
	tiny := halfPod("tiny", func(p *corev1.Pod) {
		p.Annotations[v1alpha1.AnnotationGPUFraction] = "0.001"
		p.Annotations[v1alpha1.AnnotationGPUCount] = "4"
	})
	if err := create(tiny); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "tiny waits: the node takes no slice", func() (bool, string) {
		p := e.Pods(t, "ml")["tiny"]
		return strings.Contains(waitingReason(p), "slices there are on trust") || p.Spec.NodeName != "", waitingReason(p)
	})
	if p := e.Pods(t, "ml")["tiny"]; p.Spec.NodeName != "" {
		t.Errorf("tiny was bound to %s, which holds no slice to its share and takes none on trust", p.Spec.NodeName)
	}
	if err := alice.CoreV1().Pods("ml").Delete(e.Ctx, "tiny", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	labelNode(t, e, "dgx-1", v1alpha1.LabelFractionsOnTrust, "true")

	always := corev1.ContainerRestartPolicyAlways
	side := kubetest.PodSpec{Name: "side", Queue: "team-a"}.Pod()
	side.Spec.InitContainers = []corev1.Container{{Name: "server", Image: "train", RestartPolicy: &always, Resources: gpus(4)}}
	if err := create(side); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "side running, its queue booked its sidecar's 4 GPUs", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := q.Status.Allocated[v1alpha1.GPUResource]
		p := e.Pods(t, "ml")["side"]
		return kubetest.Running(p) && got.Value() == 4, fmt.Sprintf("%s, team-a allocated %s", p.Status.Phase, got.String())
	})
	e.MustPod(t, kubetest.PodSpec{Name: "b-one", Queue: "team-b", GPUs: 1})
	e.WaitFor(t, "team-b's pod waits with a reason, or is bound", func() (bool, string) {
		p := e.Pods(t, "default")["b-one"]
		r := waitingReason(p)
		return r != "" || p.Spec.NodeName != "", r
	})
	if p := e.Pods(t, "default")["b-one"]; p.Spec.NodeName != "" {
		t.Errorf("team-b's pod was bound to %s, whose 4 GPUs team-a's sidecar holds: %s", p.Spec.NodeName, p.Status.Phase)
	}

	// kube-scheduler's pods: no schedulerName.
	plain := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Queue: "team-a", GPUs: 1}.Pod()
		p.Spec.SchedulerName = ""
		if edit != nil {
			edit(p)
		}
		return p
	}
	if err := create(plain("no-queue", func(p *corev1.Pod) { delete(p.Labels, v1alpha1.LabelQueue) })); err == nil ||
		!strings.Contains(err.Error(), "allot.dev/queue: no queue") {
		t.Errorf("a GPU pod naming no scheduler and no queue: %v, want it taken as Allot's and refused for its missing queue", err)
	}
	critical := plain("critical", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		p.Spec.PriorityClassName = "system-cluster-critical"
	})
	if err := create(critical); err == nil || !strings.Contains(err.Error(), `spec.priorityClassName: "system-cluster-critical"`) {
		t.Errorf("a pod at a system class in her namespace: %v, want a refusal naming the class", err)
	}
	if err := create(plain("plain", nil)); err != nil {
		t.Fatal(err)
	}
	p := e.Pods(t, "ml")["plain"]
	if p.Spec.SchedulerName != v1alpha1.SchedulerName || !strings.Contains(p.Annotations[v1alpha1.AnnotationTranslated], "spec.schedulerName=default-scheduler → allot") {
		t.Errorf("her GPU pod naming no scheduler has schedulerName %q and %s %q, want it taken by Allot and saying so",
			p.Spec.SchedulerName, v1alpha1.AnnotationTranslated, p.Annotations[v1alpha1.AnnotationTranslated])
	}
	// Allot's books say the node is full: it waits, rather than being bound by
	// kube-scheduler to GPUs the kubelet would hand out twice.
	e.WaitFor(t, "plain waits in Allot's books", func() (bool, string) {
		p := e.Pods(t, "ml")["plain"]
		return waitingReason(p) != "" || p.Spec.NodeName != "", waitingReason(p)
	})
	if p := e.Pods(t, "ml")["plain"]; p.Spec.NodeName != "" {
		t.Errorf("plain was bound to %s while team-a's sidecar holds every GPU", p.Spec.NodeName)
	}
	// Through a ResourceClaim of NVIDIA's GPU class, from a template of her own, the same.
	tpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "ml"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: kubetest.DeviceClaim("gpu.nvidia.com", 1)}}
	if _, err := alice.ResourceV1().ResourceClaimTemplates("ml").Create(e.Ctx, tpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimer := kubetest.PodSpec{Name: "claimer", Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu")}.Pod()
	claimer.Spec.SchedulerName = ""
	if err := create(claimer); err != nil {
		t.Fatal(err)
	}
	if p := e.Pods(t, "ml")["claimer"]; p.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Errorf("her pod claiming a GPU through a template has schedulerName %q, want it taken by Allot", p.Spec.SchedulerName)
	}
	// A claim she makes only after the pod (or deletes and makes again while the pod waits)
	// is not there to read at admission: the pod is Allot's all the same, and so is the
	// claim of NVIDIA's class she then makes.
	later := kubetest.PodSpec{Name: "later", Queue: "team-a", Claims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("made-later")}}}.Pod()
	later.Spec.SchedulerName = ""
	if err := create(later); err != nil {
		t.Fatal(err)
	}
	made := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "made-later", Namespace: "ml"}, Spec: kubetest.DeviceClaim("gpu.nvidia.com", 1)}
	if _, err := alice.ResourceV1().ResourceClaims("ml").Create(e.Ctx, made, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := e.Pods(t, "ml")["later"]; p.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Errorf("her pod naming a claim made after it has schedulerName %q, want it taken by Allot", p.Spec.SchedulerName)
	}
}
