// Package idle gives back GPUs that workloads hold without using: per queue and class of
// workload (spec.idleTimeout, spec.idleThreshold), it watches how long every GPU a
// workload's pods hold has stayed under the threshold, by the utilisation the nodes'
// agents report, and stops the workload when that reaches the timeout: an interactive one
// suspended, an inference one scaled to zero, each kept to be resumed. It runs in the
// scheduler's process and acts only while that replica leads.
package idle

import (
	"context"
	"log/slog"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/consumption"
	"github.com/allot-dev/allot/kube/control"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/stores"
)

// DefaultTick is how often the controller looks at the nodes' reports: the agents report
// about as often, and an idle timeout is minutes to hours.
const DefaultTick = 30 * time.Second

// Options tune the controller.
type Options struct {
	// Tick is the time between looks; zero means DefaultTick. Tests shorten it.
	Tick time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Leading tells whether this replica may act now (the scheduler's Lease); nil means
	// always (a single scheduler).
	Leading func() bool
	// Recorder writes the Events; nil means one to the API server.
	Recorder record.EventRecorder
	// Mapper turns a workload's kind into its resource; nil means one from discovery.
	Mapper meta.RESTMapper
	// Consumption, when set, counts the GPU-hours recorded as Prometheus series too.
	Consumption *consumption.Metrics
	// Simulated says which nodes' own utilisation annotation is believed without an
	// agent's fresh Lease: the embedded cluster's simulated nodes, whose kubelet writes
	// it. Nil, as on a real cluster: only agents' readings count, so that a node label
	// nobody checks cannot make a notebook idle or busy.
	Simulated func(*corev1.Node) bool
	// Stores is where pods, nodes, the agents' Leases and Queues are read: the scheduler's
	// informers (scheduler.Stores), so that its process holds one copy of every pod. Nil:
	// Run starts informers of the controller's own (a controller run alone).
	Stores stores.Source
}

// Controller is the idle controller.
type Controller struct {
	opts     Options
	client   kubernetes.Interface
	dyn      dynamic.Interface
	ctl      control.Clients
	events   record.EventBroadcaster
	recorder record.EventRecorder
	track    *Tracker
	// told holds the workloads already reported idle past their timeout in this spell
	// that the controller does not stop (stoppable): they are told once.
	told map[string]bool
	// toldUnmeasured holds the workloads whose queue was told their GPUs are not measured
	// (MIG instances, DRA claims): once per workload while it lives.
	toldUnmeasured map[string]bool
	// nodes are the nodes of the last look, by name.
	nodes map[string]*corev1.Node
	// usage keeps the GPU-hours given and used (consumption.go).
	usage *consumption.Recorder
}

// New makes a controller acting through these clients.
func New(client kubernetes.Interface, dyn dynamic.Interface, allot versioned.Interface, opts Options) *Controller {
	if opts.Tick <= 0 {
		opts.Tick = DefaultTick
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Leading == nil {
		opts.Leading = func() bool { return true }
	}
	if opts.Mapper == nil {
		opts.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	}
	c := &Controller{opts: opts, client: client, dyn: dyn, recorder: opts.Recorder,
		ctl:   control.Clients{Client: client, Allot: allot, Dyn: dyn, Mapper: opts.Mapper},
		track: NewTracker(), told: map[string]bool{}, toldUnmeasured: map[string]bool{},
		usage: &consumption.Recorder{Client: client, Metrics: opts.Consumption}}
	if c.recorder == nil {
		c.events = record.NewBroadcaster()
		c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		c.recorder = c.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: v1alpha1.SchedulerName})
	}
	return c
}

// Run looks every tick until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.opts.Tick)
	defer t.Stop()
	if c.events != nil {
		defer c.events.Shutdown()
	}
	if c.opts.Stores == nil {
		src, err := stores.Start(ctx, c.client, c.ctl.Allot)
		if err != nil {
			if ctx.Err() == nil {
				slog.Error("allot idle: the controller's informers did not list: it stops", "err", err)
			}
			return
		}
		c.opts.Stores = src
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !c.opts.Leading() {
			// Another replica judges; its clocks, not these, run.
			c.track = NewTracker()
			clear(c.told)
			continue
		}
		if err := c.Step(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("allot idle: looking at GPU utilisation", "err", err)
		}
	}
}

// policy is a queue's idle rule.
type policy struct {
	queue     string
	threshold int
	timeout   map[string]time.Duration // by class; absent: never
}

func policies(qs []*v1alpha1.Queue) map[string]policy {
	out := map[string]policy{}
	for _, q := range qs {
		p := policy{queue: q.Name, threshold: v1alpha1.DefaultIdleThreshold, timeout: map[string]time.Duration{}}
		if q.Spec.IdleThreshold != nil {
			p.threshold = int(*q.Spec.IdleThreshold)
		}
		if t := q.Spec.IdleTimeout; t != nil {
			if t.Interactive != nil && t.Interactive.Duration > 0 {
				p.timeout[v1alpha1.ClassInteractive] = t.Interactive.Duration
			}
			if t.Inference != nil && t.Inference.Duration > 0 {
				p.timeout[v1alpha1.ClassInference] = t.Inference.Duration
			}
		}
		out[q.Name] = p
	}
	return out
}

// Step is one look: read the queues, nodes and workloads, judge each interactive and
// inference workload's GPUs, publish how long they have been idle, and stop those past
// their queue's timeout.
func (c *Controller) Step(ctx context.Context) error {
	now := c.opts.Now()
	st, err := c.opts.Stores.Get()
	if err != nil {
		return err
	}
	qs, err := st.Queues.List(labels.Everything())
	if err != nil {
		return err
	}
	pols := policies(qs)
	readings, uuids, err := c.readings(st, now)
	if err != nil {
		return err
	}
	o, err := c.objects(ctx, st)
	if err != nil {
		return err
	}
	pods := map[string]*corev1.Pod{}
	for _, p := range o.Pods {
		pods[string(p.UID)] = p
	}
	ws := inspect.BuildWorkloads(o)
	c.count(ctx, now, ws, pods, readings, uuids)
	live := map[string]bool{}
	for _, w := range ws {
		// The policy of each class and queue its pods carry: a workload whose pods
		// disagree (a StatefulSet whose template was relabelled under OnDelete) is held to
		// the strictest of them, never let off.
		class, pol, ok := strictest(podLabels(&w, pods), pols)
		if !ok {
			continue
		}
		key := w.Namespace + "/" + w.Kind + "/" + w.Name
		live[key] = true
		var devs []Device
		known, unmeasured := true, ""
		for _, wp := range w.Pods {
			p := pods[string(wp.UID)]
			if p == nil {
				continue
			}
			d, ok := PodDevices(p, uuids[p.Spec.NodeName])
			known = known && ok
			devs = append(devs, d...)
			if u := Unmeasured(p); u != "" {
				unmeasured = u
			}
		}
		if _, has := pol.timeout[class]; has && unmeasured != "" {
			c.tellUnmeasured(&w, key, class, pol, unmeasured)
		}
		state := Judge(readings, devs, known, pol.threshold)
		idleFor := c.track.Observe(key, state, now)
		if state != Idle {
			delete(c.told, key)
		}
		since, idle := c.track.Since(key)
		c.publish(ctx, &w, since, idle, state)
		timeout, ok := pol.timeout[class]
		if !idle || !ok || idleFor < timeout {
			continue
		}
		c.stop(ctx, &w, key, class, idleFor, pol, now)
	}
	c.track.Keep(live)
	for k := range c.told {
		if !live[k] {
			delete(c.told, k)
		}
	}
	for k := range c.toldUnmeasured {
		if !live[k] {
			delete(c.toldUnmeasured, k)
		}
	}
	return nil
}

// podLabels are the classes and queues a workload is judged by: its pods' allot.dev/class
// and allot.dev/queue, which the pod-fields policy fixes at admission, each pair once. The
// workload's own object's labels (w.Type, w.Queue come from them first) stay the tenant's
// to write at any time: relabelling a notebook's StatefulSet as a training job, or moving
// it to a queue without a timeout, must not take it out of its queue's policy. A
// Deployment's pod without a class is inference, as its kind (not a label) says.
func podLabels(w *inspect.Workload, pods map[string]*corev1.Pod) []classQueue {
	var out []classQueue
	for _, wp := range w.Pods {
		p := pods[string(wp.UID)]
		if p == nil {
			continue
		}
		c := classQueue{p.Labels[v1alpha1.LabelClass], p.Labels[v1alpha1.LabelQueue]}
		if c.class == "" && w.Kind == "Deployment" {
			c.class = v1alpha1.ClassInference
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// classQueue is the class and queue a pod carries.
type classQueue struct{ class, queue string }

// strictest is, of the classes and queues a workload's pods carry, the one whose idle
// timeout is shortest (interactive and inference ones only: training is never stopped),
// with its queue's policy; ok is false when none of them has one and none is interactive
// or inference (nothing to judge).
func strictest(cqs []classQueue, pols map[string]policy) (class string, pol policy, ok bool) {
	best := time.Duration(-1)
	for _, cq := range cqs {
		if cq.class != v1alpha1.ClassInteractive && cq.class != v1alpha1.ClassInference {
			continue
		}
		p, found := pols[cq.queue]
		if !found {
			p = policy{queue: cq.queue, threshold: v1alpha1.DefaultIdleThreshold}
		}
		t, has := p.timeout[cq.class]
		if !ok || (has && (best < 0 || t < best)) {
			class, pol, ok = cq.class, p, true
			if has {
				best = t
			}
		}
	}
	return class, pol, ok
}

// readings are the GPUs' utilisation where a live reporter speaks for them: a node's agent
// carries it on its Lease, trusted while the agent renews that Lease (a stopped agent's
// last report says nothing of now); one of allot up's simulated nodes without an agent has
// it written on the Node by the simulated kubelet. Any other node's GPUs are unknown.
func (c *Controller) readings(st stores.Stores, now time.Time) (Readings, map[string][]string, error) {
	ns, err := st.Nodes.List(labels.Everything())
	if err != nil {
		return nil, nil, err
	}
	c.nodes = map[string]*corev1.Node{}
	for _, n := range ns {
		c.nodes[n.Name] = n
	}
	r := Readings{}
	for _, n := range ns {
		agent, _ := st.Leases.Get(v1alpha1.AgentLeaseName(n.Name))
		if got, ok := inspect.Utilization(n, agent, now, c.opts.Simulated != nil && c.opts.Simulated(n)); ok {
			r.add(n.Name, got)
		}
	}
	return r, inspect.NodeUUIDs(ns), nil
}

// objects lists what workloads are built from, as the scheduler's role may read it: the
// pods in a queue from the stores, their owners from the API server.
func (c *Controller) objects(ctx context.Context, st stores.Stores) (inspect.Objects, error) {
	var o inspect.Objects
	all := metav1.ListOptions{}
	queued, err := labels.Parse(v1alpha1.LabelQueue)
	if err != nil {
		return o, err
	}
	// The pods are the scheduler's cache's objects, shared: read, never written.
	if o.Pods, err = st.Pods.List(queued); err != nil {
		return o, err
	}
	var jobs *batchv1.JobList
	if jobs, err = c.client.BatchV1().Jobs("").List(ctx, all); err != nil {
		return o, err
	}
	o.Jobs = ptrs(jobs.Items)
	var deps *appsv1.DeploymentList
	if deps, err = c.client.AppsV1().Deployments("").List(ctx, all); err != nil {
		return o, err
	}
	o.Deployments = ptrs(deps.Items)
	var rss *appsv1.ReplicaSetList
	if rss, err = c.client.AppsV1().ReplicaSets("").List(ctx, all); err != nil {
		return o, err
	}
	o.ReplicaSets = ptrs(rss.Items)
	var sts *appsv1.StatefulSetList
	if sts, err = c.client.AppsV1().StatefulSets("").List(ctx, all); err != nil {
		return o, err
	}
	o.StatefulSets = ptrs(sts.Items)
	return o, nil
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
