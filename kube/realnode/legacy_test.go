package realnode_test

import (
	"context"
	"os"
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

// withLegacyNode restarts real-1 as a node of the GPU Operator's setup without CDI:
// NVIDIA's runtime in legacy mode as containerd's default (every container runs under it),
// the device plugin's envvar list strategy, and the agent declaring env delivery. At the
// end of the test the node and agent are as before.
func withLegacyNode(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := realnode.BuildLegacyRuntime(ctx, tools, legacyVersion, os.Stderr); err != nil {
		t.Fatal(err)
	}
	bb, err := realnode.BusyboxFiles()
	if err != nil {
		t.Fatal(err)
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: realnode.HandlerLegacy}, Handler: realnode.HandlerLegacy}
	if _, err := client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
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
		o.Images = append(o.Images, realnode.Image{Name: cudaImage, Files: bb, Cmd: []string{"sh"},
			Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}})
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
