package stack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// tenant is alice, who holds Kubernetes' edit role in namespace ml and nothing else: what
// a team member gets on a shared cluster.
func tenant(t *testing.T, e *kubetest.Env) kubernetes.Interface {
	t.Helper()
	return kubetest.Tenant(t, e.Ctx, e.Cluster.Config, "ml", "alice")
}

// fieldsPolicyInForce waits until the API server enforces the scheduler's pod-fields
// policy on pod ns/name, probing with a dry-run rewrite of its queue (refused once in
// force, and written nowhere either way). The scheduler installs the policy as it starts;
// the API server compiles policies on its own refresh, a moment later on a loaded machine,
// and a test checking each refusal must not take that moment for a hole.
func fieldsPolicyInForce(t *testing.T, e *kubetest.Env, c kubernetes.Interface, ns, name string) {
	t.Helper()
	probe := []byte(`{"metadata":{"labels":{"allot.dev/queue":"fields-policy-probe"}}}`)
	e.WaitFor(t, "the pod-fields policy in force", func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Patch(e.Ctx, name, types.MergePatchType, probe, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "fixed once the pod is admitted"), fmt.Sprint(err)
	})
}

func halfPod(name string, edit func(*corev1.Pod)) *corev1.Pod {
	p := kubetest.PodSpec{Name: name, Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}}.Pod()
	p.Namespace = "ml"
	if edit != nil {
		edit(p)
	}
	return p
}

// A tenant with the edit role tries every way to see more of a GPU than its half, or to
// lift its limits: a device or limit variable in a container, an init container or a
// ConfigMap read whole; a CDI device annotation; and, once the pod runs, rewriting the
// annotations its environment is read from, its share or its queue. None gets through,
// and the running container's environment is the scheduler's.
func TestTenantCannotWidenItsShare(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 4, nil)
	alice := tenant(t, e)
	create := func(p *corev1.Pod) error {
		_, err := alice.CoreV1().Pods("ml").Create(e.Ctx, p, metav1.CreateOptions{})
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ml"},
		Data: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}}
	if _, err := alice.CoreV1().ConfigMaps("ml").Create(e.Ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fromApp := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
	for _, c := range []struct {
		name string
		edit func(*corev1.Pod)
		want string
	}{
		{"every GPU", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		}, "NVIDIA_VISIBLE_DEVICES may not be set"},
		{"no limiter", func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LD_PRELOAD", Value: ""}} }, "LD_PRELOAD may not be set"},
		{"all the SMs", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox", Env: []corev1.EnvVar{{Name: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", Value: "100"}}}}
		}, "initContainers[setup].env: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE may not be set"},
		{"a configmap whole", func(p *corev1.Pod) { p.Spec.Containers[0].EnvFrom = fromApp }, `envFrom configMapRef "app"`},
		{"a CDI device", func(p *corev1.Pod) { p.Annotations["nvidia.cdi.k8s.io/pod"] = "k8s.device-plugin.nvidia.com/gpu=all" }, "nvidia.cdi.k8s.io/pod is written by Allot"},
	} {
		err := create(halfPod("try-"+strings.ReplaceAll(strings.ToLower(c.name), " ", "-"), c.edit))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}

	if err := create(halfPod("nb", nil)); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "nb running", func() (bool, string) {
		p := e.Pods(t, "ml")["nb"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase)
	})
	nb := e.Pods(t, "ml")["nb"]
	node, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, nb.Spec.NodeName, metav1.GetOptions{})
	uuids := strings.Split(node.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
	var idx int
	fmt.Sscan(nb.Annotations[v1alpha1.AnnotationGPUs], &idx)
	device := uuids[idx]

	fieldsPolicyInForce(t, e, alice, "ml", "nb")
	for _, c := range []struct{ name, patch, want string }{
		{"its device", `{"metadata":{"annotations":{"allot.dev/gpu-env.NVIDIA_VISIBLE_DEVICES":"all"}}}`, "allot.dev/gpu-env.NVIDIA_VISIBLE_DEVICES"},
		{"its limits", `{"metadata":{"annotations":{"allot.dev/gpu-env.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE":null}}}`, "allot.dev/gpu-env.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"},
		{"a CDI device", `{"metadata":{"annotations":{"nvidia.cdi.k8s.io/container.main":"k8s.device-plugin.nvidia.com/gpu=all"}}}`, "nvidia.cdi.k8s.io/container.main"},
		{"a CDI device for Allot's NRI plugin", `{"metadata":{"annotations":{"cdi.allot.dev/main":"k8s.device-plugin.nvidia.com/gpu=all"}}}`, "cdi.allot.dev/main"},
		{"its share", `{"metadata":{"annotations":{"allot.dev/gpu-fraction":"0.1"}}}`, "allot.dev/gpu-fraction"},
		{"its booked share", `{"metadata":{"annotations":{"allot.dev/gpu-share":"100"}}}`, "allot.dev/gpu-share"},
		{"its queue", `{"metadata":{"labels":{"allot.dev/queue":"team-b"}}}`, "allot.dev/queue"},
		{"the MIG instance it asks", `{"metadata":{"annotations":{"allot.dev/mig":"7g.80gb"}}}`, "allot.dev/mig"},
		{"where its MIG instance is booked", `{"metadata":{"annotations":{"allot.dev/mig-instances":"GPU-x/1g.10gb@0"}}}`, "allot.dev/mig-instances"},
		{"its GPU memory reading", `{"metadata":{"annotations":{"allot.dev/gpu-memory-used-mib":"0"}}}`, "allot.dev/gpu-memory-used-mib is written by the node's allot agent only"},
		{"its device record", `{"metadata":{"annotations":{"allot.dev/gpu-devices":"` + uuids[(idx+1)%len(uuids)] + `"}}}`, "allot.dev/gpu-devices is written by the node's allot agent only"},
	} {
		_, err := alice.CoreV1().Pods("ml").Patch(e.Ctx, "nb", types.MergePatchType, []byte(c.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rewriting %s: %v, want a refusal naming %s", c.name, err, c.want)
		}
	}
	// What is still hers to change is: a label of her own.
	if _, err := alice.CoreV1().Pods("ml").Patch(e.Ctx, "nb", types.MergePatchType, []byte(`{"metadata":{"labels":{"experiment":"7"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label of her own: %v", err)
	}

	nb = e.Pods(t, "ml")["nb"]
	env := e.ContainerEnv(t, nb, nb.Spec.Containers[0].Name)
	if env["NVIDIA_VISIBLE_DEVICES"] != device || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" || env["CUDA_DEVICE_MEMORY_LIMIT"] != "40960m" {
		t.Errorf("nb starts with %v, want its one device %s at half its compute and memory", env, device)
	}
	for k, v := range nb.Annotations {
		if strings.HasPrefix(k, "nvidia.cdi.k8s.io") || strings.HasPrefix(k, "cdi.k8s.io/") {
			t.Errorf("nb carries %s=%s on a node whose delivery is env", k, v)
		}
	}
}

// kubectl debug on a running sharing pod (an admin's, or a tenant's where an admin granted
// pods/ephemeralcontainers): an ephemeral container that sets the device variable is
// refused as the pod's own containers were; one that does not is added.
func TestDebugContainerCannotWidenAShare(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	e.MustPod(t, fraction("nb", "0.5"))
	e.WaitFor(t, "nb running", func() (bool, string) {
		p := e.Pods(t, "default")["nb"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase)
	})
	debug := func(name string, env []corev1.EnvVar) error {
		p, err := e.Client.CoreV1().Pods("default").Get(e.Ctx, "nb", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: name, Image: "busybox", Env: env, TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}})
		_, err = e.Client.CoreV1().Pods("default").UpdateEphemeralContainers(e.Ctx, "nb", p, metav1.UpdateOptions{})
		return err
	}
	if err := debug("widen", []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}); err == nil ||
		!strings.Contains(err.Error(), "ephemeralContainers[widen].env: NVIDIA_VISIBLE_DEVICES may not be set") {
		t.Errorf("a debug container asking for every GPU: %v, want a refusal naming the variable", err)
	}
	if err := debug("look", nil); err != nil {
		t.Errorf("a plain debug container: %v", err)
	}
	// Its image may say NVIDIA_VISIBLE_DEVICES=all: it is told void, last.
	p := e.Pods(t, "default")["nb"]
	if n := len(p.Spec.EphemeralContainers); n != 1 || !slices.Contains(p.Spec.EphemeralContainers[0].Env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"}) {
		t.Errorf("debug containers %+v, want look told NVIDIA_VISIBLE_DEVICES=void", p.Spec.EphemeralContainers)
	}
}

// A sharing pod admitted before the one-container layout reads its GPU from a ConfigMap
// the scheduler wrote in its namespace (Allot's label, the pod its owner), again at every
// start of its container. Alice, with edit in ml, may not rewrite it, take its label off,
// delete it to make her own of its name, or make one of its kind; her own ConfigMaps are
// hers as before, and the scheduler's account (here the cluster admin's) still writes it.
func TestTenantCannotRewriteALegacyGPUConfigMap(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 4, nil)
	alice := tenant(t, e)
	if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, halfPod("old", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := e.Pods(t, "ml")["old"]
	owned := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml",
			Labels:          map[string]string{"app.kubernetes.io/managed-by": v1alpha1.SchedulerName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
			Data: data}
	}
	gpu := owned("old-gpu", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0"})
	if _, err := e.Client.CoreV1().ConfigMaps("ml").Create(e.Ctx, gpu, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const refusal = "holds the GPU a pod admitted before 2026-11-26 reads at each start of its container"
	every := owned("old-gpu", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"})
	e.WaitFor(t, "the GPU ConfigMaps policy in force", func() (bool, string) {
		_, err := alice.CoreV1().ConfigMaps("ml").Update(e.Ctx, every, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), refusal), fmt.Sprint(err)
	})
	unlabelled := every.DeepCopy()
	unlabelled.Labels = nil
	for _, c := range []struct {
		name string
		try  func() error
	}{
		{"rewrite it", func() error {
			_, err := alice.CoreV1().ConfigMaps("ml").Update(e.Ctx, every, metav1.UpdateOptions{})
			return err
		}},
		{"take its label off with the rewrite", func() error {
			_, err := alice.CoreV1().ConfigMaps("ml").Update(e.Ctx, unlabelled, metav1.UpdateOptions{})
			return err
		}},
		{"patch it", func() error {
			_, err := alice.CoreV1().ConfigMaps("ml").Patch(e.Ctx, "old-gpu", types.MergePatchType, []byte(`{"data":{"NVIDIA_VISIBLE_DEVICES":"all"}}`), metav1.PatchOptions{})
			return err
		}},
		{"delete it", func() error { return alice.CoreV1().ConfigMaps("ml").Delete(e.Ctx, "old-gpu", metav1.DeleteOptions{}) }},
		{"make one of its kind", func() error {
			_, err := alice.CoreV1().ConfigMaps("ml").Create(e.Ctx, owned("another-gpu", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}), metav1.CreateOptions{})
			return err
		}},
	} {
		if err := c.try(); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("alice tried to %s: %v, want a refusal saying %q", c.name, err, refusal)
		}
	}
	cm, err := e.Client.CoreV1().ConfigMaps("ml").Get(e.Ctx, "old-gpu", metav1.GetOptions{})
	if err != nil || cm.Data["NVIDIA_VISIBLE_DEVICES"] != "GPU-0" {
		t.Fatalf("the pod's ConfigMap is now %v (%v), want NVIDIA_VISIBLE_DEVICES=GPU-0", cm.Data, err)
	}
	// The scheduler's account writes it as before (a pod placed again after eviction).
	cm.Data["NVIDIA_VISIBLE_DEVICES"] = "GPU-1"
	if _, err := e.Client.CoreV1().ConfigMaps("ml").Update(e.Ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the scheduler's account rewriting it: %v", err)
	}
	// Her own ConfigMaps, Allot's label or not, are hers.
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "ml", Labels: map[string]string{"app.kubernetes.io/managed-by": v1alpha1.SchedulerName}},
		Data: map[string]string{"a": "1"}}
	if _, err := alice.CoreV1().ConfigMaps("ml").Create(e.Ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice making her own ConfigMap: %v", err)
	}
	mine.Data["a"] = "2"
	if _, err := alice.CoreV1().ConfigMaps("ml").Update(e.Ctx, mine, metav1.UpdateOptions{}); err != nil {
		t.Errorf("alice rewriting her own ConfigMap: %v", err)
	}
	if err := alice.CoreV1().ConfigMaps("ml").Delete(e.Ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Errorf("alice deleting her own ConfigMap: %v", err)
	}
}
