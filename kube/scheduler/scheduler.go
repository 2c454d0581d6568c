package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
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
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/podfit"
	"github.com/allot-dev/allot/kube/stores"
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
	// UsageIdleWhileAway counts the time since a Queue's status was last written as time
	// nothing ran: the past use it holds only decays over it. Right where the cluster
	// stopped with the scheduler (allot up, whose control plane and pods live in its
	// process); on a real cluster pods run on while the scheduler restarts, and the gap
	// is counted at the rate they run (the default).
	UsageIdleWhileAway bool
	// DeviceReportTimeout is how long a shared pod on a node with an agent waits for its
	// GPU's reservation to have its device reported; zero means DefaultDeviceReportTimeout.
	DeviceReportTimeout time.Duration
	// InterruptionGrace is how long after a node's interruption notice its pods are
	// stopped, told the time first (interruptions.go); zero means DefaultInterruptionGrace.
	InterruptionGrace time.Duration
	// ScaleDownGrace is how long an elastic workload whose count was lowered has to stop
	// its own pods before the members a plan took are evicted (scale.go); zero means
	// DefaultScaleDownGrace.
	ScaleDownGrace time.Duration
	// GPUDeviceClasses are the DRA DeviceClasses whose devices count as GPUs (the GPUs
	// of a node and of a claim); empty means dra.DefaultGPUClasses.
	GPUDeviceClasses []string
	// MIGDeviceClasses are the DeviceClasses whose devices are MIG parts of a GPU, each
	// counted as its share of the GPU; empty means dra.DefaultMIGClasses.
	MIGDeviceClasses []string
	// Accelerators are the kinds of accelerator besides NVIDIA's GPUs the scheduler
	// schedules (allot scheduler --accelerators); nil: NVIDIA's GPUs only.
	Accelerators *convert.Accelerators
}

// Scheduler runs cycles against the API server.
type Scheduler struct {
	opts   Options
	client kubernetes.Interface
	allot  versioned.Interface // Allot's own resources: Queues, PodGroups, Topologies
	// dyn writes the counts of elastic workloads, which other projects define (scale.go).
	dyn dynamic.Interface
	// scaled and shrunk are the counts last asked of elastic workloads, by job; amu.
	scaled, shrunk map[engine.JobID]scaleMark
	eng            *engine.Engine
	recorder       record.EventRecorder
	events         *podEvents
	statuses       *podStatuses
	// bindsWaiting counts the binds handed to the bind workers and not yet taken by one;
	// Events and pods' reasons are written only while it is zero.
	bindsWaiting atomic.Int64
	// overdueUnread holds the StatefulSets (by UID) whose read for the interactive time
	// limit failed and was logged, until one is read again (lifecycle.go).
	overdueUnread sync.Map

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
	// migAwaiting holds pods whose MIG instance the node's agent is to make (mig.go).
	migAwaiting map[types.UID]migAwait
	// migWished is, per node, the MIG instances this scheduler last asked its agent for.
	migWished map[string][]v1alpha1.MIGWish
	// migWrite orders the writes of MIG wishes (mig.go): the last written is the newest.
	migWrite sync.Mutex
	// adopted remembers the pods already counted as adopting the device plugin's choice.
	adopted map[types.UID]bool
	binds   chan bindJob
	conv    convCache // touched only by cycles
	// occWritten remembers the occupancy last written per node; occAt when.
	occWritten map[engine.NodeID]string
	occAt      time.Time
	// queueWritten is when each queue's status was last written.
	queueWritten map[string]time.Time
	// queueProblems is the problem last reported per Queue (reportQueueProblems).
	queueProblems map[string]string
	// usage is each queue's past use above quota (usage.go); the Queue's status holds it
	// between terms and restarts.
	usage map[string]engine.Usage
	// reasons remembers the last reason written per pod, to write only changes.
	reasons map[types.UID]string
	// evicting holds eviction requests made, by pod, until the pod is seen gone. Guarded
	// by amu, as the requests are made at once (evictions.go).
	evicting map[types.UID]time.Time
	// evicted holds the evictions in flight or accepted by the API server, by pod, with
	// when (Now), until the informer shows the pod terminating or gone or
	// evictionAssumeFor passes: the cycles meanwhile count it as leaving (listing.go).
	// Guarded by amu.
	evicted map[types.UID]time.Time
	// partial holds since when each gang has run fewer than its minimum of pods (for the
	// engine's stale-gang rule); a restart forgets it and the grace period starts again.
	partial map[engine.JobID]*partialGang
	// gone notes the gang members that left their nodes, for the stale-gang reason.
	gone goneMembers
	// interrupts holds when each node's interruption notice was first seen;
	// interruptedUnwritten, the interruptions counted and not yet written on PodGroups.
	interrupts           interruptions
	interruptedUnwritten map[engine.JobID]int32
	cycleStart           time.Time // when the running cycle began (wall clock)

	// fit holds kube-scheduler's plugins for the Kubernetes scheduling contract.
	fit *podfit.Checker

	pods, nodes, queues, groups cache.SharedIndexInformer // queues and groups hold typed Queues and PodGroups
	agentLeases                 cache.SharedIndexInformer // the nodes' agents' (agents.go)
	// stores are those informers' stores as the process's other controllers read them
	// (Stores), set once they have synced.
	stores atomic.Pointer[stores.Stores]
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

	draState // DRA: slices, claims and classes, and the allocations in flight (dra.go)
}

// New connects to the cluster.
func New(rc *rest.Config, opts Options) (*Scheduler, error) {
	rc = rest.CopyConfig(rc)
	// A scheduler binds hundreds of pods a second; client-go's default of 5 QPS would
	// make it crawl. The API server's own priority and fairness still protects it.
	rc.QPS, rc.Burst = 2000, 4000
	rc.Wrap(withDeadlines(CallTimeout))
	allot, err := allotclient.NewForConfig(rc) // JSON, whatever rc asks

	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc) // JSON: custom resources have no protobuf
	if err != nil {
		return nil, err
	}
	// Protobuf costs the API server a fraction of JSON's encoding work, as for the built-in
	// components.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(rc)
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
	s := &Scheduler{opts: opts, client: client, allot: allot, dyn: dyn, scaled: map[engine.JobID]scaleMark{}, shrunk: map[engine.JobID]scaleMark{}, eng: engine.New(opts.Engine),
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: SchedulerName}), events: newPodEvents(), statuses: newPodStatuses(),
		assumed: map[types.UID]engine.Binding{}, awaiting: map[types.UID]awaitingBind{}, migAwaiting: map[types.UID]migAwait{}, migWished: map[string][]v1alpha1.MIGWish{}, adopted: map[types.UID]bool{}, backoff: map[types.UID]time.Time{}, unknownUntil: map[types.UID]time.Time{}, reasons: map[types.UID]string{}, evicting: map[types.UID]time.Time{}, evicted: map[types.UID]time.Time{}, partial: map[engine.JobID]*partialGang{}, wake: make(chan struct{}, 1),
		occWritten: map[engine.NodeID]string{}, queueWritten: map[string]time.Time{}, queueProblems: map[string]string{}, usage: map[string]engine.Usage{},
		interrupts: interruptions{}, interruptedUnwritten: map[engine.JobID]int32{}}
	s.claimsAssumed = map[types.UID]assumedClaim{}
	if opts.LeaderElection {
		// Made here, before Run, so that Leading reads it from any goroutine.
		s.fence = &fence{enabled: true, valid: opts.Lease.withDefaults().Duration - fenceMargin}
	}
	if s.opts.UsageHalfLife <= 0 {
		s.opts.UsageHalfLife = engine.DefaultUsageHalfLife
	}
	s.conv.kinds = opts.Accelerators
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

// Leading tells whether this replica may act now: always without leader election, else
// while its fence holds (the loops beside the scheduler, such as kube/idle, act only then).
func (s *Scheduler) Leading() bool { return s.fence.ok() }

// Stores are the pods, nodes, agents' Leases and Queues of the scheduler's informers, for
// the controllers that run in its process (the idle controller, the custom metrics API):
// one copy of each in the process. False until they have first synced; after an outage the
// old ones are read until the new have listed.
func (s *Scheduler) Stores() (stores.Stores, bool) {
	st := s.stores.Load()
	if st == nil {
		return stores.Stores{}, false
	}
	return *st, true
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
	clear(s.evicting)
	clear(s.evicted)
	s.amu.Unlock()
	clear(s.reasons)
	clear(s.usage) // another leader may have counted since: read it from the status again
}
