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
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// How a slice's compute share holds is the pool's to allow and the workload's to narrow,
// and it reaches the container as MPS and HAMi-core read it (memory held alike in every
// mode). Alice, with edit in ml, runs halves on two hami-core pools:
//
//	nb-1 (shared: its admin lets notebooks use an idle neighbour's time)
//	  free    asks nothing    → shared: no SM limit (policy disable), MPS 100%
//	  fairly  asks fair       → fair:   SM 50% under contention (HAMi-core's default policy), MPS 100%
//	  strict  asks capped     → capped: SM 50% forced, MPS 50%
//	serve-1 (capped, the default)
//	  greedy  asks shared     → capped, and its Scheduled Event says it was held to the pool's
//
// A mode outside the three, or one on a pod that takes no slice, is refused naming the
// annotation; once admitted the mode is fixed.
func TestComputeModesHoldAsThePoolAllows(t *testing.T) {
	e, _ := kubetest.StartNodesWithAgents(t,
		simnode.Spec{Prefix: "nb", Count: 1, GPUs: 2, Sharing: v1alpha1.SharingHAMiCore, Compute: v1alpha1.ComputeShared},
		simnode.Spec{Prefix: "serve", Count: 1, GPUs: 2, Sharing: v1alpha1.SharingHAMiCore})
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 4, nil)
	alice := tenant(t, e)
	half := func(name, node, mode string) *corev1.Pod {
		return halfPod(name, func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
			if mode != "" {
				p.Annotations[v1alpha1.AnnotationComputeMode] = mode
			}
		})
	}
	for _, p := range []*corev1.Pod{half("free", "nb-1", ""), half("fairly", "nb-1", "fair"), half("strict", "nb-1", "capped"), half("greedy", "serve-1", "shared")} {
		if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	e.WaitFor(t, "the four halves running", func() (bool, string) {
		n := e.Count(t, "ml", kubetest.Running)
		why := ""
		for _, p := range e.Pods(t, "ml") {
			why += fmt.Sprintf("%s: %s %s %s; ", p.Name, p.Status.Phase, p.Spec.NodeName, waitingReason(p))
		}
		return n == 4, fmt.Sprintf("%d running: %s", n, why)
	})
	// allot top nodes and the dashboard read the pool's mode from the node.
	nodes, err := inspect.Nodes(e.Ctx, e.Client)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if want := map[string]string{"nb-1": "shared", "serve-1": "capped"}[n.Name]; n.Compute != want {
			t.Errorf("node %s (sharing %q) shows compute %q, want %q", n.Name, n.Sharing, n.Compute, want)
		}
	}
	pods := e.Pods(t, "ml")
	for _, c := range []struct{ pod, mode, sm, policy, mps string }{
		{"free", "shared", "100", "disable", "100"},
		{"fairly", "fair", "50", "default", "100"},
		{"strict", "capped", "50", "force", "50"},
		{"greedy", "capped", "50", "force", "50"},
	} {
		env := e.ContainerEnv(t, pods[c.pod], pods[c.pod].Spec.Containers[0].Name)
		if env["ALLOT_GPU_COMPUTE"] != c.mode || env["CUDA_DEVICE_SM_LIMIT"] != c.sm || env["GPU_CORE_UTILIZATION_POLICY"] != c.policy ||
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != c.mps || env["CUDA_DEVICE_MEMORY_LIMIT"] != "40960m" {
			t.Errorf("%s starts with compute %s, SM %s%% (policy %s), MPS %s%%, memory %s; want %s: %s%% (%s), %s%%, 40960m",
				c.pod, env["ALLOT_GPU_COMPUTE"], env["CUDA_DEVICE_SM_LIMIT"], env["GPU_CORE_UTILIZATION_POLICY"], env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
				env["CUDA_DEVICE_MEMORY_LIMIT"], c.mode, c.sm, c.policy, c.mps)
		}
	}
	e.WaitFor(t, "greedy told it was held to its pool's mode", func() (bool, string) {
		evs, err := e.Client.CoreV1().Events("ml").List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == "greedy" && ev.Reason == "Scheduled" {
				return strings.Contains(ev.Message, "allot.dev/gpu-compute-mode asked shared: the node allows capped at most"), ev.Message
			}
		}
		return false, "no Scheduled Event"
	})
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a mode of its own", half("turbo", "nb-1", "turbo"), `allot.dev/gpu-compute-mode: "turbo" is not allowed: one of capped, fair, shared`},
		{"a mode on a whole GPU", func() *corev1.Pod {
			p := kubetest.PodSpec{Name: "whole", Queue: "team-a", GPUs: 1, Annotations: map[string]string{v1alpha1.AnnotationComputeMode: "shared"}}.Pod()
			p.Namespace = "ml"
			return p
		}(), "allot.dev/gpu-compute-mode is set without"},
	} {
		if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, c.pod, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
	fieldsPolicyInForce(t, e, alice, "ml", "strict")
	loosen := []byte(`{"metadata":{"annotations":{"allot.dev/gpu-compute-mode":"shared"}}}`)
	if _, err := alice.CoreV1().Pods("ml").Patch(e.Ctx, "strict", types.MergePatchType, loosen, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "allot.dev/gpu-compute-mode") {
		t.Errorf("alice loosening a running pod's compute mode: %v, want it refused", err)
	}
}
