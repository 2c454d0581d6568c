package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Component is the name the agent writes Events under.
const Component = "allot-agent"

// Options configure one node's agent.
type Options struct {
	Node         string
	NVML         nvml.Interface
	PodResources podresourcesv1.PodResourcesListerClient
	// PodResourcesSocket is where PodResources is served, for what the agent says when
	// it cannot reach it.
	PodResourcesSocket string
	// Sharing is the enforcement the node declares (v1alpha1.SharingModes); empty leaves
	// the node's allot.dev/gpu-sharing label as an admin set it.
	Sharing string
	// FractionsOnTrust says the node's admin lets pods take slices of its GPUs where
	// Sharing enforces none (LabelFractionsOnTrust): nothing holds them to their share.
	FractionsOnTrust bool
	// Compute is the loosest compute mode the node's sharing pods may run in
	// (v1alpha1.ComputeModes; empty: capped), written as LabelComputeMode.
	Compute string
	// Delivery is how the node's runtime gives a sharing pod its device (LabelGPUDelivery:
	// cdi or env), DeliveryAuto to read it from the GPU Operator, or empty to leave the
	// node's label as an admin set it.
	Delivery string
	// NRIReadyFile is the file Allot's NRI plugin (allot nri-plugin, a container of the
	// agent's pod) writes once it is registered with the container runtime: cdi delivery
	// is declared only if it is there when the agent starts (the chart starts the plugin
	// first: its startup probe waits for this file), since no other plugin gives a pod outside the
	// GPU Operator's namespace its device on every toolkit release. Empty: not checked
	// (the plugin runs elsewhere).
	NRIReadyFile string
	// CDIDeviceIDs is how the device plugin's CDI spec names the node's GPUs (its
	// DEVICE_ID_STRATEGY: v1alpha1.CDIIDsUUID or CDIIDsIndex), written as the node's
	// LabelCDIDeviceIDs; empty leaves the label as an admin set it.
	CDIDeviceIDs string
	// SharingRuntimeClass is the runtime class the webhook gives sharing pods (the chart's
	// sharing.runtimeClassName): where the GPU Operator runs with CDI on, env delivery is
	// read only under such a class (its nvidia-legacy), and is not declared without one.
	SharingRuntimeClass string
	// IgnoredXIDs are XIDs that do not fail a device here (an admin's list, beside those
	// NVIDIA's catalogue puts down to the application).
	IgnoredXIDs []uint64
	// OnGPUFailure is what happens to a pod on a device that fails: FailureEvent (an Event
	// only, the default: the owner decides) or FailureEvict (the pod is deleted, so that
	// a Job, Deployment or gang controller starts it again elsewhere).
	OnGPUFailure string
	// Interval between load reports (utilisation, memory); 10 s when zero.
	Interval time.Duration
	Version  string
	Metrics  *Metrics // nil: none
	Now      func() time.Time
	// SharingRoot is the host directory shared with pods sharing a GPU (MPS pipes,
	// HAMi-core's library); HAMiCoreLibrary is where the admin installed HAMi-core's
	// libvgpu.so (for hami-core); MPSControl is NVIDIA's MPS control program (for mps;
	// DefaultMPSControl when empty).
	SharingRoot, HAMiCoreLibrary, MPSControl string
	// MPSHost: the MPS daemons are started by the MPS host (allot mps-host, a container of
	// their own in the agent's pod) rather than by the agent, so that they outlive it.
	MPSHost bool
	// ProcRoot is the host's /proc as the agent sees it (the chart mounts it at
	// /host/proc), where the cgroup of each process NVML lists on a GPU names its pod:
	// each pod's GPU memory is then measured every Interval (AnnotationPodGPUMemoryUsed).
	// Empty measures nothing, as on simulated nodes, whose processes are not on GPUs.
	ProcRoot string
}

// Agent reports one node's GPUs. Run it on the node (a DaemonSet), or in process for a
// simulated node.
type Agent struct {
	opts     Options
	client   kubernetes.Interface
	recorder record.EventRecorder
	inv      []v1alpha1.GPUInfo

	mu        sync.Mutex
	unhealthy map[int]v1alpha1.UnhealthyGPU
	// failedBy says what failed each unhealthy device, and so what may bring it back:
	// NVML reaching a lost device again, the device plugin listing it again. An XID or
	// ECC failure stays until the agent restarts (after the GPU's reset).
	failedBy map[int]failureSource
	// load is the last report's utilisation and memory annotations, for the Lease.
	load    map[string]string
	told    map[types.UID]map[int]bool // pods already given an Event for a failed device
	lastXID map[int]uint64
	changed chan struct{}
	// declared is the enforcement the node declares: opts.Sharing, or none when it cannot
	// be had (prepareSharing). mps holds the GPUs whose MPS daemon runs (the run loop's).
	declared     string
	mps          map[string]bool
	mpsAdopted   bool
	mpsHeld      map[string]mpsLimits // the limits each daemon was last set to
	mpsPending   bool                 // a daemon or its limits to try again
	probes       probeState
	beatFailures int // the run loop's
	// migWanted is the node's last MIG wishes (AnnotationMIGWanted), and migRetry that
	// they were not all made (NVML refused, a busy instance in the way, the inventory not
	// written): the run loop tries them again each interval. The run loop's.
	migWanted string
	migRetry  bool
	migSaid   map[string]bool // the problems told of the wishes as they stand
	podMemory podMemoryState  // the run loop's
}

// New makes an agent; Run starts it.
func New(client kubernetes.Interface, opts Options) (*Agent, error) {
	if opts.Node == "" {
		return nil, errors.New("agent: the node's name is required (--node-name, or NODE_NAME from the downward API)")
	}
	if opts.CDIDeviceIDs != "" {
		if _, err := v1alpha1.ParseCDIDeviceIDs(opts.CDIDeviceIDs); err != nil {
			return nil, fmt.Errorf("--cdi-device-ids: %w", err)
		}
	}
	if _, err := v1alpha1.ParseSharing(opts.Sharing); err != nil {
		return nil, fmt.Errorf("--sharing: %w", err)
	}
	switch opts.OnGPUFailure {
	case "":
		opts.OnGPUFailure = FailureEvent
	case FailureEvent, FailureEvict:
	default:
		return nil, fmt.Errorf("--on-gpu-failure %q is not allowed: %s or %s", opts.OnGPUFailure, FailureEvent, FailureEvict)
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Agent{opts: opts, client: client, recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: opts.Node}),
		unhealthy: map[int]v1alpha1.UnhealthyGPU{}, failedBy: map[int]failureSource{}, told: map[types.UID]map[int]bool{}, lastXID: map[int]uint64{},
		changed: make(chan struct{}, 1), mps: map[string]bool{}, mpsHeld: map[string]mpsLimits{}}, nil
}

// Run reports until ctx ends. It fails at once when NVML does not answer: without it the
// node's devices cannot be told apart, and a node that says nothing is safer than one that
// guesses.
func (a *Agent) Run(ctx context.Context) error {
	lib := a.opts.NVML
	if r := lib.Init(); r != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %s (is the NVIDIA driver installed, and does the container see libnvidia-ml.so.1 and the devices? The chart runs the agent with runtimeClassName nvidia)", r.Error())
	}
	defer lib.Shutdown()
	inv, err := ReadInventory(lib)
	if err != nil {
		return err
	}
	a.inv = inv
	// The node is marked as having an agent only once the kubelet answers: an agent that
	// cannot read which devices pods were given would have fractions wait for reports
	// that never come.
	if err := CheckPodResources(ctx, a.opts.PodResources, a.opts.PodResourcesSocket); err != nil {
		return err
	}
	declared, problem := a.prepareSharing()
	a.declared = declared
	// The Lease first: a scheduler that sees the node marked as having an agent before it
	// sees the agent's Lease takes the agent for gone, and places fractions there by index
	// instead of on their reservation's real device.
	a.beat(ctx)
	if err := a.publishInventory(ctx); err != nil {
		return err
	}
	if problem != "" {
		msg := fmt.Sprintf("GPU sharing declared %s (--sharing %s) cannot be enforced: %s", declared, a.opts.Sharing, problem)
		slog.Warn("allot agent: "+msg, "node", a.opts.Node)
		a.recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: a.opts.Node, UID: types.UID(a.opts.Node)}, corev1.EventTypeWarning, "SharingNotEnforced", msg)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.opts.Node).String()
	}))
	pods := factory.Core().V1().Pods().Informer()
	poke := func(any) { a.poke() }
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return ctx.Err()
	}
	go func() {
		err := WatchHealth(ctx, lib, inv, func(f Failure) {
			if f.XID != 0 && slices.Contains(a.opts.IgnoredXIDs, f.XID) {
				slog.Info("allot agent: ignored XID", "node", a.opts.Node, "gpu", f.Index, "xid", f.XID)
				return
			}
			a.fail(f.Index, f.Reason, f.XID, failedByEvent)
		})
		if err != nil {
			slog.Warn("allot agent: device events", "node", a.opts.Node, "err", err)
		}
	}()
	migWishes := a.watchMIGWishes(ctx)
	load := time.NewTicker(a.opts.Interval)
	defer load.Stop()
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	a.report(ctx, lib)
	a.beat(ctx)
	a.publishHealth(ctx, pods.GetStore().List()) // clears what an earlier run left, if all is well now
	pending := a.syncDevices(ctx, pods.GetStore().List())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-load.C:
			a.report(ctx, lib)
			a.beat(ctx)
			a.sweepShm(pods.GetStore().List())
			a.syncPodMemory(ctx, lib, pods.GetStore().List())
			a.retryMIG(ctx, lib)
		case wanted := <-migWishes:
			a.migWanted, a.migSaid = wanted, nil
			a.migRetry = !a.syncMIG(ctx, lib, wanted)
		case <-a.changed:
			pending = a.syncDevices(ctx, pods.GetStore().List())
			a.publishHealth(ctx, pods.GetStore().List())
			a.syncMPS(ctx, pods.GetStore().List())
		case <-retry.C:
			// The kubelet lists a container's devices once it has admitted it; a pod seen
			// before then is looked at again each second until its devices are known.
			if pending {
				pending = a.syncDevices(ctx, pods.GetStore().List())
			}
			// A Lease not written (Allot's namespace not made yet, the API server away)
			// is tried again each second rather than an interval later.
			if a.probes.failing("lease") {
				a.beat(ctx)
			}
			if a.mpsPending {
				a.syncMPS(ctx, pods.GetStore().List())
			}
		}
	}
}

// beat renews the agent's Lease and tells the probes the loop runs.
func (a *Agent) beat(ctx context.Context) {
	if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
		// At first Allot's namespace may not be there yet (the scheduler makes it): said
		// once it keeps failing.
		if a.beatFailures++; a.beatFailures == 5 {
			slog.Warn("allot agent: heartbeat", "node", a.opts.Node, "err", err)
		}
	} else {
		a.beatFailures = 0
	}
	a.probes.tick(a.opts.Now())
}

func (a *Agent) poke() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// publishInventory writes what the node's devices are (once, at start) and the sharing
// enforcement the node declares.
func (a *Agent) publishInventory(ctx context.Context) error {
	inv, _ := json.Marshal(a.inv)
	uuids := make([]string, len(a.inv))
	for i, g := range a.inv {
		uuids[i] = g.UUID
	}
	meta := map[string]any{"annotations": map[string]any{
		v1alpha1.AnnotationAgent:        a.version(),
		v1alpha1.AnnotationGPUInventory: string(inv),
		v1alpha1.AnnotationGPUUUIDs:     strings.Join(uuids, ","),
	}}
	labels := map[string]any{}
	if a.declared != "" {
		labels[v1alpha1.LabelGPUSharing] = a.declared
	}
	// Written or taken off at every start, so that a pool whose admin stops trusting
	// fractions stops taking them once its agents restart.
	labels[v1alpha1.LabelFractionsOnTrust] = nil
	if a.opts.FractionsOnTrust && a.declared != v1alpha1.SharingMPS && a.declared != v1alpha1.SharingHAMiCore {
		labels[v1alpha1.LabelFractionsOnTrust] = "true"
	}
	// Written or taken off at every start, as the trust above.
	labels[v1alpha1.LabelComputeMode] = nil
	if a.opts.Compute != "" && a.opts.Compute != v1alpha1.ComputeCapped {
		labels[v1alpha1.LabelComputeMode] = a.opts.Compute
	}
	delivery, problem, transient := a.delivery(ctx)
	if a.opts.CDIDeviceIDs != "" {
		labels[v1alpha1.LabelCDIDeviceIDs] = a.opts.CDIDeviceIDs
	}
	if delivery != "" {
		labels[v1alpha1.LabelGPUDelivery] = delivery
	} else if a.opts.Delivery != "" && !transient {
		labels[v1alpha1.LabelGPUDelivery] = nil // an earlier start's, no longer true
	}
	if problem != "" {
		slog.Warn("allot agent: "+problem, "node", a.opts.Node)
		a.recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: a.opts.Node, UID: types.UID(a.opts.Node)}, corev1.EventTypeWarning, "DeliveryUnknown", problem)
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if err := a.patchNode(ctx, meta); err != nil {
		return fmt.Errorf("node %s: writing the GPU inventory: %w", a.opts.Node, err)
	}
	return nil
}

func (a *Agent) version() string {
	if a.opts.Version == "" {
		return "dev"
	}
	return a.opts.Version
}

func (a *Agent) patchNode(ctx context.Context, meta map[string]any) error {
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	_, err := a.client.CoreV1().Nodes().Patch(ctx, a.opts.Node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// report reads the devices' load, writes it to the Node when it changed, and notices a
// device that fell off the bus.
func (a *Agent) report(ctx context.Context, lib nvml.Interface) {
	s := ReadSample(lib, len(a.inv))
	lost := map[int]bool{}
	for _, i := range s.Lost {
		lost[i] = true
		a.fail(i, "GPU is lost: NVML cannot reach it (fallen off the bus)", 0, failedByLoss)
	}
	a.recover(failedByLoss, func(i int) bool { return !lost[i] })
	if healthy, ok, err := PluginHealthy(ctx, a.opts.PodResources, a.inv); err == nil && ok {
		for i := range a.inv {
			if !healthy[i] {
				a.fail(i, "the NVIDIA device plugin reports it unhealthy", 0, failedByPlugin)
			}
		}
		a.recover(failedByPlugin, func(i int) bool { return healthy[i] })
	}
	unhealthy, xids := a.health()
	a.opts.Metrics.observe(a.opts.Node, a.inv, s, unhealthy, xids)
	// The load goes out with the next heartbeat, on the agent's own Lease: written to the
	// Node, it would reach every Node watcher in the cluster (kube-scheduler, every
	// controller, every DaemonSet) at each report.
	a.mu.Lock()
	a.load = map[string]string{v1alpha1.AnnotationGPUUtilization: formatInts(s.Utilization), v1alpha1.AnnotationGPUMemoryUsed: formatInts(s.MemoryUsed)}
	a.mu.Unlock()
}

// failureSource is what failed a device.
type failureSource int

const (
	failedByEvent  failureSource = iota // an XID or ECC event
	failedByLoss                        // NVML cannot reach it
	failedByPlugin                      // the device plugin took it out
)

// recover returns to health the devices failed by source that back says are back.
func (a *Agent) recover(source failureSource, back func(int) bool) {
	a.mu.Lock()
	var recovered []int
	for i, src := range a.failedBy {
		if src == source && back(i) {
			delete(a.unhealthy, i)
			delete(a.failedBy, i)
			recovered = append(recovered, i)
		}
	}
	a.mu.Unlock()
	for _, i := range recovered {
		slog.Info("allot agent: GPU recovered", "node", a.opts.Node, "gpu", i, "uuid", a.inv[i].UUID)
	}
	if len(recovered) > 0 {
		a.poke()
	}
}

// fail records device i as failed (once) and has the health published.
func (a *Agent) fail(i int, reason string, xid uint64, source failureSource) {
	if i < 0 || i >= len(a.inv) {
		return
	}
	a.mu.Lock()
	if xid != 0 {
		a.lastXID[i] = xid
	}
	_, known := a.unhealthy[i]
	if !known {
		a.unhealthy[i] = v1alpha1.UnhealthyGPU{Index: i, UUID: a.inv[i].UUID, Reason: reason, Since: a.opts.Now().UTC().Format(time.RFC3339)}
		a.failedBy[i] = source
	} else if source == failedByEvent {
		a.failedBy[i] = source // an event outlasts the loss or the plugin's verdict it came with
	}
	a.mu.Unlock()
	if !known {
		slog.Warn("allot agent: GPU failed", "node", a.opts.Node, "gpu", i, "uuid", a.inv[i].UUID, "reason", reason)
		a.poke()
	}
}

// health is the failed devices and the last XID of each, for metrics.
func (a *Agent) health() (map[int]v1alpha1.UnhealthyGPU, map[int]uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := make(map[int]v1alpha1.UnhealthyGPU, len(a.unhealthy))
	for k, v := range a.unhealthy {
		u[k] = v
	}
	x := make(map[int]uint64, len(a.lastXID))
	for k, v := range a.lastXID {
		x[k] = v
	}
	return u, x
}

// publishHealth writes the failed devices to the Node and gives each pod on one an Event.
func (a *Agent) publishHealth(ctx context.Context, pods []any) {
	unhealthy, xids := a.health()
	a.opts.Metrics.observeHealth(a.opts.Node, a.inv, unhealthy, xids)
	// Written when it differs from the Node's, an empty list too: a device that came back
	// (or that an earlier run of the agent saw fail before the GPU was reset) counts again.
	var want any // nil removes the annotation
	if len(unhealthy) > 0 {
		v, _ := json.Marshal(sortedUnhealthy(unhealthy))
		want = string(v)
	}
	n, err := a.client.CoreV1().Nodes().Get(ctx, a.opts.Node, metav1.GetOptions{ResourceVersion: "0"})
	cur, has := "", false
	if err == nil {
		cur, has = n.Annotations[v1alpha1.AnnotationGPUUnhealthy]
	}
	if err != nil || (want == nil && has) || (want != nil && cur != want) {
		if err := a.patchNode(ctx, map[string]any{"annotations": map[string]any{v1alpha1.AnnotationGPUUnhealthy: want}}); err != nil && ctx.Err() == nil {
			slog.Warn("allot agent: GPU health", "node", a.opts.Node, "err", err)
		}
	}
	if len(unhealthy) == 0 {
		return
	}
	present := make(map[types.UID]bool, len(pods))
	for _, o := range pods {
		present[o.(*corev1.Pod).UID] = true
	}
	a.mu.Lock()
	for uid := range a.told { // pods gone from the node
		if !present[uid] {
			delete(a.told, uid)
		}
	}
	a.mu.Unlock()
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed ||
			v1alpha1.IsReservation(p) {
			continue
		}
		for _, i := range a.heldBy(p) {
			u, bad := unhealthy[i]
			a.mu.Lock()
			told := a.told[p.UID][i]
			if bad && !told {
				if a.told[p.UID] == nil {
					a.told[p.UID] = map[int]bool{}
				}
				a.told[p.UID][i] = true
			}
			a.mu.Unlock()
			if bad && !told {
				if a.opts.OnGPUFailure == FailureEvict {
					a.recorder.Eventf(p, corev1.EventTypeWarning, "GPUUnhealthy", "GPU %d (%s) on node %s failed: %s. The pod is deleted so that its owner starts it again on a healthy GPU (the node's policy: evict).",
						i, u.UUID, a.opts.Node, u.Reason)
					a.evict(ctx, p)
					continue
				}
				a.recorder.Eventf(p, corev1.EventTypeWarning, "GPUUnhealthy", "GPU %d (%s) on node %s failed: %s. The scheduler places nothing more on it; this pod's work on it may be lost.",
					i, u.UUID, a.opts.Node, u.Reason)
			}
		}
	}
}

// Policies for pods on a failed device.
const (
	FailureEvent = "event"
	FailureEvict = "evict"
)

// evict deletes a pod on a failed device, gracefully and only the pod seen (its UID): as
// the taint manager does with pods on a failed node, not through the Eviction API, whose
// disruption budgets guard against voluntary disruptions, which this is not.
func (a *Agent) evict(ctx context.Context, p *corev1.Pod) {
	err := a.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		slog.Warn("allot agent: deleting a pod on a failed GPU", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// heldBy is the device indices a pod holds: the kubelet's record for pods given whole
// devices, the scheduler's for pods sharing one (they are given none by the kubelet).
func (a *Agent) heldBy(p *corev1.Pod) []int {
	if rec := p.Annotations[v1alpha1.AnnotationGPUDevices]; rec != "" {
		var out []int
		for _, u := range strings.Split(rec, ",") {
			if i := a.indexOf(u); i >= 0 {
				out = append(out, i)
			}
		}
		return out
	}
	indices, _ := v1alpha1.HeldGPUs(p)
	return indices
}

func (a *Agent) indexOf(uuid string) int {
	return slices.IndexFunc(a.inv, func(g v1alpha1.GPUInfo) bool { return g.UUID == uuid })
}

// syncDevices records on each pod the devices the kubelet gave it, and says whether a pod
// asking for devices has none recorded yet.
func (a *Agent) syncDevices(ctx context.Context, pods []any) (pending bool) {
	var waiting []*corev1.Pod
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if wholeGPUs(p) > 0 && p.Annotations[v1alpha1.AnnotationGPUDevices] == "" {
			waiting = append(waiting, p)
		}
	}
	if len(waiting) == 0 {
		return false
	}
	given, err := GivenDevices(ctx, a.opts.PodResources, a.inv)
	a.probes.set("kubelet", err)
	if err != nil {
		if ctx.Err() == nil {
			slog.Warn("allot agent: kubelet pod resources", "node", a.opts.Node, "err", err)
		}
		return true
	}
	for _, p := range waiting {
		uuids := given[PodKey{p.Namespace, p.Name}]
		if len(uuids) == 0 {
			pending = true
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":         p.UID, // the pod the kubelet admitted, not a new one of the same name
			"annotations": map[string]string{v1alpha1.AnnotationGPUDevices: strings.Join(uuids, ",")}}})
		_, err := a.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) && ctx.Err() == nil {
			slog.Warn("allot agent: device record", "pod", p.Namespace+"/"+p.Name, "err", err)
			pending = true
		}
	}
	return pending
}

// wholeGPUs is what a pod's containers ask of nvidia.com/gpu (limits, as the device plugin
// counts them).
func wholeGPUs(p *corev1.Pod) int64 {
	return v1alpha1.WholeGPUs(p)
}
