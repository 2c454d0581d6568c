package bench

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/scheduler"
)

// kueueScenario is Kueue's own large-scale performance test in shape (issue 59, point 3):
// per 1,000 nodes of 8 GPUs, 1,000 queues in departments of 100 (Kueue's cohorts), each
// queue's quota its part of the cluster, and 50,000 workloads of mixed sizes and
// priorities made with no scheduler running. Kueue's test times admission alone, with no
// nodes; here the pods are placed and bound: the time is from the scheduler's start until
// its binds settle (every workload that fits is bound). The ceiling is the bench itself
// binding the same pods to the same nodes on a fresh cluster of the same shape, with as
// many binds in flight, deciding nothing.
var kueueScenario = Scenario{
	name:  "kueue",
	about: "Kueue's large shape: 1,000 queues in departments, 50,000 workloads of mixed sizes and priorities, bound until the cluster is full",
	Nodes: 1000,
	run:   runKueue,
}

// Per 1,000 nodes: queues, and workloads per node.
const (
	kueueQueuesPer1000 = 1000
	kueueDeptSize      = 100
	kueueWorkPerNode   = 50
	// kueueSettle is how long no bind may come for the binds to count as settled.
	kueueSettle = 5 * time.Second
)

// kueuePriorities are the workloads' PriorityClasses, lowest first.
var kueuePriorities = []string{"bench-low", "bench-medium", "bench-high"}

// kueueWorkload is one workload of the shape: a pod, or a gang of two.
type kueueWorkload struct {
	name, queue string
	priority    int // index in kueuePriorities
	gpus, pods  int
}

// kueueShape draws the workloads, the same for every cluster of a run: 60% one GPU at
// low priority, 30% four GPUs at medium, 10% gangs of two 8-GPU pods at high (as many GPUs
// as a node has, where it has fewer).
func kueueShape(nodes, gpus int) (queues []string, depts map[string]string, work []kueueWorkload) {
	nq := max(1, kueueQueuesPer1000*nodes/1000)
	depts = map[string]string{}
	for i := 0; i < nq; i++ {
		q := fmt.Sprintf("team-%04d", i)
		queues = append(queues, q)
		depts[q] = fmt.Sprintf("dept-%02d", i/kueueDeptSize)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < kueueWorkPerNode*nodes; i++ {
		w := kueueWorkload{name: fmt.Sprintf("w-%05d", i), queue: queues[r.IntN(nq)], pods: 1}
		switch k := r.IntN(10); {
		case k < 6:
			w.gpus = 1
		case k < 9:
			w.priority, w.gpus = 1, min(4, gpus)
		default:
			w.priority, w.gpus, w.pods = 2, min(8, gpus), 2
		}
		work = append(work, w)
	}
	return queues, depts, work
}

// setUpKueue makes the shape's PriorityClasses, queues and pods on h's cluster and gives
// how many pods it made and how long they took.
func setUpKueue(h *scenarioHarness, queues []string, depts map[string]string, work []kueueWorkload) (int, time.Duration, error) {
	for i, name := range kueuePriorities {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: int32(100 * (i + 1))}
		if _, err := h.client.SchedulingV1().PriorityClasses().Create(h.ctx, pc, metav1.CreateOptions{}); err != nil {
			return 0, 0, fmt.Errorf("creating PriorityClass %s: %w", name, err)
		}
	}
	share := max(1, h.opts.Nodes*h.opts.GPUs/len(queues))
	perDept := map[string]int{}
	for _, q := range queues {
		perDept[depts[q]] += share
	}
	for d, quota := range perDept {
		if err := h.createQueue(d, v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: int32(quota)}}); err != nil {
			return 0, 0, err
		}
	}
	for _, q := range queues {
		if err := h.createQueue(q, v1alpha1.QueueSpec{Parent: depts[q], GPU: v1alpha1.GPUQuota{Quota: int32(share)}}); err != nil {
			return 0, 0, err
		}
	}
	type podOf struct {
		w *kueueWorkload
		i int
	}
	var pods []podOf
	for i := range work {
		for k := 0; k < work[i].pods; k++ {
			pods = append(pods, podOf{&work[i], k})
		}
	}
	took, err := h.createPods(len(pods), "workloads' pods", func(i int) *corev1.Pod {
		w, k := pods[i].w, pods[i].i
		var p *corev1.Pod
		if w.pods > 1 {
			p = gangPods(w.name, "kueue", w.queue, w.pods, w.gpus)(k)
		} else {
			p = scenarioPod(w.name, "kueue", w.queue, w.gpus)
		}
		p.Spec.PriorityClassName = kueuePriorities[w.priority]
		return p
	})
	return len(pods), took, err
}

// settled waits until pods of role have been bound and no bind has come for kueueSettle.
func (h *scenarioHarness) settled(role string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := -1, time.Now()
	for {
		n := h.pods.count(role, podBound)
		if n != last {
			last, since = n, time.Now()
		}
		if n > 0 && time.Since(since) >= kueueSettle {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("binds did not settle within %s (%d bound)", timeout, n)
		}
		select {
		case <-h.ctx.Done():
			return h.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func runKueue(h *scenarioHarness) (*ScenarioReport, error) {
	queues, depts, work := kueueShape(h.opts.Nodes, h.opts.GPUs)
	made, took, err := setUpKueue(h, queues, depts, work)
	if err != nil {
		return nil, err
	}
	nd := (len(queues) + kueueDeptSize - 1) / kueueDeptSize
	depart := "departments"
	if nd == 1 {
		depart = "department"
	}
	rep := &ScenarioReport{Shape: fmt.Sprintf("%d nodes × %d GPUs; %d queues in %d %s; %d workloads (%d pods: 60%% one GPU at low priority, 30%% four GPUs at medium, 10%% gangs of two 8-GPU pods at high), made with no scheduler running",
		h.opts.Nodes, h.opts.GPUs, len(queues), nd, depart, len(work), made),
		Origin: "the scheduler's start", Created: made, Create: took}
	h.measureScheduler()
	start, err := h.startScheduler()
	if err != nil {
		return nil, err
	}
	if err := h.settled("kueue", 30*time.Minute); err != nil {
		return nil, err
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "kueue", start)
	rep.Want, rep.Total = rep.Bound, rep.LastBind
	rep.TotalIs = "from the scheduler's start to the last binding, every workload that fits bound"
	// A cycle's plan is not yet a fixed point on this shape: GPUs lent to a queue past its
	// share by a cycle's last pass are taken back by the next (docs/performance.md). Said,
	// not hidden; not a failure of the run.
	if n := rep.Sched.Requests["create pods/eviction"]; n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d evictions of pods the scheduler had bound in an earlier cycle (reclaims of GPUs lent past a queue's fair share)", n))
	}
	// Where each bound pod went, for the ceiling.
	placed := map[string]string{}
	list, err := h.client.CoreV1().Pods("default").List(h.ctx, metav1.ListOptions{LabelSelector: labelRole + "=kueue"})
	if err != nil {
		return nil, err
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			placed[p.Name] = p.Spec.NodeName
		}
	}
	first, ceiling, err := kueueCeiling(h, queues, depts, work, placed)
	if err != nil {
		return nil, fmt.Errorf("the ceiling: %w", err)
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("the ceiling, the bench binding the same %d pods to the same nodes on a fresh cluster of the same shape (listing the waiting pods, then %d binds in flight): first bind %s, last %s; Allot at %.0f%% of it",
		len(placed), scheduler.BindWorkers, first.Round(time.Millisecond), ceiling.Round(time.Millisecond), 100*ceiling.Seconds()/rep.Total.Seconds()))
	return rep, nil
}

// kueueCeiling sets the same shape up on a fresh cluster and has the bench bind the pods
// Allot placed, each to the node Allot chose, as a scheduler that decided at once would:
// from its start it lists the waiting pods (all of them, as a scheduler must), then binds
// with as many binds in flight as Allot's scheduler. It gives the time from that start to
// its first and its last binding, as etcd stored them.
func kueueCeiling(h *scenarioHarness, queues []string, depts map[string]string, work []kueueWorkload, placed map[string]string) (first, last time.Duration, err error) {
	fmt.Fprintln(h.progressTo, "the ceiling: the same shape on a fresh cluster, bound by the bench")
	c, stop, err := startScenarioHarness(h.ctx, h.self, h.opts, h.logs, h.progressTo)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	if _, _, err := setUpKueue(c, queues, depts, work); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	waiting, err := c.client.CoreV1().Pods("default").List(c.ctx, metav1.ListOptions{FieldSelector: waitingFor(scheduler.SchedulerName)})
	if err != nil {
		return 0, 0, fmt.Errorf("listing the waiting pods: %w", err)
	}
	items := make(chan *corev1.Pod)
	go func() {
		defer close(items)
		for i := range waiting.Items {
			if _, ok := placed[waiting.Items[i].Name]; !ok {
				continue
			}
			select {
			case items <- &waiting.Items[i]:
			case <-c.ctx.Done():
				return
			}
		}
	}()
	var failed error
	var once sync.Once
	bindEach(c.ctx, items, func(p *corev1.Pod) error { return bindPod(c.ctx, c.client, p, placed[p.Name]) },
		func(err error) { once.Do(func() { failed = err }) })
	if failed != nil {
		return 0, 0, failed
	}
	if err := c.waitPods("kueue", podBound, len(placed), "the ceiling's binds stored", 10*time.Minute); err != nil {
		return 0, 0, err
	}
	f, l, _ := c.pods.span("kueue", podBound)
	return f.Sub(start), l.Sub(start), nil
}
