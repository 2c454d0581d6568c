package stack_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// A tenant's pod given its device by the device plugin (a static MIG instance, a whole
// GPU), with an init container and a sidecar built on CUDA images (NVIDIA_VISIBLE_DEVICES=all
// in the image, which the legacy NVIDIA runtime reads): as stored, each container that asks
// no device is told void, last, and the one that asks keeps the plugin's list; the tenant
// can neither set the list herself nor change a container's environment afterwards.
func TestTenantPluginPodsSidecarsGetNoDevice(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 4, nil)
	alice := tenant(t, e)
	for _, c := range []struct {
		name string
		ask  corev1.ResourceName
	}{{"mig", "nvidia.com/mig-1g.10gb"}, {"whole", v1alpha1.GPUResource}} {
		p := kubetest.PodSpec{Name: c.name, Queue: "team-a"}.Pod()
		p.Namespace = "ml"
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{c.ask: resource.MustParse("1")}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"})
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"},
			{Name: "proxy", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}

		all := p.DeepCopy()
		all.Name += "-all"
		all.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, all, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "containers[sidecar].env: NVIDIA_VISIBLE_DEVICES may not be set") {
			t.Errorf("%s: a sidecar setting every GPU: %v, want a refusal naming it", c.name, err)
		}

		got, err := alice.CoreV1().Pods("ml").Create(e.Ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, ct := range []string{"setup", "proxy", "sidecar"} {
			if v := e.ContainerEnv(t, got, ct)["NVIDIA_VISIBLE_DEVICES"]; v != "void" {
				t.Errorf("%s: container %s has NVIDIA_VISIBLE_DEVICES=%q, want void", c.name, ct, v)
			}
		}
		if v, set := e.ContainerEnv(t, got, "main")["NVIDIA_VISIBLE_DEVICES"]; set {
			t.Errorf("%s: main, which asks %s, has NVIDIA_VISIBLE_DEVICES=%q over the device plugin's", c.name, c.ask, v)
		}
		// After admission the environment is the API server's to keep.
		got.Spec.Containers[1].Env = nil
		if _, err := alice.CoreV1().Pods("ml").Update(e.Ctx, got, metav1.UpdateOptions{}); err == nil {
			t.Errorf("%s: the tenant took the sidecar's void away after admission", c.name)
		}
	}
}

// The mutating webhook's condition, as the real API server evaluates it: a bare pod that
// names its queue with a sidecar and no init container, or with a sidecar whose
// nvidia.com/gpu limit is 0 (which asks for nothing), is sent to the webhook and its
// sidecar told void; a pod whose every container asks a GPU skips the call and is admitted.
func TestTenantBarePodsSidecarsAreSentToTheWebhook(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 4, nil)
	alice := tenant(t, e)
	one := corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("1")}
	for _, c := range []struct {
		name    string
		sidecar corev1.ResourceList
	}{{"no-limits", nil}, {"zero", corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("0")}}, {"both-ask", one}} {
		p := kubetest.PodSpec{Name: c.name, Queue: "team-a"}.Pod()
		p.Namespace = "ml"
		p.Spec.Containers[0].Resources.Limits = one
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04",
			Resources: corev1.ResourceRequirements{Limits: c.sidecar}})
		got, err := alice.CoreV1().Pods("ml").Create(e.Ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v, set := e.ContainerEnv(t, got, "sidecar")["NVIDIA_VISIBLE_DEVICES"]
		if asks := c.name == "both-ask"; asks && set || !asks && v != "void" {
			t.Errorf("%s: the sidecar has NVIDIA_VISIBLE_DEVICES=%q (set %v)", c.name, v, set)
		}
	}
}
