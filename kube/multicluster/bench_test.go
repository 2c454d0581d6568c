package multicluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/simnode"
)

// BenchmarkDispatch1000Over3Clusters submits 1,000 one-GPU Jobs to a manager at once,
// 100 in each of 10 queues, over three workers of 42 nodes × 8 GPUs each (1,008 GPUs), every
// cluster a real control plane in this process with Allot's stack on the workers. It
// prints the dispatch latency, from each Job's creation on the manager to its pod running
// on its worker (seen by a watch there): p50, p99 and the last. One round: -benchtime=1x.
//
//	go test ./kube/multicluster -run '^$' -bench Dispatch1000 -benchtime=1x
func BenchmarkDispatch1000Over3Clusters(b *testing.B) {
	const jobs, queues = 1000, 10
	spec := func(prefix string) []simnode.Spec { return []simnode.Spec{{Prefix: prefix, Count: 42, GPUs: 8}} }
	r := newRig(b, map[string][]simnode.Spec{"w1": spec("w1-gpu"), "w2": spec("w2-gpu"), "w3": spec("w3-gpu")},
		multicluster.Options{Interval: 300 * time.Millisecond})
	ctx := r.manager.Ctx
	for i := range queues {
		q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%d", i)}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 100}}}
		if _, err := r.manager.Allot.AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	mustNamespace(b, r.manager, "team")
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		l, err := r.manager.Allot.AllotV1alpha1().WorkerClusters().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, wc := range l.Items {
			if len(wc.Status.Conditions) > 0 && wc.Status.Conditions[0].Status == metav1.ConditionTrue && wc.Status.GPUs == 336 {
				ready++
			}
		}
		return ready == 3, nil
	}); err != nil {
		b.Fatal("the workers never became ready")
	}
	// When each Job's pod is first seen running, on whichever worker.
	var mu sync.Mutex
	running := map[string]time.Time{}
	where := map[string]int{}
	for name, w := range r.workers {
		f := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithNamespace("team"))
		inf := f.Core().V1().Pods().Informer()
		seen := func(o any) {
			p, ok := o.(*corev1.Pod)
			if !ok || p.Status.Phase != corev1.PodRunning {
				return
			}
			mu.Lock()
			if _, had := running[p.Labels["job-name"]]; !had {
				running[p.Labels["job-name"]] = time.Now()
				where[name]++
			}
			mu.Unlock()
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
		f.Start(ctx.Done())
	}
	b.ResetTimer()
	start := time.Now()
	created := make([]time.Time, jobs)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			created[i] = time.Now()
			if _, err := r.manager.Client.BatchV1().Jobs("team").Create(ctx, job(fmt.Sprintf("j-%d", i), fmt.Sprintf("team-%d", i%queues), 1, 1, nil),
				metav1.CreateOptions{}); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	submitted := time.Since(start)
	last := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		n := len(running)
		mu.Unlock()
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			fmt.Printf("%5.1f s: %d of %d running; on the manager: %s\n", time.Since(start).Seconds(), n, jobs, r.dispatchCounts(b))
		}
		return n == jobs, nil
	}); err != nil {
		b.Fatalf("%d of %d running after 5 minutes; on the manager: %s", len(running), jobs, r.dispatchCounts(b))
	}
	b.StopTimer()
	lat := make([]float64, jobs)
	mu.Lock()
	for i := range jobs {
		lat[i] = running[fmt.Sprintf("j-%d", i)].Sub(created[i]).Seconds()
	}
	mu.Unlock()
	slices.Sort(lat)
	p := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(p(0.50), "p50-s")
	b.ReportMetric(p(0.99), "p99-s")
	fmt.Printf("dispatch latency, %d Jobs over 3 clusters (submitted in %.1f s), from creation on the manager to running on a worker:\n", jobs, submitted.Seconds())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "p50\tp99\tlast\ton w1\ton w2\ton w3\t\n")
	fmt.Fprintf(tw, "%.2f s\t%.2f s\t%.2f s\t%d\t%d\t%d\t\n", p(0.5), p(0.99), lat[len(lat)-1], where["w1"], where["w2"], where["w3"])
	_ = tw.Flush()
}

// dispatchCounts says how many of the manager's Jobs went to each cluster, and the most
// common reason of those that wait.
func (r *rig) dispatchCounts(b *testing.B) string {
	l, err := r.manager.Client.BatchV1().Jobs("team").List(r.manager.Ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	by, why := map[string]int{}, map[string]int{}
	for _, j := range l.Items {
		c := j.Annotations[multicluster.AnnotationCluster]
		by[c]++
		if w := j.Annotations[multicluster.AnnotationWaiting]; w != "" {
			why[w]++
		}
	}
	top, n := "", 0
	for w, k := range why {
		if k > n {
			top, n = w, k
		}
	}
	return fmt.Sprintf("by cluster %v; %d waiting, most: %q", by, n, top)
}
