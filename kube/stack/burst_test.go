package stack_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// A dynamic fraction on one 80Gi GPU with the agent:
//
//	nb: asks 20Gi, may use up to 60Gi   →  held to 60Gi (HAMi-core's and MPS's caps)
//	the agent measures nb at 50Gi       →  30Gi past its request, lent
//	model asks 40Gi                     →  fits the bookings (60 of 80), not the burst: nb
//	                                       is stopped, told why, and model runs
func TestABurstIsALoan(t *testing.T) {
	e, _ := kubetest.StartWithAgents(t, 1, 1, "")
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 1, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "nb", Queue: "team-a", Annotations: map[string]string{
		v1alpha1.AnnotationGPUMemory: "20Gi", v1alpha1.AnnotationGPUMemoryLimit: "60Gi"}})
	e.WaitFor(t, "nb running, held to its limit", func() (bool, string) {
		p := e.Pods(t, "default")["nb"]
		return kubetest.Running(p) && p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"CUDA_DEVICE_MEMORY_LIMIT"] == "61440m" &&
			p.Annotations[v1alpha1.AnnotationGPUShareMemory] == "21474836480", p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"CUDA_DEVICE_MEMORY_LIMIT"]
	})
	// What the node's agent reads of it through NVML (the test writes it as the agent's
	// user would: the scheduler's own, on allot up).
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationPodGPUMemoryUsed + `":"51200"}}}`)
	if _, err := e.Client.CoreV1().Pods("default").Patch(e.Ctx, "nb", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A 10Gi pod fits beside the burst: nb keeps running.
	e.MustPod(t, kubetest.PodSpec{Name: "small", Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUMemory: "10Gi"}})
	e.WaitFor(t, "small running beside nb", func() (bool, string) {
		ps := e.Pods(t, "default")
		return kubetest.Running(ps["small"]) && kubetest.Running(ps["nb"]), ""
	})
	e.MustPod(t, kubetest.PodSpec{Name: "model", Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUMemory: "40Gi"}})
	e.WaitFor(t, "model running, nb stopped and told why", func() (bool, string) {
		ps := e.Pods(t, "default")
		nb := ps["nb"]
		ev := strings.Join(e.Events(t, "default", "nb"), "; ")
		gone := nb == nil || nb.DeletionTimestamp != nil
		return kubetest.Running(ps["model"]) && gone && strings.Contains(ev, "30Gi past its request of 20Gi, and job default/model's request needed it back"), ev
	})
}
