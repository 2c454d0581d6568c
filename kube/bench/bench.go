package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/scheduler"
)

// Result is what `allot bench` measures.
type Result struct {
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
	Stream  = "stream"  // submit and bind at once: creation to binding
	Backlog = "backlog" // submit into a closed queue, open it: opening to binding
	Create  = "create"  // submit pods no scheduler owns: the API server's own ceiling
)

// Run submits n one-GPU pods for the scheduler named sched and times their binding.
// For Allot's scheduler they go to queue, made for them (closed first in backlog mode);
// for any other scheduler they carry no queue and mode is stream.
// stored, if set, is where binds are seen (storedPods); else a watch through the API server.
func Run(ctx context.Context, client kubernetes.Interface, allot versioned.Interface, queue string, n int, mode, sched string, stored podSource, prog func(done, total int)) (*Result, error) {
	if sched != scheduler.SchedulerName {
		return submitAndTime(ctx, client, n, "", mode, sched, nil, stored, prog)
	}
	backlog := mode == Backlog
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
func submitAndTime(ctx context.Context, client kubernetes.Interface, n int, queue, mode, sched string, release func() (time.Time, error), stored podSource, prog func(done, total int)) (*Result, error) {
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
	if mode == Create {
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
	if mode == Create {
		cleanUp(ctx, client, sel)
		return &Result{Pods: n, Submitted: submitted, PodsPerSecond: float64(n) / submitted.Seconds(), Mode: mode}, nil
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
	res := &Result{Pods: n, Bound: len(bound), Submitted: submitted, Mode: mode}
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
