package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/podfit"
)

// BenchmarkAdapterCycle times what a cycle does between the informer caches and the plan,
// with and without the Kubernetes contract (podfit): 250 nodes × 8 GPUs (the size of
// `allot bench`), 1,500 running one-GPU pods of Allot (6 per node), 2,000 CPU-only pods of
// other schedulers, 500 pending one-GPU pods; every node tainted and every pod tolerating it.
func BenchmarkAdapterCycle(b *testing.B) {
	ctx := context.Background()
	var nodes []*corev1.Node
	for i := 0; i < 250; i++ {
		name := fmt.Sprintf("node-%03d", i)
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods: resource.MustParse("110"), v1alpha1.GPUResource: resource.MustParse("8")}
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: "1",
			Labels: map[string]string{corev1.LabelHostname: name}},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	var pods []*corev1.Pod
	mk := func(name, scheduler, node string, gpus int64) *corev1.Pod {
		p := basePod(name, scheduler)
		p.Labels[v1alpha1.LabelQueue] = "q"
		p.Spec.NodeName = node
		p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
		if gpus > 0 {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
		}
		return p
	}
	for i := 0; i < 1500; i++ {
		p := mk(fmt.Sprintf("run-%d", i), v1alpha1.SchedulerName, nodes[i/6].Name, 1)
		p.Annotations = map[string]string{AnnotationGPUs: fmt.Sprint(i % 6)}
		pods = append(pods, p)
	}
	for i := 0; i < 2000; i++ {
		pods = append(pods, mk(fmt.Sprintf("web-%d", i), "default-scheduler", nodes[i%250].Name, 0))
	}
	for i := 0; i < 500; i++ {
		pods = append(pods, mk(fmt.Sprintf("wait-%d", i), v1alpha1.SchedulerName, "", 1))
	}
	queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 2000}}}
	checker, _ := newChecker(b)
	for _, c := range []struct {
		name string
		fit  *podfit.Checker
	}{{"engine-only", nil}, {"with-podfit", checker}} {
		b.Run(c.name, func(b *testing.B) {
			conv := &convCache{}
			eng := engine.New(engine.Options{})
			var binds int
			for i := 0; i < b.N; i++ {
				snap, idx := buildSnapshot(time.Unix(1e9, 0), nodes, pods, []*v1alpha1.Queue{queue}, nil, nil, conv)
				constrain(ctx, c.fit, snap, idx, nodes, pods, conv)
				binds = len(eng.Schedule(snap).Binds)
			}
			b.ReportMetric(float64(binds), "binds")
		})
	}
}
