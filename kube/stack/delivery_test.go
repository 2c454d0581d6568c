package stack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

func labelNode(t *testing.T, e *kubetest.Env, node, key string, value any) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, map[bool]string{true: "null", false: fmt.Sprintf("%q", value)}[value == nil])
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// One node whose runtime injects CDI devices named in Allot's NRI plugin's annotations (the
// agent's pod runs the plugin on cdi pools): a pair of halves, one of two containers; the container
// given the slice (the first) named with the device, and no device in the environment; the
// other given none (a pod holds its slice once).
//
//	dgx-1 (delivery cdi): GPU a: nb-1 0.5 [main; sidecar: none] + nb-2 0.5 [main]
func TestFractionsOnACDINodeGetTheirDeviceByAnnotation(t *testing.T) {
	e := start(t, 1, 2)
	labelNode(t, e, "dgx-1", v1alpha1.LabelGPUDelivery, v1alpha1.DeliveryCDI)
	e.Queue(t, "team-a", 2, nil)
	two := fraction("nb-1", "0.5").Pod()
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, two, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "both halves running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 2, fmt.Sprintf("%d running", n)
	})
	node, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
	uuids := strings.Split(node.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
	for _, name := range []string{"nb-1", "nb-2"} {
		p := e.Pods(t, "default")[name]
		var idx int
		fmt.Sscan(p.Annotations[v1alpha1.AnnotationGPUs], &idx)
		want := "k8s.device-plugin.nvidia.com/gpu=" + uuids[idx]
		for _, c := range p.Spec.Containers {
			if c.Name == "sidecar" {
				env := e.ContainerEnv(t, p, c.Name)
				if got := p.Annotations[v1alpha1.AnnotationCDIPrefix+c.Name]; got != "" || env["NVIDIA_VISIBLE_DEVICES"] != "void" || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "" {
					t.Errorf("%s container %s, not given the slice: CDI annotation %q, env %v", name, c.Name, got, env)
				}
				continue
			}
			if got := p.Annotations[v1alpha1.AnnotationCDIPrefix+c.Name]; got != want {
				t.Errorf("%s container %s: CDI annotation %q, want %q", name, c.Name, got, want)
			}
			env := e.ContainerEnv(t, p, c.Name)
			if env["NVIDIA_VISIBLE_DEVICES"] != "" || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" {
				t.Errorf("%s container %s starts with %v: want no device variable, and its limits", name, c.Name, env)
			}
		}
	}
}

// A node that does not say how a fraction is given its device takes none: the pod waits,
// told which setting is missing; whole GPUs still go there.
func TestFractionWaitsWhereDeliveryIsUnknown(t *testing.T) {
	e := start(t, 1, 2)
	labelNode(t, e, "dgx-1", v1alpha1.LabelGPUDelivery, nil)
	e.Queue(t, "team-a", 2, nil)
	e.MustPod(t, fraction("nb", "0.5"))
	e.MustPod(t, kubetest.PodSpec{Name: "whole", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "whole running, nb waiting with the setting named", func() (bool, string) {
		pods := e.Pods(t, "default")
		reason := waitingReason(pods["nb"])
		return kubetest.Running(pods["whole"]) && strings.Contains(reason, "allot.dev/gpu-delivery: cdi or env") &&
			strings.Contains(reason, "agent.pools[].delivery"), reason
	})
}

// A sharing pod that reached the API server without the mutating webhook (its
// configuration gone, or failurePolicy Ignore while no replica answered) has no entries
// to read its device from: it is not bound, and is told why and what to do.
func TestSharingPodAdmittedWithoutTheWebhookIsNotBound(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	if err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(e.Ctx, "allot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the API server's webhook configuration cache
	e.MustPod(t, fraction("nb", "0.5"))
	e.WaitFor(t, "nb told why it is not bound", func() (bool, string) {
		ev := strings.Join(e.Events(t, "default", "nb"), "\n")
		return strings.Contains(ev, "admitted without Allot's webhook"), ev
	})
	if p := e.Pods(t, "default")["nb"]; kubetest.Bound(p) {
		t.Errorf("nb bound to %s with no way to reach its device", p.Spec.NodeName)
	}

	// With the validator skipped too, a new pod naming an earlier webhook's ConfigMap (one
	// its owner may rewrite) is not bound either: that layout is honoured only on pods
	// created before the one-container layout.
	if err := e.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(e.Ctx, "allot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	cm := fraction("cm", "0.5")
	cm.Annotations[v1alpha1.AnnotationConfigMap] = "mine"
	e.MustPod(t, cm)
	e.WaitFor(t, "cm told why it is not bound", func() (bool, string) {
		ev := strings.Join(e.Events(t, "default", "cm"), "\n")
		return strings.Contains(ev, "admitted without Allot's webhook"), ev
	})
	if p := e.Pods(t, "default")["cm"]; kubetest.Bound(p) {
		t.Errorf("cm bound to %s by a ConfigMap its owner writes", p.Spec.NodeName)
	}
}
