package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/podfit"
	"github.com/allot-dev/allot/kube/workload"
)

var (
	queuesGVR    = v1alpha1.Queues
	podGroupsGVR = v1alpha1.PodGroups
)

// Options configure the scheduler.
type Options struct {
	Engine engine.Options
	// Interval is the longest time between cycles; changes trigger one sooner.
	Interval time.Duration
	// LeaderElection makes replicas safe: only the holder of the Lease schedules.
	LeaderElection bool
	Identity       string
	Lease          Lease
	Now            func() time.Time
	// Metrics, if set, records each cycle.
	Metrics *Metrics
	// UsageHalfLife is how fast a queue's past use above quota is forgotten (it counts
	// half after this long); zero means engine.DefaultUsageHalfLife. Engine.UsageStrength says
	// how much that use tilts the division of idle GPUs.
	UsageHalfLife time.Duration
	// SharingRoot is the host directory the nodes' agents share with sharing pods (the
	// webhook mounts it); a sharing pod's ConfigMap points into it by its node's mode.
	// Empty: none (the environment then carries the limits and the mode only).
	SharingRoot string
	// CDIKind is the CDI kind a sharing pod's device is named by on nodes whose delivery
	// is cdi (v1alpha1.DefaultCDIKind when empty).
	CDIKind string
	// DeviceRecorders are the users who may record on a pod the devices the kubelet gave
	// it (the nodes' agents), beside the scheduler's own user.
	DeviceRecorders []string
	// RequireGPUEnv: a sharing pod is bound only if the webhook gave its containers the
	// entries that read their device (set where this process serves the webhooks).
	RequireGPUEnv bool
	// Collectors are more series served beside the scheduler's (allot up's simulated
	// nodes' agents).
	Collectors []prometheus.Collector
	// DeviceReportTimeout is how long a shared pod on a node with an agent waits for its
	// GPU's reservation to have its device reported; zero means DefaultDeviceReportTimeout.
	DeviceReportTimeout time.Duration
}

// Scheduler runs cycles against the API server.
type Scheduler struct {
	opts     Options
	client   kubernetes.Interface
	dyn      dynamic.Interface
	eng      *engine.Engine
	recorder record.EventRecorder
	events   *podEvents
	statuses *podStatuses
	// bindsWaiting counts the binds handed to the bind workers and not yet taken by one;
	// Events and pods' reasons are written only while it is zero.
	bindsWaiting atomic.Int64

	mu sync.Mutex // one cycle at a time
	// assumed holds binds made but not yet seen by the informer, so that the next cycle
	// does not hand their GPUs out again. amu guards it: bind workers drop failed ones.
	amu     sync.Mutex
	assumed map[types.UID]engine.Binding
	backoff map[types.UID]time.Time // pods whose bind failed, and when to try again
	// unknownUntil holds assumed pods whose bind may have landed (errBindUnknown), and
	// until when they stay assumed while the informer does not show them bound.
	unknownUntil map[types.UID]time.Time
	// awaiting holds shared pods whose bind waits for their reservation's reported device
	// (sharing.go); they stay assumed meanwhile. Guarded by amu.
	awaiting map[types.UID]awaitingBind
	// adopted remembers the pods already counted as adopting the device plugin's choice.
	adopted map[types.UID]bool
	binds   chan bindJob
	conv    convCache // touched only by cycles
	// occWritten remembers the occupancy last written per node; occAt when.
	occWritten map[engine.NodeID]string
	occAt      time.Time
	// queueWritten is when each queue's status was last written.
	queueWritten map[string]time.Time
	// usage is each queue's past use above quota (usage.go); the Queue's status holds it
	// between terms and restarts.
	usage map[string]engine.Usage
	// reasons remembers the last reason written per pod, to write only changes.
	reasons map[types.UID]string
	// evicting holds eviction requests made, by pod, until the pod is seen gone.
	evicting map[types.UID]time.Time
	// partial holds since when each gang has run fewer than its minimum of pods (for the
	// engine's stale-gang rule); a restart forgets it and the grace period starts again.
	partial map[engine.JobID]*partialGang
	// gone notes the gang members that left their nodes, for the stale-gang reason.
	gone       goneMembers
	cycleStart time.Time // when the running cycle began (wall clock)

	// fit holds kube-scheduler's plugins for the Kubernetes scheduling contract.
	fit *podfit.Checker

	pods, nodes, queues, groups cache.SharedIndexInformer
	agentLeases                 cache.SharedIndexInformer // the nodes' agents' (agents.go)
	// reservationClass: reservation pods may name ReservationPriorityClass (reservation.go).
	reservationClass bool
	// topologies is nil where the Topology CRD is not served (a chart upgraded without its
	// new CRDs): workloads that name a level then wait, saying there is no Topology.
	topologies cache.SharedIndexInformer
	// topologyProblems is the last warning about unreadable Topologies, said once.
	topologyProblems string
	wake             chan struct{}
	// fence is nil without leader election.
	fence *fence
	// stale is set while the API server is away and until everything is listed again
	// (connection.go); stopInformers ends the informers of the current listing.
	stale         atomic.Bool
	stopInformers context.CancelFunc
	// listWaited holds the informers a cycle has waited for (wakeWhenListed), from start.
	listWaited map[cache.SharedIndexInformer]bool
}

// New connects to the cluster.
func New(rc *rest.Config, opts Options) (*Scheduler, error) {
	rc = rest.CopyConfig(rc)
	// A scheduler binds hundreds of pods a second; client-go's default of 5 QPS would
	// make it crawl. The API server's own priority and fairness still protects it.
	rc.QPS, rc.Burst = 2000, 4000
	// Protobuf costs the API server a fraction of JSON's encoding work, as for the built-in
	// components; the dynamic client for Allot's own resources keeps JSON.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	rc.Wrap(withDeadlines(CallTimeout))
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Identity == "" {
		opts.Identity = fmt.Sprintf("allot-scheduler-%d", time.Now().UnixNano())
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	s := &Scheduler{opts: opts, client: client, dyn: dyn, eng: engine.New(opts.Engine),
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: SchedulerName}), events: newPodEvents(), statuses: newPodStatuses(),
		assumed: map[types.UID]engine.Binding{}, awaiting: map[types.UID]awaitingBind{}, adopted: map[types.UID]bool{}, backoff: map[types.UID]time.Time{}, unknownUntil: map[types.UID]time.Time{}, reasons: map[types.UID]string{}, evicting: map[types.UID]time.Time{}, partial: map[engine.JobID]*partialGang{}, wake: make(chan struct{}, 1),
		occWritten: map[engine.NodeID]string{}, queueWritten: map[string]time.Time{}, usage: map[string]engine.Usage{}}
	if s.opts.UsageHalfLife <= 0 {
		s.opts.UsageHalfLife = engine.DefaultUsageHalfLife
	}
	s.conv.warn = func(n *corev1.Node, problems []string) {
		for _, p := range problems {
			slog.Warn("allot scheduler: node not trusted as written", "node", n.Name, "problem", p)
			s.recorder.Eventf(n, corev1.EventTypeWarning, "InvalidGPUInfo", "%s", p)
		}
	}
	return s, nil
}

// Run schedules until ctx ends, as leader if leader election is on. The informers start
// first, on a standby too, so that a replica taking over schedules at once.
func (s *Scheduler) Run(ctx context.Context) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	go s.watchConnection(ctx)
	s.ensureFieldsPolicy(ctx)
	for w := 0; w < eventWriters; w++ {
		go s.writeEvents(ctx)
	}
	for w := 0; w < statusWriters; w++ {
		go s.writeStatuses(ctx)
	}
	go func() { <-ctx.Done(); s.statuses.close() }()
	if !s.opts.LeaderElection {
		return s.loop(ctx)
	}
	lease := s.opts.Lease.withDefaults()
	s.fence = &fence{enabled: true, valid: lease.Duration - fenceMargin}
	lock := fencedLock{Interface: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: LeaseName},
		Client: s.client.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: s.opts.Identity}}, f: s.fence}
	s.ensureFencePolicy(ctx)
	// A replica that loses the Lease stands by again, its informers warm, rather than
	// exit and list everything anew: if the new leader dies soon after (two faults in a
	// row), it takes over in the lease duration, not in a restart.
	var term sync.Mutex // one term's loop at a time: the next waits for the last's bind workers
	go s.takeOver(ctx, lease)
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{Lock: lock, ReleaseOnCancel: true,
			LeaseDuration: lease.Duration, RenewDeadline: lease.RenewDeadline, RetryPeriod: lease.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					term.Lock()
					defer term.Unlock()
					if ctx.Err() != nil {
						return // a term that ended before it began
					}
					slog.Info("allot scheduler: leading", "identity", s.opts.Identity)
					s.newTerm()
					if err := s.loop(ctx); err != nil {
						slog.Warn("allot scheduler: leading", "err", err)
					}
				},
				OnStoppedLeading: func() {
					s.fence.lost()
					slog.Info("allot scheduler: leadership lost; standing by", "identity", s.opts.Identity)
				},
			}})
		if err != nil {
			return err
		}
		le.Run(ctx)
	}
	return nil
}

// newTerm forgets what the last term as leader was waiting for: another leader has
// acted since, and the informers show what it did.
func (s *Scheduler) newTerm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.amu.Lock()
	clear(s.assumed)
	clear(s.backoff)
	clear(s.unknownUntil)
	s.amu.Unlock()
	clear(s.evicting)
	clear(s.reasons)
	clear(s.usage) // another leader may have counted since: read it from the status again
}

// start builds and syncs the informers and kube-scheduler's plugins.
func (s *Scheduler) start(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	s.stopInformers = cancel
	s.listWaited = map[cache.SharedIndexInformer]bool{}
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTransform(dropManagedFields))
	s.pods = factory.Core().V1().Pods().Informer()
	s.nodes = factory.Core().V1().Nodes().Informer()
	dfactory := dynamicinformer.NewDynamicSharedInformerFactory(s.dyn, 0)
	s.queues = dfactory.ForResource(queuesGVR).Informer()
	s.groups = dfactory.ForResource(podGroupsGVR).Informer()
	// The scheduler writes the status of Queues and PodGroups itself; a status alone is no
	// news for a cycle (the next one reads a Queue's usage from it all the same).
	poke := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() }, DeleteFunc: func(any) { s.poke() },
		UpdateFunc: func(o, n any) {
			ou, ok1 := o.(*unstructured.Unstructured)
			nu, ok2 := n.(*unstructured.Unstructured)
			if !ok1 || !ok2 || !statusOnly(ou, nu) {
				s.poke()
			}
		}}
	informers := []cache.SharedIndexInformer{s.queues}
	// PodGroups are watched but not waited for, as Topologies below: only a cycle with a
	// pod of a gang (labelled with its group from admission on) needs them, and it waits
	// until they have listed (Cycle).
	_, _ = s.groups.AddEventHandler(poke)
	s.topologies = nil
	if workload.Served(s.client.Discovery(), v1alpha1.Topologies) {
		s.topologies = dfactory.ForResource(v1alpha1.Topologies).Informer()
		// Watched, but not waited for: only cycles with a workload that names a level
		// need it, and they wait until it has listed (Cycle). On a fresh API server the
		// first watch of a custom resource nobody has read yet can wait a second for its
		// cache; other workloads need not.
		_, _ = s.topologies.AddEventHandler(poke)
	} else {
		slog.Warn("allot scheduler: the Topology CRD is not installed (kubectl apply -f deploy/crds): workloads that name a topology level wait")
	}
	synced := []cache.InformerSynced{s.pods.HasSynced, s.nodes.HasSynced}
	for _, inf := range informers {
		_, _ = inf.AddEventHandler(poke)
		synced = append(synced, inf.HasSynced)
	}
	_, _ = s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() }, DeleteFunc: func(any) { s.poke() },
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || !reportOnly(on, nn) {
				s.poke()
			}
		}})
	_, _ = s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				s.gone.note(p)
			}
			s.poke()
		},
		UpdateFunc: func(o, n any) {
			op, ok1 := o.(*corev1.Pod)
			np, ok2 := n.(*corev1.Pod)
			if ok2 && (np.DeletionTimestamp != nil || np.Status.Phase == corev1.PodFailed) {
				s.gone.note(np)
			}
			if !ok1 || !ok2 || s.podNews(op, np) {
				s.poke()
			}
		}})
	if err := s.ensureSystemNamespace(ctx); err != nil {
		return fmt.Errorf("namespace %s: %w", v1alpha1.SystemNamespace, err)
	}
	s.reservationClass = s.ensureReservationClass(ctx)
	// kube-scheduler's plugins add the informers they read (volumes, namespaces, services…)
	// to the factory, so they are built before it starts.
	fit, err := podfit.New(ctx, s.client, factory)
	if err != nil {
		return err
	}
	s.fit = fit
	factory.Start(ctx.Done())
	dfactory.Start(ctx.Done())
	s.startAgentLeases(ctx)
	// Checked every 10 ms, not every 100 ms as client-go's WaitForCacheSync does: on a
	// fresh start with a backlog waiting, the lists are most of the time to the first bind.
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, ok := range synced {
			if !ok() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync: %w", typ, ctx.Err())
		}
	}
	return nil
}

// dropManagedFields leaves out what the API server records of who set which field (as
// kube-scheduler does for its pods): nothing here reads it, and on a production cluster it
// is a large part of every pod and node the caches hold (BenchmarkAdapterCycleProduction
// measures both). An update sent from a cached copy without it keeps the server's record.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// wakeWhenListed wakes a cycle once inf has listed, for a cycle that waited for it: its
// objects' arrival wakes one too, but it may have come before the cycle took the wake-up
// (Cycle), and an empty list brings none. Checked every 10 ms, for a minute at most (a
// relist replaces the informers).
func (s *Scheduler) wakeWhenListed(ctx context.Context, inf cache.SharedIndexInformer) {
	if s.listWaited[inf] {
		return
	}
	s.listWaited[inf] = true
	go func() {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) { return inf.HasSynced(), nil }) == nil {
			s.poke()
		}
	}()
}

// loop runs cycles until ctx ends.
func (s *Scheduler) loop(ctx context.Context) error {
	s.binds = make(chan bindJob, 1024)
	var workers sync.WaitGroup
	for w := 0; w < BindWorkers; w++ {
		workers.Add(1)
		go func() { defer workers.Done(); s.bindLoop(ctx) }()
	}
	defer workers.Wait()
	defer close(s.binds)
	// A cycle at least every Interval after the last one, for what time alone changes
	// (backoffs, grace periods, usage): counted from the last cycle, not on a fixed beat,
	// so that one does not come while a backlog's binds still flow from a cycle just done.
	timer := time.NewTimer(s.opts.Interval)
	defer timer.Stop()
	for {
		if err := s.Cycle(ctx); err != nil {
			slog.Warn("allot scheduler: cycle", "err", err)
		}
		timer.Reset(s.opts.Interval)
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			// Let a burst of events land before the next cycle: one cycle then places many.
			time.Sleep(50 * time.Millisecond)
		case <-timer.C:
		}
	}
}

// reportOnly tells whether a node update changed nothing but the annotations written for
// people: the scheduler's own occupancy and the agent's utilisation. The engine reads
// neither, so they need no cycle (with an agent on every node they come every few seconds).
func reportOnly(o, n *corev1.Node) bool {
	if !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equality.Semantic.DeepEqual(o.Status, n.Status) || !maps.Equal(o.Labels, n.Labels) {
		return false
	}
	reports := func(k string) bool {
		return k == v1alpha1.AnnotationOccupancy || k == v1alpha1.AnnotationGPUUtilization || k == v1alpha1.AnnotationGPUMemoryUsed
	}
	for k, v := range n.Annotations {
		if ov, ok := o.Annotations[k]; (!ok || ov != v) && !reports(k) {
			return false
		}
	}
	for k := range o.Annotations {
		if _, ok := n.Annotations[k]; !ok && !reports(k) {
			return false
		}
	}
	return true
}

// podNews tells whether a pod's update can change a plan. Waking for the rest would
// rebuild the snapshot for nothing: a running pod's status (the kubelet reporting it
// started), the arrival of our own binds, and a waiting pod's status, which holds the
// reason the scheduler wrote itself or another scheduler's (the reasons of 1,500
// unplaceable pods landing woke 59 cycles).
func (s *Scheduler) podNews(o, n *corev1.Pod) bool {
	switch {
	case (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || terminal(o) != terminal(n):
		return true
	case n.Spec.NodeName == "":
		// Still waiting: a scheduling gate lifted, a label or owner set, resources resized.
		return !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !maps.Equal(o.Labels, n.Labels) ||
			!maps.Equal(o.Annotations, n.Annotations) || !equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences)
	case o.Spec.NodeName != n.Spec.NodeName:
		return !s.confirms(n)
	}
	return o.Annotations[v1alpha1.AnnotationGPUDevices] != n.Annotations[v1alpha1.AnnotationGPUDevices]
}

// statusOnly tells whether an update of a custom resource changed at most its status: the
// API server raises metadata.generation for every change but of metadata (and of status,
// where the resource has a status subresource); the parts of metadata the engine reads
// are compared here.
func statusOnly(o, n *unstructured.Unstructured) bool {
	return o.GetGeneration() == n.GetGeneration() && (o.GetDeletionTimestamp() == nil) == (n.GetDeletionTimestamp() == nil) &&
		maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Cycle takes one snapshot, asks the engine for a plan and applies it.
func (s *Scheduler) Cycle(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Before anything is listed: what the pod watch notes from here on may not be in this
	// cycle's snapshot yet.
	s.cycleStart = time.Now()
	if !s.fence.ok() {
		return nil // the Lease may be someone else's: write nothing
	}
	if s.stale.Load() {
		return nil // what the informers hold predates an outage
	}
	// First, so that the snapshot already has held-back shared pods whose reservation
	// reported its device on that device, and places others beside them there.
	s.resumeAwaiting(ctx)
	// What poked until now is in the informers' stores already (client-go updates a store
	// before it calls the handlers), so this cycle sees it; a poke left waiting would only
	// repeat the cycle (after the first listing, 2,000 pods' arrival did, while the
	// backlog's binds were flowing).
	select {
	case <-s.wake:
	default:
	}
	var nodes []*corev1.Node
	for _, o := range s.nodes.GetStore().List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	var pods []*corev1.Pod
	live := map[types.UID]bool{}
	s.amu.Lock()
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		live[p.UID] = p.DeletionTimestamp == nil
		if until, ok := s.unknownUntil[p.UID]; ok && (p.Spec.NodeName != "" || time.Now().After(until)) {
			delete(s.unknownUntil, p.UID)
			if p.Spec.NodeName == "" {
				// The bind did not land after all: the pod is placed again.
				delete(s.assumed, p.UID)
				s.backoff[p.UID] = time.Now().Add(bindBackoff)
			}
		}
		if b, ok := s.assumed[p.UID]; ok {
			if p.Spec.NodeName != "" {
				delete(s.assumed, p.UID) // the informer caught up
			} else {
				p = p.DeepCopy()
				p.Spec.NodeName = string(b.Node)
				if p.Annotations == nil {
					p.Annotations = map[string]string{}
				}
				p.Annotations[AnnotationGPUs] = formatIndices(b.GPUs)
				if b.Share > 0 {
					p.Annotations[v1alpha1.AnnotationGPUShare] = strconv.Itoa(int(b.Share))
				}
			}
		}
		pods = append(pods, p)
	}
	for uid := range s.assumed {
		if !live[uid] {
			delete(s.assumed, uid)
		}
	}
	for uid := range s.backoff {
		if !live[uid] {
			delete(s.backoff, uid)
		}
	}
	for uid := range s.unknownUntil {
		if !live[uid] {
			delete(s.unknownUntil, uid)
		}
	}
	for uid := range s.reasons {
		if _, here := live[uid]; !here {
			delete(s.reasons, uid) // deleted while it waited: its reason was kept for ever
		}
	}
	s.amu.Unlock()
	for uid := range s.evicting {
		if !live[uid] {
			delete(s.evicting, uid) // seen leaving or gone
		}
	}
	// Queues and PodGroups whose fields do not read (a CRD's schema checks less than we
	// need) make their pods wait with the field as the reason; everyone else goes on.
	var queues []*v1alpha1.Queue
	badQueues := map[string]string{}
	for _, o := range s.queues.GetStore().List() {
		u := o.(*unstructured.Unstructured)
		if q, err := convert.QueueObject(u); err == nil {
			queues = append(queues, q)
		} else {
			badQueues[u.GetName()] = err.Error()
		}
	}
	var topologies map[string]convert.Levels // nil: not known (convert.JobTopology)
	if s.topologies != nil && s.topologies.HasSynced() {
		var problems []error
		topologies, problems = convert.Topologies(s.topologies.GetStore().List())
		// Said once, not every cycle: the CRD's schema makes such an object rare.
		msg := fmt.Sprint(problems)
		if len(problems) > 0 && msg != s.topologyProblems {
			slog.Warn("allot scheduler: topologies not read", "err", msg)
		}
		s.topologyProblems = msg
	}
	if !s.groups.HasSynced() && inGangs(pods) {
		// The PodGroups have not listed yet and some pod belongs to one: without its
		// minimum, the gang could start short. Wait for the list.
		s.wakeWhenListed(ctx, s.groups)
		return nil
	}
	groups := map[string]convert.Group{}
	var podGroups []*unstructured.Unstructured
	for _, o := range s.groups.GetStore().List() {
		u := o.(*unstructured.Unstructured)
		groups[u.GetNamespace()+"/"+u.GetName()] = convert.PodGroup(u)
		podGroups = append(podGroups, u)
	}
	if topologies == nil && s.topologies != nil && namesTopology(pods, groups) {
		// The Topology informer has not listed yet and some workload names a level: such a
		// job cannot be placed rightly, and counted as invalid its running pods would leave
		// its queue's use for that moment. Wait for the list.
		s.wakeWhenListed(ctx, s.topologies)
		return nil
	}
	now := s.opts.Now()
	s.stopOverdue(ctx, now, pods, queues)
	snap, idx := buildSnapshot(now, nodes, pods, queues, badQueues, groups, topologies, &s.conv)
	s.readUsage(snap, queues)
	s.countAdopted(idx)
	s.notePartialGangs(ctx, snap, idx)
	constrain(ctx, s.fit, snap, idx, nodes, pods, &s.conv)
	started := time.Now()
	plan := s.eng.Schedule(snap)
	s.accrueUsage(snap, plan)
	s.apply(ctx, plan, idx)
	s.opts.Metrics.observe(time.Since(started).Seconds(), snap, plan, queues)
	s.releaseReservations(ctx, snap, plan, idx)
	// Occupancy is for people and dashboards: once a second is fresh enough, and spares
	// the API server a node write per bind under a stream of submissions.
	if now := time.Now(); now.Sub(s.occAt) >= time.Second {
		s.occAt = now
		s.writeOccupancy(ctx, occupancy(snap, plan))
	}
	s.writeStatus(ctx, plan, idx, queues)
	s.writeGroupStatus(ctx, plan, podGroups)
	return nil
}

// countAdopted counts, once each, the bound pods whose devices the device plugin chose
// differently from the scheduler.
func (s *Scheduler) countAdopted(idx *index) {
	n := 0
	for _, uid := range idx.adopted {
		if !s.adopted[uid] {
			s.adopted[uid] = true
			n++
		}
	}
	s.opts.Metrics.adoptedDevices("whole", n)
	if len(s.adopted) > 4*len(idx.adopted)+1024 {
		// Forget pods long gone; one still bound is in idx.adopted and stays.
		keep := make(map[types.UID]bool, len(idx.adopted))
		for _, uid := range idx.adopted {
			keep[uid] = true
		}
		s.adopted = keep
	}
}

// inGangs reports whether any of Allot's pods belongs to a PodGroup.
func inGangs(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p.Spec.SchedulerName == SchedulerName && p.Labels[LabelPodGroup] != "" {
			return true
		}
	}
	return false
}

// namesTopology reports whether any of Allot's pods, or the PodGroup of one, names a
// topology level: a job that topologyOf would resolve against the Topology objects.
func namesTopology(pods []*corev1.Pod, groups map[string]convert.Group) bool {
	for _, p := range pods {
		if p.Spec.SchedulerName != SchedulerName {
			continue
		}
		if ann, _ := topologyAnnotations(p, groups); ann[v1alpha1.AnnotationTopologyRequired] != "" || ann[v1alpha1.AnnotationTopologyPreferred] != "" {
			return true
		}
	}
	return false
}

// apply evicts, then binds. A bind onto a node that lost a pod in this plan waits for the
// next cycle: the evicted pod still holds its devices until it is gone.
func (s *Scheduler) apply(ctx context.Context, plan *engine.Plan, idx *index) {
	evictedOn := map[engine.NodeID]bool{}
	evicted := map[engine.PodID]bool{}
	// The Events are written, synchronously, before any request: a scheduler that dies
	// part-way leaves a record of why each pod went, never an unexplained loss, and the
	// next leader reads on a gang's running pods that their eviction was cut short.
	type eviction struct {
		p   *corev1.Pod
		why string
	}
	var todo []eviction
	for _, e := range plan.Evictions {
		p := idx.pods[e.Pod]
		if p == nil {
			continue
		}
		evicted[e.Pod] = true
		evictedOn[engine.NodeID(p.Spec.NodeName)] = true
		// One request per pod: until the informer shows it terminating, the next cycles
		// plan the same eviction again.
		if at, ok := s.evicting[p.UID]; ok && time.Since(at) < evictionResend {
			continue
		}
		if !s.fence.ok() {
			return // not sure to hold the Lease: nothing more of this plan
		}
		if err := s.eventNow(ctx, p, corev1.EventTypeNormal, "Evicted", e.Reason.Message); err != nil {
			slog.Warn("allot scheduler: evict: event not written, pod not evicted", "pod", e.Pod, "err", err)
			continue
		}
		todo = append(todo, eviction{p, e.Reason.Message})
	}
	for _, e := range todo {
		p := e.p
		if !s.fence.ok() {
			return
		}
		s.evicting[p.UID] = time.Now()
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Annotations: s.leaderMark(nil)},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
		err := s.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		switch {
		case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Evicted, or already gone (a pod of the same name is another pod).
		case apierrors.IsTooManyRequests(err):
			// Asked again only after evictionResend, so that a budget that holds for long
			// does not add an Evicted and an EvictionBlocked Event every cycle.
			s.recorder.Eventf(p, corev1.EventTypeWarning, "EvictionBlocked", "not evicted after all: a PodDisruptionBudget does not allow it (%s)", e.why)
		default:
			s.evicting[p.UID] = time.Now().Add(evictionRetry - evictionResend)
			s.recorder.Eventf(p, corev1.EventTypeWarning, "EvictionFailed", "not evicted after all: %v", err)
			slog.Warn("allot scheduler: evict", "pod", p.Name, "err", err)
		}
	}
	// A bind waits while its node still has a pod leaving (evicted now or terminating):
	// the engine counted that pod's devices as free, but the kubelet has not released
	// them. A gang binds whole or waits whole: when one of its binds must wait for the
	// next cycle, so do the others, or the gang would run partly until then.
	waits := map[engine.JobID]bool{}
	for _, b := range plan.Binds {
		leaving, ok := idx.leaving(b.Binding)
		if evictedOn[b.Binding.Node] || evicted[b.Pod] || ok {
			waits[b.Job] = true
		}
		if _, pending := plan.Pending[b.Job]; ok && !pending && !evicted[b.Pod] {
			plan.Pending[b.Job] = engine.Reason{Code: engine.ReasonNoFit,
				Message: fmt.Sprintf("placed on %s, waiting for %s to leave it (terminating)", b.Binding.Node, leaving)}
		}
	}
	for _, b := range plan.Binds {
		p := idx.pods[b.Pod]
		// A pod the plan moves (a consolidation, a reclaim that re-places its victim) is
		// evicted here, and an evicted pod is gone for good: its controller makes a new
		// one, which the next cycle places.
		if p == nil || waits[b.Job] || p.DeletionTimestamp != nil {
			continue
		}
		s.amu.Lock()
		until, waiting := s.backoff[p.UID]
		if waiting && time.Now().Before(until) {
			s.amu.Unlock()
			continue
		}
		delete(s.backoff, p.UID)
		s.amu.Unlock()
		// Assume first, then bind in the background: the next cycle already counts these
		// devices as taken and can start while the API calls are in flight.
		s.amu.Lock()
		s.assumed[p.UID] = b.Binding
		s.amu.Unlock()
		delete(s.reasons, p.UID)
		j := bindJob{p: p, b: b.Binding}
		if b.Binding.Share > 0 && len(b.Binding.GPUs) == 1 {
			if n := idx.nodes[b.Binding.Node]; n != nil && b.Binding.GPUs[0] < len(n.GPUs) {
				j.env = shareEnv(p, n, b.Binding, s.opts.SharingRoot)
			}
		}
		if !s.queueBind(ctx, j) {
			return
		}
	}
}

// notePartialGangs tells the engine since when each gang has run partly. A gang running
// partly because a whole-gang eviction or move was cut short (the scheduler that made it
// died between the requests, or one failed) has its rest stopped at once, with no grace
// period to wait out. That is seen two ways: members leaving by eviction (the API server
// marks them DisruptionTarget), or, once they are gone, an Evicted Event already written
// on a member still running (apply writes every Event before any request).
//
// It also tells the engine which members a partly running gang lost, and where they ran,
// for the reason its rest are stopped with (the pod watch notes them as they go: noteGone).
func (s *Scheduler) notePartialGangs(ctx context.Context, snap *engine.Snapshot, idx *index) {
	seen := make(map[engine.JobID]bool, len(s.partial))
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		bound := map[string]bool{}
		for _, ep := range j.Pods {
			if p := idx.pods[ep.ID]; ep.Binding != nil && p != nil {
				bound[p.Name] = true
			}
		}
		if len(bound) == 0 || len(bound) >= j.MinMember {
			continue
		}
		st, ok := s.partial[j.ID]
		if !ok {
			st = &partialGang{since: snap.Now, cutShort: idx.evicted[j.ID] || s.evictionPlanned(ctx, j, idx)}
			s.partial[j.ID] = st
		}
		j.PartialSince = st.since
		j.MembersEvicted = st.cutShort || idx.evicted[j.ID]
		j.Lost = s.gone.of(j.ID, bound)
		seen[j.ID] = true
	}
	for id := range s.partial {
		if !seen[id] {
			delete(s.partial, id)
		}
	}
	s.gone.keep(seen, s.cycleStart)
}

// partialGang is what the scheduler remembers of a gang running partly.
type partialGang struct {
	since    time.Time
	cutShort bool
}

// evictionPlanned tells whether a running pod of the job carries an Evicted Event from us
// written since it started: an eviction decided and not carried out.
func (s *Scheduler) evictionPlanned(ctx context.Context, j *engine.Job, idx *index) bool {
	for _, ep := range j.Pods {
		p := idx.pods[ep.ID]
		if ep.Binding == nil || p == nil || p.Status.StartTime == nil {
			continue
		}
		evs, err := s.client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=Evicted"})
		if err != nil {
			continue
		}
		for _, ev := range evs.Items {
			if ev.Source.Component == SchedulerName && !ev.LastTimestamp.Before(p.Status.StartTime) {
				return true
			}
		}
	}
	return false
}

// evictionResend is how long an eviction request stands before the same eviction, still
// planned (the pod not yet seen terminating), is requested again.
const evictionResend = 30 * time.Second

// evictionRetry is how soon an eviction that failed (not refused by a budget) is tried again.
const evictionRetry = 5 * time.Second

// writeStatus puts the engine's reason on every waiting pod (condition and Event, when it
// changes; written by the status writers, status.go) and each queue's accounting on its
// status.
func (s *Scheduler) writeStatus(ctx context.Context, plan *engine.Plan, idx *index, queues []*v1alpha1.Queue) {
	// A write that did not land is written again below if its reason still holds.
	for _, w := range s.statuses.takeFailed() {
		if s.reasons[w.p.UID] == w.msg {
			delete(s.reasons, w.p.UID)
		}
	}
	for jid, r := range plan.Pending {
		for _, p := range idx.jobs[jid] {
			if p.Spec.NodeName != "" || s.reasons[p.UID] == r.Message {
				continue
			}
			if s.isAssumed(p.UID) {
				continue
			}
			s.reasons[p.UID] = r.Message
			s.statuses.put(statusWrite{p: p, msg: r.Message})
		}
	}
	for _, q := range queues {
		st, ok := plan.Queues[engine.QueueID(q.Name)]
		if !ok {
			continue
		}
		want := map[string]any{
			"fairShare": resources(st.FairShare), "allocated": resources(st.Allocated),
			"allocatedNonPreemptible": resources(st.AllocatedNonPreemptible), "requested": resources(st.Requested),
			"running": int64(st.Running), "pending": int64(st.Pending)}
		usage, counted := s.usage[q.Name]
		if counted {
			want["usage"] = map[string]any{"gpuSeconds": int64(math.Round(usage.GPUSeconds)), "lastUpdated": usage.At.UTC().Format(time.RFC3339)}
		}
		var cur v1alpha1.QueueStatus
		if statusEqual(q.Status, want, &cur) && !(counted && usageDue(q.Status.Usage, usage)) {
			continue
		}
		// At most one write a second per queue: under a stream of binds its counts change
		// every cycle, and the cycle that follows (one comes at least every Interval) writes the rest.
		if now := time.Now(); now.Sub(s.queueWritten[q.Name]) < time.Second {
			continue
		} else {
			s.queueWritten[q.Name] = now
		}
		u := &unstructured.Unstructured{}
		obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(q)
		u.Object = obj
		u.SetAPIVersion("allot.dev/v1alpha1")
		u.SetKind("Queue")
		u.Object["status"] = want
		if _, err := s.dyn.Resource(queuesGVR).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: queue status", "queue", q.Name, "err", err)
		}
	}
}

// writeGroupStatus records each PodGroup's phase, running pods and reason as the plan
// leaves them.
func (s *Scheduler) writeGroupStatus(ctx context.Context, plan *engine.Plan, groups []*unstructured.Unstructured) {
	if len(groups) == 0 {
		return // no PodGroup objects: skip the walk over every pod
	}
	running := map[engine.JobID]int64{}
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if g := p.Labels[LabelPodGroup]; g != "" && (p.Spec.NodeName != "" || s.isAssumed(p.UID)) && !terminal(p) && p.DeletionTimestamp == nil {
			running[engine.JobID(p.Namespace+"/"+g)]++
		}
	}
	for _, u := range groups {
		jid := engine.JobID(u.GetNamespace() + "/" + u.GetName())
		min, _, _ := unstructured.NestedInt64(u.Object, "spec", "minMember")
		want := map[string]any{"phase": "Pending", "running": running[jid]}
		if running[jid] >= min && min > 0 {
			want["phase"] = "Running"
		}
		if r, ok := plan.Pending[jid]; ok {
			want["reason"] = r.Message
		}
		have, _, _ := unstructured.NestedMap(u.Object, "status")
		if fmt.Sprint(have) == fmt.Sprint(want) {
			continue
		}
		cp := u.DeepCopy()
		cp.Object["status"] = want
		if _, err := s.dyn.Resource(podGroupsGVR).Namespace(u.GetNamespace()).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: pod group status", "group", jid, "err", err)
		}
	}
}

func resources(r engine.Resources) map[string]any {
	return map[string]any{
		string(GPUResource): engine.Format(engine.ResourceGPU, r[engine.ResourceGPU]),
		"cpu":               fmt.Sprintf("%dm", r[engine.ResourceCPU]),
		"memory":            fmt.Sprintf("%d", r[engine.ResourceMemory]),
	}
}

// statusEqual compares the status the queue has with the one to write.
func statusEqual(have v1alpha1.QueueStatus, want map[string]any, scratch *v1alpha1.QueueStatus) bool {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(want, scratch); err != nil {
		return false
	}
	eq := func(a, b corev1.ResourceList) bool {
		if len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
				return false
			}
		}
		return true
	}
	return have.Running == scratch.Running && have.Pending == scratch.Pending && eq(have.FairShare, scratch.FairShare) &&
		eq(have.Allocated, scratch.Allocated) && eq(have.AllocatedNonPreemptible, scratch.AllocatedNonPreemptible) &&
		eq(have.Requested, scratch.Requested)
}
