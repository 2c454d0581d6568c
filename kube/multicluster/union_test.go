package multicluster

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// TestWorkersQueuedPodsKeepTheirRoom: w1 has one free GPU and a pod of team-b already
// waiting there for it; team-a, holding nothing, submits a one-GPU Job to the manager. In
// one engine cycle team-a, further below its fair share, would win w1's GPU; but w1's
// scheduler will give it to the pod it already has, so the Job goes to w2, whose GPU is
// free, and never to w1.
//
//	w1: gpu-1 [ 1 GPU ]  ← team-b's pod waits for it there
//	w2: gpu-1 [ 1 GPU ]
func TestWorkersQueuedPodsKeepTheirRoom(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelGPUProduct: "A100-SXM4-80GB"}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{gpuResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("64"),
				corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	}
	gpu := corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuResource: resource.MustParse("1")}}
	queued := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b-0", Namespace: "team", UID: "b-0", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute)),
		Labels: map[string]string{v1alpha1.LabelQueue: "team-b", v1alpha1.LabelPodGroup: "b"}, Annotations: map[string]string{v1alpha1.AnnotationMinMember: "1"}},
		Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, Containers: []corev1.Container{{Name: "main", Resources: gpu}}}}
	one := int32(1)
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "team", UID: "a", CreationTimestamp: metav1.NewTime(now),
		Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{Parallelism: &one, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: gpu}}}}}}
	queues := []*v1alpha1.Queue{{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 1}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 0}}}}
	cands := []candidate{{job: j, allowed: []string{"w1", "w2"}}}
	nodes := map[string][]*corev1.Node{"w1": {node("gpu-1")}, "w2": {node("gpu-1")}}
	pods := map[string][]*corev1.Pod{"w1": {queued}}
	u := buildUnion(now, nodes, pods, queues, nil, cands)
	got := u.decide(u.plan(engine.New(engine.Options{}), cands), cands)[cands[0].id()]
	if got.cluster != "w2" {
		t.Fatalf("team-a's Job went to %q (%s); w1's only GPU is for the pod already waiting there", got.cluster, got.why)
	}
	// With w2 full too, it waits rather than go to w1.
	pods["w2"] = []*corev1.Pod{func() *corev1.Pod { p := queued.DeepCopy(); p.Name, p.UID = "b-1", "b-1"; return p }()}
	u = buildUnion(now, nodes, pods, queues, nil, cands)
	if got := u.decide(u.plan(engine.New(engine.Options{}), cands), cands)[cands[0].id()]; got.cluster != "" {
		t.Fatalf("team-a's Job went to %q with every GPU promised to pods waiting on the workers", got.cluster)
	}
}
