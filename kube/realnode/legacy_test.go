package realnode_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/realnode"
)

// legacyVersion is the toolkit release whose legacy runtime the legacy node runs: the
// hook's reading of NVIDIA_VISIBLE_DEVICES is the same in 1.19 and 1.20.
const legacyVersion = "v1.20.2"

// cudaImage is a shell image whose own environment says NVIDIA_VISIBLE_DEVICES=all, as
// NVIDIA's CUDA base images do.
const cudaImage = "localhost/cuda-like:latest"

// cudaLikeImage is cudaImage.
func cudaLikeImage() (realnode.Image, error) {
	bb, err := realnode.BusyboxFiles()
	if err != nil {
		return realnode.Image{}, err
	}
	return realnode.Image{Name: cudaImage, Files: bb, Cmd: []string{"sh"},
		Env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}}, nil
}

// legacyClass makes the GPU Operator's nvidia-legacy RuntimeClass, naming the node's
// handler of NVIDIA's legacy runtime.
func legacyClass(t *testing.T) {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: realnode.HandlerLegacy}, Handler: realnode.HandlerLegacy}
	if _, err := client.NodeV1().RuntimeClasses().Create(context.Background(), rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// withLegacyNode restarts real-1 as a node of the GPU Operator's setup without CDI:
// NVIDIA's runtime in legacy mode as containerd's default (every container runs under it),
// the device plugin's envvar list strategy, and the agent declaring env delivery. At the
// end of the test the node and agent are as before.
func withLegacyNode(t *testing.T) {
	t.Helper()
	legacyClass(t)
	if stopAgent != nil {
		stopAgent()
	}
	t.Cleanup(func() {
		if err := runAgent(agentOpts); err != nil {
			t.Errorf("real-1's agent, as before: %v", err)
		}
	})
	restartRig(t, func(o *realnode.Options) {
		o.ListStrategy = realnode.ListEnvvar
		o.Legacy = &realnode.LegacyRuntime{Version: legacyVersion, Default: true}
	})
	t.Cleanup(func() { restartRig(t, func(*realnode.Options) {}) })
	env := agentOpts
	env.Delivery = v1alpha1.DeliveryEnv
	if err := runAgent(env); err != nil {
		t.Fatalf("the agent declaring env delivery: %v", err)
	}
}

// TestLegacyRuntimeNode restarts real-1 once as the legacy node for the tests of that setup.
func TestLegacyRuntimeNode(t *testing.T) {
	need(t)
	withLegacyNode(t)
	t.Run("DevicesUnderTheLegacyRuntime", testDevicesUnderTheLegacyRuntime)
	t.Run("TenantReachesNoGPUUnderTheLegacyRuntime", testTenantReachesNoGPUUnderTheLegacyRuntime)
}

// On the legacy node devices reach containers through NVIDIA_VISIBLE_DEVICES alone, read
// by NVIDIA's own runtime hook: a fraction's container gets exactly the GPU its
// reservation holds and its sidecar none; a whole-GPU pod's container gets its one GPU and
// its other container, of an image that says NVIDIA_VISIBLE_DEVICES=all, none.
//
//	real-1 (legacy runtime, device plugin envvar; hami-core, env):
//	  nb 0.5 (runtimeClassName nvidia-legacy) [main: the slice's GPU] [side: none]
//	  whole 1 GPU                             [main: one GPU]         [side (cuda-like image): none]
func testDevicesUnderTheLegacyRuntime(t *testing.T) {
	queue(t, "team-legacy", "legacy", 4)

	nb := sharingPod("legacy", "nb", "team-legacy", script("main"), script("side"))
	class := realnode.HandlerLegacy
	nb.Spec.RuntimeClassName = &class
	seen := runAndRead(t, nb, "main", "side")
	t.Logf("fraction: main sees %v (NVIDIA_VISIBLE_DEVICES=%q), side sees %v", seen["main"].NVIDIA(), seen["main"].Env["NVIDIA_VISIBLE_DEVICES"], seen["side"].NVIDIA())
	if gpus := gpuDevices(seen["main"]); len(gpus) != 1 {
		t.Errorf("the fraction's container sees GPU devices %v, want exactly one", gpus)
	}
	if got := seen["side"].NVIDIA(); len(got) != 0 {
		t.Errorf("the fraction's sidecar sees %v, want no NVIDIA device", got)
	}
	reservationHolds(t, gpuDevices(seen["main"]))

	whole := sharingPod("legacy", "whole", "team-legacy", script("main"), script("side"))
	delete(whole.Annotations, v1alpha1.AnnotationGPUFraction)
	whole.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	whole.Spec.Containers[1].Image = cudaImage
	seen = runAndRead(t, whole, "main", "side")
	t.Logf("whole GPU: main sees %v, side (cuda-like image) sees %v", seen["main"].NVIDIA(), seen["side"].NVIDIA())
	if gpus := gpuDevices(seen["main"]); len(gpus) != 1 {
		t.Errorf("the whole-GPU container sees GPU devices %v, want exactly one", gpus)
	}
	if got := seen["side"].NVIDIA(); len(got) != 0 {
		t.Errorf("the container asking no GPU, of an image saying NVIDIA_VISIBLE_DEVICES=all, sees %v, want none", got)
	}
}

// A tenant with edit in its namespace, on the legacy node, reaches no GPU with a pod of
// kube-scheduler's that asks for none: not through its image's NVIDIA_VISIBLE_DEVICES=all,
// nor by setting the variable itself, nor from a ConfigMap of hers (before the mend, the
// first container saw all four GPUs).
//
//	real-1 (legacy runtime default): bob/cuda (default-scheduler, no GPU)
//	  [image: cuda-like] [env: NVIDIA_VISIBLE_DEVICES=all] [envFrom: a ConfigMap saying all]: none
func testTenantReachesNoGPUUnderTheLegacyRuntime(t *testing.T) {
	ctx := context.Background()
	const ns = "bob"
	bob := kubetest.Tenant(t, ctx, cluster.Config, ns, "bob")
	queue(t, "bob-q", ns, 2)
	if _, err := bob.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "devices", Namespace: ns},
		Data: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := shellPod(ns, "cuda", script("image"), script("env"), script("envfrom"))
	p.Spec.Containers[0].Image = cudaImage
	p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	p.Spec.Containers[2].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "devices"}}}}
	seen := runAndReadAs(t, bob, p, "image", "env", "envfrom")
	for _, name := range []string{"image", "env", "envfrom"} {
		t.Logf("bob's container %s, asking no GPU, sees %v", name, seen[name].NVIDIA())
		if got := gpuDevices(seen[name]); len(got) != 0 {
			t.Errorf("bob's container %s, asking no GPU, sees %v, want none", name, got)
		}
	}
}

// On the cdi node, where NVIDIA's legacy runtime is registered beside runc (the GPU
// Operator with CDI on makes the nvidia-legacy class), a tenant with edit who names that
// class for her pods, of an image saying NVIDIA_VISIBLE_DEVICES=all, gets no GPU beyond
// what her queue booked: the whole-GPU container its one device (the device plugin's CDI
// spec says NVIDIA_VISIBLE_DEVICES=void, which the legacy hook then reads), the fraction's
// container its slice's, their other containers none.
//
//	real-1 (cdi; nvidia-legacy registered): carol/whole 1 GPU [main: one] [side: none]
//	                                        carol/nb 0.5      [main: one] [side: none]   (all runtimeClassName nvidia-legacy, cuda-like image)
func TestTenantsRuntimeClassReachesNoMoreGPUs(t *testing.T) {
	need(t)
	legacyClass(t)
	ctx := context.Background()
	const ns = "carol"
	carol := kubetest.Tenant(t, ctx, cluster.Config, ns, "carol")
	queue(t, "carol-q", ns, 2)
	class := realnode.HandlerLegacy
	whole := sharingPod(ns, "whole", "carol-q", script("main"), script("side"))
	delete(whole.Annotations, v1alpha1.AnnotationGPUFraction)
	whole.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	nb := sharingPod(ns, "nb", "carol-q", script("main"), script("side"))
	for _, p := range []*corev1.Pod{whole, nb} {
		p.Spec.RuntimeClassName = &class
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Image = cudaImage
		}
		seen := runAndReadAs(t, carol, p, "main", "side")
		t.Logf("%s under %s: main sees %v, side sees %v", p.Name, class, seen["main"].NVIDIA(), seen["side"].NVIDIA())
		if got := gpuDevices(seen["main"]); len(got) != 1 {
			t.Errorf("%s: the container given a GPU sees %v, want exactly one", p.Name, got)
		}
		if got := gpuDevices(seen["side"]); len(got) != 0 {
			t.Errorf("%s: the container asking none sees %v, want none", p.Name, got)
		}
	}
}
