package inspect

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A workload's GPU use, from its node's agent's Lease: the mean utilisation and the used
// memory of the whole GPUs it holds; of a slice, the memory its pod was measured to hold,
// and no utilisation of its own (its GPU is busy for all its sharers).
//
//	dgx-1 (agent's Lease): GPU 0 80% 30,000 MiB · GPU 1 20% 10,000 MiB · GPU 2 60%, shared
//	train: whole GPUs 0,1      nb: half of GPU 2, holding 9,000 MiB      idle: waits
func TestWorkloadGPUUseFromItsAgent(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Annotations: map[string]string{v1alpha1.AnnotationAgent: "v1"}}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "allot-agent-dgx-1", Namespace: v1alpha1.SystemNamespace,
		Labels:      map[string]string{v1alpha1.LabelAgentLease: "dgx-1"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "80,20,60", v1alpha1.AnnotationGPUMemoryUsed: "30000,10000,12000"}}}
	pod := func(name string, ann map[string]string, running bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name),
			Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}, Annotations: ann}}
		if running {
			p.Spec.NodeName, p.Status.Phase = "dgx-1", corev1.PodRunning
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("train", map[string]string{v1alpha1.AnnotationGPUs: "0,1"}, true),
		pod("nb", map[string]string{v1alpha1.AnnotationGPUs: "2", v1alpha1.AnnotationGPUShare: "0.5", v1alpha1.AnnotationPodGPUMemoryUsed: "9000"}, true),
		pod("idle", nil, false),
	}
	ws := BuildWorkloads(Objects{Pods: pods})
	withUse(context.Background(), fake.NewClientset(lease), []*corev1.Node{node}, ws)
	use := map[string]*GPUUse{}
	for _, w := range ws {
		use[w.Name] = w.Use
	}
	if u := use["train"]; u == nil || u.Utilization == nil || *u.Utilization != 50 || u.GPUs != 2 || u.MemoryUsedMi == nil || *u.MemoryUsedMi != 40000 {
		t.Errorf("train's use %+v, want 50%% of 2 GPUs and 40,000 MiB", u)
	}
	if u := use["nb"]; u == nil || u.Utilization != nil || u.MemoryUsedMi == nil || *u.MemoryUsedMi != 9000 {
		t.Errorf("nb's use %+v, want no utilisation of its own and 9,000 MiB", u)
	}
	if u := use["idle"]; u != nil {
		t.Errorf("a waiting workload's use %+v", u)
	}
	// Without the Lease (a user who may not read it) the agent's node says nothing.
	ws = BuildWorkloads(Objects{Pods: pods})
	withUse(context.Background(), fake.NewClientset(), []*corev1.Node{node}, ws)
	for _, w := range ws {
		if w.Use != nil {
			t.Errorf("%s's use without the agent's report: %+v", w.Name, w.Use)
		}
	}
}
