package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/scheduler"
)

// BenchResult is what `allot bench` measures.
type BenchResult struct {
	Pods, Bound   int
	Elapsed       time.Duration // first creation (a backlog: the queue opening) to last binding
	Submitted     time.Duration // first creation to last creation
	PodsPerSecond float64
	P50, P99      time.Duration // creation (a backlog: the queue opening) to binding
	// FirstBind is from the first creation (a backlog: the queue opening, the scheduler's
	// start) to the first binding: a scheduler's start, listing and first cycle.
	FirstBind time.Duration
	// Binding is the pods per second from the first binding to the last: the rate once
	// binds flow, the start left out.
	Binding float64
	Mode    string
}

// Bench modes.
const (
	benchStream  = "stream"  // submit and bind at once: creation to binding
	benchBacklog = "backlog" // submit into a closed queue, open it: opening to binding
	benchCreate  = "create"  // submit pods no scheduler owns: the API server's own ceiling
)

func newBenchCmd() *cobra.Command {
	var kubeconfig, queue string
	var pods, nodes, rounds int
	var mode, against, scenarioName, asScheduler string
	var sopts scenarioOptions
	cmd := &cobra.Command{
		Use:     "bench",
		GroupID: "run",
		Short:   "Measure scheduling throughput: submit one-GPU pods and time their binding",
		Long: `Submit --pods one-GPU pods to a running Allot (a real cluster, or allot up) in a queue of
their own, watch them bind, and print pods bound per second and the p50/p99 time from
creation to binding. The pods are deleted afterwards.

--mode backlog closes the queue (limit 0) while the pods are submitted and opens it once
the scheduler counts them all: the figures are then from the opening to each binding, the
scheduler draining a backlog rather than keeping pace with the API server's creations.
--mode create submits pods that no scheduler owns (no webhook, no binding) and times only
their creation: the most pods per second this API server can take, whatever schedules them.

--against KUBE-SCHEDULER runs upstream kube-scheduler and Allot in turn, each on a fresh
embedded API server with --nodes simulated nodes: --mode stream as above; --mode backlog
creates the pods before the scheduler starts and times from its start (listing, first
cycle, binds), and prints how close to the API server's own creation rate each drains.
Each run also shows the time to its first binding (a scheduler's start) and its pods per
second from the first binding to the last (its binds alone). Each round also times the
bench binding the pods itself, deciding nothing ("direct binds"): the most any scheduler
could show on that API server, the ceiling; the order is reversed every other round, so
Allot's runs and the ceiling's alternate. A last table gives each scheduler's pods/s as a
part of the ceiling's. --mode both runs stream, then backlog, in one sitting.

--scenario NAME runs one of the scale scenarios, each on a fresh embedded API server with
--nodes simulated nodes of --gpus-per-node GPUs and Allot's scheduler as a process of its
own, and prints its phases (creation, first and last binding, evictions issued and done),
the scheduler's API requests by verb and resource, and its peak memory:
  fill         an empty cluster filled with one-GPU pods, beside pods waiting in a closed queue
  big-gang     one gang of a pod per node, two GPUs each
  reclaim-one  a full cluster of borrowed GPUs; one-GPU pods of a queue with quota, one at a time
  reclaim-all  as many one-GPU pods of that queue as the cluster has GPUs, all reclaimed
  reclaim-big  one gang of whole nodes, half the cluster, reclaimed
  restart      a scheduler restart among 28 pods a node (default 5000 nodes: 140,000 pods)
docs/performance.md has the shapes and the figures.`,
		Example: "  allot up --nodes 250 --gpus-per-node 8 --data-dir /tmp/bench &\n  allot bench --kubeconfig /tmp/bench/kubeconfig --pods 2000\n  allot bench --kubeconfig /tmp/bench/kubeconfig --pods 2000 --mode backlog\n" +
			"  make bench-kube   # allot bench --against bin/kube-scheduler --nodes 250 --pods 2000\n" +
			"  make bench-kube MODE=backlog\n  make bench-kube MODE=both\n" +
			"  allot bench --scenario fill\n  allot bench --scenario reclaim-one --nodes 50",
		Args: func(cmd *cobra.Command, args []string) error {
			if asScheduler != "" {
				return nil // allot scheduler's flags, after --
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if asScheduler != "" {
				return runBenchScheduler(cmd, asScheduler, sopts.CPUProfile, args)
			}
			if scenarioName != "" {
				s, err := findScenario(scenarioName)
				if err != nil {
					return err
				}
				sopts.Nodes = s.nodes
				if cmd.Flags().Changed("nodes") {
					sopts.Nodes = nodes
				}
				switch {
				case sopts.Nodes < 1 || sopts.Nodes > 10000:
					return fmt.Errorf("--nodes %d is not allowed with --scenario: 1 to 10000", sopts.Nodes)
				case sopts.GPUs < 1 || sopts.GPUs > 64:
					return fmt.Errorf("--gpus-per-node %d is not allowed: 1 to 64", sopts.GPUs)
				case sopts.StopAfter < 0 || sopts.StopAfter > 30*time.Second:
					return fmt.Errorf("--stop-after %s is not allowed: 0 to 30s (the pods' grace period)", sopts.StopAfter)
				}
				self, err := os.Executable()
				if err != nil {
					return err
				}
				_, err = runScenario(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), self, s, sopts)
				return err
			}
			if pods < 1 {
				return fmt.Errorf("--pods %d is not allowed: 1 or more", pods)
			}
			if against != "" {
				switch {
				case mode != benchStream && mode != benchBacklog && mode != benchBoth:
					return fmt.Errorf("--mode %s is not allowed with --against: stream, backlog or both", mode)
				case nodes < 1 || nodes > 5000:
					return fmt.Errorf("--nodes %d is not allowed: 1 to 5000", nodes)
				case pods < 2:
					return fmt.Errorf("--pods %d is not allowed with --against: 2 or more (a rate needs a first and a last pod)", pods)
				case rounds < 1:
					return fmt.Errorf("--rounds %d is not allowed: 1 or more", rounds)
				case pods > nodes*8:
					return fmt.Errorf("--pods %d is not allowed with --nodes %d: at most %d, one GPU each", pods, nodes, nodes*8)
				}
				if _, err := os.Stat(against); err != nil {
					return fmt.Errorf("--against %s: %w (make bench-kube builds kube-scheduler from the k8s.io/kubernetes module into bin/)", against, err)
				}
				self, err := os.Executable()
				if err != nil {
					return err
				}
				_, err = benchAgainst(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), self, against, mode, nodes, pods, rounds)
				return err
			}
			if mode != benchStream && mode != benchBacklog && mode != benchCreate {
				return fmt.Errorf("--mode %q is not allowed: %s, %s or %s", mode, benchStream, benchBacklog, benchCreate)
			}
			rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
			}
			rc.QPS, rc.Burst = 2000, 4000
			// Protobuf, as kubectl and the controllers use for built-in kinds: cheaper for
			// the API server than JSON.
			rc.ContentType = runtime.ContentTypeProtobuf
			res, err := runBench(cmd.Context(), kubernetes.NewForConfigOrDie(rc), allotclient.NewForConfigOrDie(rc), queue, pods, mode, scheduler.SchedulerName, nil,
				progress(cmd.ErrOrStderr(), pods, "binding"))
			if err != nil {
				return err
			}
			if mode == benchCreate {
				fmt.Fprintf(cmd.OutOrStdout(), "%d pods created in %s: %.0f pods/s (no scheduler, no webhook: the API server's ceiling)\n",
					res.Pods, res.Submitted.Round(time.Millisecond), res.PodsPerSecond)
				return nil
			}
			from := "creation"
			if mode == benchBacklog {
				from = "the queue opening"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d of %d pods bound in %s: %.0f pods/s; %s to binding p50 %s, p99 %s (all submitted within %s)\n",
				res.Bound, res.Pods, res.Elapsed.Round(time.Millisecond), res.PodsPerSecond, from, res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond),
				res.Submitted.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", filepath.Join(os.TempDir(), "allot-up", "kubeconfig"), "kubeconfig of the cluster")
	cmd.Flags().IntVar(&pods, "pods", 2000, "one-GPU pods to submit")
	cmd.Flags().StringVar(&queue, "queue", "bench", "queue to create and submit to")
	cmd.Flags().StringVar(&against, "against", "", "a kube-scheduler binary: run it and Allot in turn, each on a fresh embedded API server of --nodes simulated nodes, and print both")
	cmd.Flags().IntVar(&nodes, "nodes", 250, "with --against: simulated nodes of 8 GPUs; with --scenario: simulated nodes (default: the scenario's, 500, or 5000 for restart)")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "with --against: rounds, the order alternating")
	cmd.Flags().StringVar(&scenarioName, "scenario", "", "run a scale scenario on a fresh embedded API server with simulated nodes: "+scenarioNames())
	cmd.Flags().IntVar(&sopts.GPUs, "gpus-per-node", 8, "with --scenario: GPUs of each simulated node")
	cmd.Flags().DurationVar(&sopts.StopAfter, "stop-after", 0, "with --scenario: how long an evicted pod's containers take to stop (0: at once; at most its 30s grace period)")
	cmd.Flags().StringVar(&sopts.CPUProfile, "cpu-profile", "", "with --scenario: write a CPU profile of the measured scheduler to this file")
	// The scheduler a scenario runs: allot bench --as-scheduler REPORT -- [scheduler flags].
	cmd.Flags().StringVar(&asScheduler, "as-scheduler", "", "run allot scheduler with the flags after --, its API requests counted, and write them and its peak memory to this file when it stops")
	_ = cmd.Flags().MarkHidden("as-scheduler")
	cmd.Flags().StringVar(&mode, "mode", benchStream, "stream (creation to binding), backlog (a closed queue opened: opening to binding) or create (creation alone); with --against also both (stream, then backlog)")
	return cmd
}

// runBench submits n one-GPU pods for the scheduler named sched and times their binding.
// For Allot's scheduler they go to queue, made for them (closed first in backlog mode);
// for any other scheduler they carry no queue and mode is stream.
// stored, if set, is where binds are seen (storedPods); else a watch through the API server.
func runBench(ctx context.Context, client kubernetes.Interface, allot versioned.Interface, queue string, n int, mode, sched string, stored podSource, prog func(done, total int)) (*BenchResult, error) {
	if sched != scheduler.SchedulerName {
		return submitAndTime(ctx, client, n, "", mode, sched, nil, stored, prog)
	}
	backlog := mode == benchBacklog
	if err := ensureQueue(ctx, allot, queue, n, !backlog); err != nil {
		return nil, err
	}
	var open func() (time.Time, error)
	if backlog {
		// Open the queue once the scheduler counts every pod as waiting in it.
		open = func() (time.Time, error) {
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				q, err := allot.AllotV1alpha1().Queues().Get(ctx, queue, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				return int64(q.Status.Pending) == int64(n), nil
			})
			if err != nil {
				return time.Time{}, fmt.Errorf("the scheduler did not count the %d pods waiting in queue %s: %w", n, queue, err)
			}
			opened := time.Now()
			if err := setQueueGPU(ctx, allot, queue, n, true); err != nil {
				return time.Time{}, fmt.Errorf("opening queue %s: %w", queue, err)
			}
			return opened, nil
		}
	}
	return submitAndTime(ctx, client, n, queue, mode, sched, open, stored, prog)
}

// queueGPU is the bench queue's GPU spec: open, room for all n pods (no limit); closed,
// limit 0, so that they wait with a reason.
func queueGPU(n int, open bool) v1alpha1.GPUQuota {
	if open {
		return v1alpha1.GPUQuota{Quota: int32(min(n, math.MaxInt32))}
	}
	return v1alpha1.GPUQuota{Limit: new(int32)}
}

// ensureQueue makes the bench queue, or sets an existing one, open or closed.
func ensureQueue(ctx context.Context, allot versioned.Interface, queue string, n int, open bool) error {
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: queue}, Spec: v1alpha1.QueueSpec{GPU: queueGPU(n, open)}}
	if _, err := allot.AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if err := setQueueGPU(ctx, allot, queue, n, open); err != nil {
			return fmt.Errorf("queue %s: %w", queue, err)
		}
	} else if err != nil {
		return fmt.Errorf("creating queue %s: %w", queue, err)
	}
	return nil
}

// setQueueGPU sets an existing queue's GPU quota and limit by a merge patch, the rest of
// its spec (the GPU weight too) left as it is; an open queue's limit is removed (null).
func setQueueGPU(ctx context.Context, allot versioned.Interface, queue string, n int, open bool) error {
	g := queueGPU(n, open)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"gpu": map[string]any{"quota": g.Quota, "limit": g.Limit}}})
	_, err := allot.AllotV1alpha1().Queues().Patch(ctx, queue, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// podSource hands seen each version of the pods of namespace default from now on, until
// ctx ends.
type podSource func(ctx context.Context, seen func(*corev1.Pod)) error

// submitAndTime creates n one-GPU pods for scheduler sched (in queue, if not empty) and
// waits for them to bind. With release set, nothing may bind before it is called, after
// every pod is created, and times count from the moment it returns. Binds are seen from
// stored if set, else from an informer.
func submitAndTime(ctx context.Context, client kubernetes.Interface, n int, queue, mode, sched string, release func() (time.Time, error), stored podSource, prog func(done, total int)) (*BenchResult, error) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var mu sync.Mutex
	created := map[string]time.Time{}
	bound := map[string]time.Time{}
	allBound := make(chan struct{})
	seen := func(p *corev1.Pod) {
		if p.Spec.NodeName == "" || p.Labels["allot.dev/bench"] != run {
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
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	if stored != nil {
		if err := stored(watchCtx, seen); err != nil {
			return nil, err
		}
	} else {
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = "allot.dev/bench=" + run
		}))
		inf := factory.Core().V1().Pods().Informer()
		pod := func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				seen(p)
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: pod, UpdateFunc: func(_, o any) { pod(o) }})
		factory.Start(watchCtx.Done())
		cache.WaitForCacheSync(watchCtx.Done(), inf.HasSynced)
	}

	schedulerName := sched
	if mode == benchCreate {
		schedulerName = "allot-bench-nobody" // neither Allot's webhooks nor its scheduler take these
	}
	names := make(chan string)
	var wg sync.WaitGroup
	var createErr error
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				labels := map[string]string{"allot.dev/bench": run}
				if queue != "" {
					labels[scheduler.LabelQueue] = queue
				}
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
					Spec: corev1.PodSpec{SchedulerName: schedulerName, Containers: []corev1.Container{{Name: "c", Image: "bench",
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
	sel := metav1.ListOptions{LabelSelector: "allot.dev/bench=" + run}
	if mode == benchCreate {
		cleanUp(ctx, client, sel)
		return &BenchResult{Pods: n, Submitted: submitted, PodsPerSecond: float64(n) / submitted.Seconds(), Mode: mode}, nil
	}
	var opened time.Time
	backlog := release != nil
	if backlog {
		var err error
		if opened, err = release(); err != nil {
			return nil, err
		}
		mu.Lock()
		early := 0
		for _, at := range bound {
			if at.Before(opened) {
				early++
			}
		}
		mu.Unlock()
		if early > 0 {
			return nil, fmt.Errorf("%d pods bound before they were let go", early)
		}
	}
	select {
	case <-allBound:
	case <-time.After(5 * time.Minute):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	res := &BenchResult{Pods: n, Bound: len(bound), Submitted: submitted, Mode: mode}
	var first, firstBound, last time.Time
	var lat []time.Duration
	for name, c := range created {
		if backlog {
			c = opened
		}
		if first.IsZero() || c.Before(first) {
			first = c
		}
		if b, ok := bound[name]; ok {
			lat = append(lat, b.Sub(c))
			if b.After(last) {
				last = b
			}
			if firstBound.IsZero() || b.Before(firstBound) {
				firstBound = b
			}
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
		res.P50, res.P99 = lat[len(lat)/2], lat[min(len(lat)*99/100, len(lat)-1)]
		res.Elapsed = last.Sub(first)
		res.PodsPerSecond = float64(len(lat)) / res.Elapsed.Seconds()
		res.FirstBind = firstBound.Sub(first)
		if len(lat) > 1 && last.After(firstBound) {
			res.Binding = float64(len(lat)-1) / last.Sub(firstBound).Seconds()
		}
	}
	cleanUp(ctx, client, sel)
	return res, nil
}

// cleanUp deletes the run's pods and waits until they are gone: the next run must find the
// GPUs free.
func cleanUp(ctx context.Context, client kubernetes.Interface, sel metav1.ListOptions) {
	_ = client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods("default").List(ctx, sel)
		return err == nil && len(l.Items) == 0, nil
	})
}
