package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/scheduler"
)

// BenchResult is what `allot bench` measures.
type BenchResult struct {
	Pods, Bound   int
	Elapsed       time.Duration // first creation to last binding
	Submitted     time.Duration // first creation to last creation
	PodsPerSecond float64
	P50, P99      time.Duration // creation to binding
}

func newBenchCmd() *cobra.Command {
	var kubeconfig, queue string
	var pods int
	cmd := &cobra.Command{
		Use:     "bench",
		GroupID: "run",
		Short:   "Measure scheduling throughput: submit one-GPU pods and time their binding",
		Long: `Submit --pods one-GPU pods to a running Allot (a real cluster, or allot up) in a queue of
their own, watch them bind, and print pods bound per second and the p50/p99 time from
creation to binding. The pods are deleted afterwards.`,
		Example: "  allot up --nodes 250 --gpus-per-node 8 --data-dir /tmp/bench &\n  allot bench --kubeconfig /tmp/bench/kubeconfig --pods 2000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pods < 1 {
				return fmt.Errorf("--pods %d is not allowed: 1 or more", pods)
			}
			rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
			}
			rc.QPS, rc.Burst = 2000, 4000
			// Protobuf, as kubectl and the controllers use for built-in kinds: cheaper for
			// the API server than JSON.
			rc.ContentType = runtime.ContentTypeProtobuf
			res, err := runBench(cmd.Context(), kubernetes.NewForConfigOrDie(rc), dynamic.NewForConfigOrDie(rc), queue, pods,
				progress(cmd.ErrOrStderr(), pods, "binding"))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d of %d pods bound in %s: %.0f pods/s; creation to binding p50 %s, p99 %s (all submitted within %s)\n",
				res.Bound, res.Pods, res.Elapsed.Round(time.Millisecond), res.PodsPerSecond, res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond),
				res.Submitted.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", filepath.Join(os.TempDir(), "allot-up", "kubeconfig"), "kubeconfig of the cluster")
	cmd.Flags().IntVar(&pods, "pods", 2000, "one-GPU pods to submit")
	cmd.Flags().StringVar(&queue, "queue", "bench", "queue to create and submit to")
	return cmd
}

func runBench(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, queue string, n int, prog func(done, total int)) (*BenchResult, error) {
	queues := dyn.Resource(v1alpha1.Queues)
	q := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "Queue",
		"metadata": map[string]any{"name": queue}, "spec": map[string]any{"gpu": map[string]any{"quota": int64(n)}}}}
	if _, err := queues.Create(ctx, q, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating queue %s: %w", queue, err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var mu sync.Mutex
	created := map[string]time.Time{}
	bound := map[string]time.Time{}
	allBound := make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "allot.dev/bench=" + run
	}))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := bound[p.Name]; !ok {
			bound[p.Name] = time.Now()
			prog(len(bound), n)
			if len(bound) == n {
				close(allBound)
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	cache.WaitForCacheSync(stop, inf.HasSynced)

	names := make(chan string)
	var wg sync.WaitGroup
	var createErr error
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
					Labels: map[string]string{scheduler.LabelQueue: queue, "allot.dev/bench": run}},
					Spec: corev1.PodSpec{SchedulerName: scheduler.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "bench",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{scheduler.GPUResource: resource.MustParse("1")}}}}}}
				start := time.Now()
				if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					createErr = err
					mu.Unlock()
					continue
				}
				mu.Lock()
				created[name] = start
				mu.Unlock()
			}
		}()
	}
	begin := time.Now()
	for i := 0; i < n; i++ {
		names <- fmt.Sprintf("bench-%s-%d", run, i)
	}
	close(names)
	wg.Wait()
	submitted := time.Since(begin)
	if createErr != nil {
		return nil, fmt.Errorf("creating pods: %w", createErr)
	}
	select {
	case <-allBound:
	case <-time.After(5 * time.Minute):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	res := &BenchResult{Pods: n, Bound: len(bound), Submitted: submitted}
	var first, last time.Time
	var lat []time.Duration
	for name, c := range created {
		if first.IsZero() || c.Before(first) {
			first = c
		}
		if b, ok := bound[name]; ok {
			lat = append(lat, b.Sub(c))
			if b.After(last) {
				last = b
			}
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
		res.P50, res.P99 = lat[len(lat)/2], lat[min(len(lat)*99/100, len(lat)-1)]
		res.Elapsed = last.Sub(first)
		res.PodsPerSecond = float64(len(lat)) / res.Elapsed.Seconds()
	}
	// Clean up and wait until the pods are gone: the next run must find the GPUs free.
	sel := metav1.ListOptions{LabelSelector: "allot.dev/bench=" + run}
	_ = client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods("default").List(ctx, sel)
		return err == nil && len(l.Items) == 0, nil
	})
	return res, nil
}
