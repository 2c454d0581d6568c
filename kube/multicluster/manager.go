package multicluster

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"
	"github.com/allot-dev/allot/kube/convert"
)

// DefaultLeaseDuration is how long a worker waits for the manager's lease to be renewed
// before it suspends the Jobs dispatched to it.
// A manager down for longer (an upgrade, an outage) has its dispatched work suspended
// on every worker until it is back: it cannot be told apart from a partition.
const DefaultLeaseDuration = 5 * time.Minute

// DefaultLostAfter is how long a worker may not answer before its work is dispatched
// again elsewhere (Kueue's MultiKueue waits 15 minutes by default).
const DefaultLostAfter = 10 * time.Minute

// Options tune the manager.
type Options struct {
	// Name identifies the manager on its workers: their Queues it keeps carry it, and
	// its lease there is held under it. Default allot-manager.
	Name string
	// Namespace is where the manager's lease lives on each worker (and the fence that
	// reads it runs). Default allot-system.
	Namespace string
	// Interval is how often the manager looks at its workers and its Jobs. Default 1 s.
	Interval time.Duration
	// LeaseDuration is how long a worker waits, without the manager renewing its lease,
	// before it suspends the Jobs dispatched to it (fence.go). Default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// LostAfter is how long a worker may not answer before its Jobs are dispatched again
	// elsewhere. It must be longer than LeaseDuration, so that the worker has stopped
	// them first. Default DefaultLostAfter.
	LostAfter time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Tweak changes the rest.Config made from each worker's kubeconfig (tests route it
	// through a proxy they can cut).
	Tweak func(*rest.Config)
	// Leading says whether this replica leads (the scheduler's leader election): only the
	// leader dispatches. Nil: always.
	Leading func() bool
	Log     *slog.Logger
}

func (o *Options) defaults() {
	if o.Name == "" {
		o.Name = "allot-manager"
	}
	if o.Namespace == "" {
		o.Namespace = "allot-system"
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.LostAfter <= 0 {
		o.LostAfter = DefaultLostAfter
	}
	if o.LostAfter < 2*o.LeaseDuration {
		// The worker must have suspended its Jobs, and their pods stopped, before they
		// are dispatched elsewhere: the CLI refuses such flags, a program calling New gets
		// the longer one.
		o.LostAfter = 2 * o.LeaseDuration
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Manager dispatches the manager cluster's Jobs to its worker clusters.
type Manager struct {
	opts     Options
	client   kubernetes.Interface
	allot    versioned.Interface
	recorder record.EventRecorder
	eng      *engine.Engine

	clusters   cache.SharedIndexInformer
	queues     cache.SharedIndexInformer
	topologies cache.SharedIndexInformer
	jobs       cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer

	mu      sync.Mutex
	workers map[string]*worker
	// refused says why a WorkerCluster has no connection (its Secret, its kubeconfig).
	refused map[string]refusal
	// written is the status last written for each WorkerCluster, so that an unchanged
	// one is not written again each interval.
	written map[string]string
	// waiting is the reason last written on each waiting Job.
	waiting map[string]string
	// dispatched is where this manager dispatched each Job, ahead of its informer.
	dispatched map[types.UID]string
	// conflicts are the queues each worker keeps differently from the manager.
	conflicts map[string]map[string]string
	// down is, by cluster name, since when the manager has not reached it (refused, not
	// answering, or no longer registered); a cluster it reaches is not in it.
	down map[string]time.Time
}

// New makes a manager over the manager cluster's clients.
func New(client kubernetes.Interface, allot versioned.Interface, opts Options) *Manager {
	opts.defaults()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Manager{opts: opts, client: client, allot: allot, eng: engine.New(engine.Options{}),
		recorder:   b.NewRecorder(s, corev1.EventSource{Component: opts.Name}),
		dispatched: map[types.UID]string{}, workers: map[string]*worker{}, refused: map[string]refusal{}, written: map[string]string{}, waiting: map[string]string{},
		conflicts: map[string]map[string]string{}, down: map[string]time.Time{}}
}

// Run works until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	ensurePolicy(ctx, m.client, DispatchPolicy)
	af := allotinformers.NewSharedInformerFactory(m.allot, 0)
	m.clusters = af.Allot().V1alpha1().WorkerClusters().Informer()
	m.queues = af.Allot().V1alpha1().Queues().Informer()
	m.topologies = af.Allot().V1alpha1().Topologies().Informer()
	f := informers.NewSharedInformerFactory(m.client, 0)
	m.jobs = f.Batch().V1().Jobs().Informer()
	m.namespaces = f.Core().V1().Namespaces().Informer()
	af.Start(ctx.Done())
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), m.clusters.HasSynced, m.queues.HasSynced, m.topologies.HasSynced, m.jobs.HasSynced, m.namespaces.HasSynced) {
		return
	}
	defer func() {
		m.mu.Lock()
		for _, w := range m.workers {
			w.stop()
		}
		m.mu.Unlock()
	}()
	go m.renewLeases(ctx)
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		m.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round is one look at everything: the workers' connections and health, the manager's
// leases on them, the Queues kept there, the Jobs to dispatch, and what runs where.
func (m *Manager) round(ctx context.Context) {
	if m.opts.Leading != nil && !m.opts.Leading() {
		// What this replica knew as leader is stale by the time it leads again (where Jobs
		// went, since when a worker has not answered: another leader may have reached it
		// since): it starts again from the objects, as a restarted manager does.
		m.mu.Lock()
		for _, w := range m.workers {
			w.stop()
		}
		clear(m.workers)
		clear(m.dispatched)
		clear(m.down)
		clear(m.refused)
		clear(m.written)
		clear(m.waiting)
		clear(m.conflicts)
		m.mu.Unlock()
		return
	}
	now := m.opts.Now()
	m.syncWorkers(ctx, now)
	ready := m.readyWorkers()
	jobs := m.managedJobs()
	m.forgetGone(jobs)
	m.syncQueues(ctx, ready, jobs)
	m.dispatch(ctx, now, ready, jobs)
	m.mirror(ctx, ready, jobs)
	m.handleLost(ctx, now, jobs)
}

// forgetGone drops what the manager remembers of Jobs deleted since.
func (m *Manager) forgetGone(jobs []*batchv1.Job) {
	live := make(map[types.UID]bool, len(jobs))
	for _, j := range jobs {
		live[j.UID] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.dispatched {
		if !live[uid] {
			delete(m.dispatched, uid)
		}
	}
	for uid := range m.waiting {
		if !live[types.UID(uid)] {
			delete(m.waiting, uid)
		}
	}
}

// readyWorkers are the workers that answered last and whose informers are synced, by name.
func (m *Manager) readyWorkers() map[string]*worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*worker{}
	for n, w := range m.workers {
		if ok, _, _, _, _ := w.health(); ok && w.isSynced() {
			out[n] = w
		}
	}
	return out
}

// renewLeases renews the manager's lease on every worker that answers (its informers
// synced or not: a restarted manager renews before it has read everything again), ten
// times a lease (a worker answering for the first time at once), apart from the rounds: a long round (a burst of dispatches) never lets a
// lease run out.
func (m *Manager) renewLeases(ctx context.Context) {
	every := max(100*time.Millisecond, m.opts.LeaseDuration/10)
	t := time.NewTicker(min(m.opts.Interval, every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m.opts.Leading != nil && !m.opts.Leading() {
			continue
		}
		now := m.opts.Now()
		for _, w := range m.answering() {
			// A worker that just answered for the first time gets its lease at once.
			if at, _ := w.lease(); now.Sub(at) >= every {
				w.leaseRenewed(now, m.renewLease(ctx, w, now))
			}
		}
	}
}

// answering are the workers whose last probe answered.
func (m *Manager) answering() []*worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*worker
	for _, w := range m.workers {
		if ok, _, _, _, _ := w.health(); ok {
			out = append(out, w)
		}
	}
	return out
}

// managedJobs are the manager's Jobs handed to it by spec.managedBy, oldest first; one
// that names no queue is read with its namespace's default (the label allot.dev/queue on
// the namespace, an admin's), as the admission webhook gives it to pods.
func (m *Manager) managedJobs() []*batchv1.Job {
	var out []*batchv1.Job
	for _, o := range m.jobs.GetStore().List() {
		j := o.(*batchv1.Job)
		if j.Spec.ManagedBy == nil || *j.Spec.ManagedBy != ManagedBy {
			continue
		}
		if queueOf(j) == "" {
			if d := m.namespaceLabels(j.Namespace)[v1alpha1.LabelQueue]; d != "" {
				j = j.DeepCopy()
				if j.Labels == nil {
					j.Labels = map[string]string{}
				}
				j.Labels[v1alpha1.LabelQueue] = d
			}
		}
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].CreationTimestamp.Equal(&out[b].CreationTimestamp) {
			return out[a].CreationTimestamp.Before(&out[b].CreationTimestamp)
		}
		return out[a].Namespace+"/"+out[a].Name < out[b].Namespace+"/"+out[b].Name
	})
	return out
}

func (m *Manager) namespaceLabels(ns string) map[string]string {
	o, ok, _ := m.namespaces.GetStore().GetByKey(ns)
	if !ok {
		return nil
	}
	return o.(*corev1.Namespace).Labels
}

// managerQueues are the manager's Queues: the global quotas.
func (m *Manager) managerQueues() []*v1alpha1.Queue {
	var out []*v1alpha1.Queue
	for _, o := range m.queues.GetStore().List() {
		out = append(out, o.(*v1alpha1.Queue))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func (m *Manager) managerTopologies() map[string]convert.Levels {
	t, _ := convert.Topologies(m.topologies.GetStore().List())
	return t
}

// finished says whether a Job has ended (its Complete or Failed condition).
func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
