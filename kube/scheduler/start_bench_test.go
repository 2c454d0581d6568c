package scheduler

import (
	"context"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/stores"
)

// BenchmarkFirstSnapshot140k is the scheduler's part of a restart at size (`allot bench
// --scenario restart`) without the API server: 5,000 nodes × 8 GPUs, 137,500 CPU-only pods
// of another scheduler running, 2,000 one-GPU pods of Allot's bound and 500 waiting, held as
// the informers hold them. Timed is a fresh scheduler's first cycle on them (nothing
// converted yet: a new conversion cache and engine each time), from the stores to the plan
// (snapshot, node room, kube-scheduler's plugins, engine). It reports the pods' memory as
// served (managed fields and all), with managed fields dropped (what the informer held
// before other schedulers' pods were trimmed) and as held now (trimObject), and the live
// heap after the cycle: what the process holds at its first bind.
func BenchmarkFirstSnapshot140k(b *testing.B) {
	nodes, pods := adapterCluster(5000, 5000, 1, 2000, 137500, 500)
	for _, p := range pods {
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("128Mi")
		if p.Spec.SchedulerName != v1alpha1.SchedulerName {
			delete(p.Labels, v1alpha1.LabelQueue)
		}
	}
	served := liveMiB()
	for _, p := range pods {
		if _, err := stores.DropManagedFields(p); err != nil {
			b.Fatal(err)
		}
	}
	unmanaged := liveMiB()
	for i, p := range pods {
		o, err := trimObject(p)
		if err != nil {
			b.Fatal(err)
		}
		pods[i] = o.(*corev1.Pod)
	}
	cached := liveMiB()
	ctx := context.Background()
	queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "restart"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 100000}}}
	for _, p := range pods {
		if p.Spec.SchedulerName == v1alpha1.SchedulerName {
			p.Labels[v1alpha1.LabelQueue] = "restart"
		}
	}
	checker, _ := newChecker(b)
	b.ReportAllocs()
	b.ResetTimer()
	var binds int
	for i := 0; i < b.N; i++ {
		conv := &convCache{}
		snap, idx := buildSnapshot(time.Unix(1e9, 0), nodes, pods, []*v1alpha1.Queue{queue}, nil, nil, conv)
		constrain(ctx, checker, snap, idx, nodes, pods, conv)
		binds = len(engine.New(engine.Options{}).Schedule(snap).Binds)
	}
	b.StopTimer()
	b.ReportMetric(float64(binds), "binds")
	b.ReportMetric(served, "MiB-pods-as-served")
	b.ReportMetric(unmanaged, "MiB-pods-without-managed-fields")
	b.ReportMetric(cached, "MiB-pods-cached")
	b.ReportMetric(liveMiB(), "MiB-live")
	runtime.KeepAlive(nodes)
	runtime.KeepAlive(pods)
}
