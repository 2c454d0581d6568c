// Package simnode simulates GPU nodes for the embedded cluster: Node objects with the
// labels NVIDIA GPU Feature Discovery puts on real nodes and an nvidia.com/gpu capacity,
// and a small kubelet that runs the pods bound to them. No GPU is needed.
package simnode

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/podutil"
	"github.com/allot-dev/allot/mig"
)

// Well-known names.
const (
	GPUResource    = corev1.ResourceName("nvidia.com/gpu")
	LabelProduct   = v1alpha1.LabelGPUProduct
	LabelMemory    = v1alpha1.LabelGPUMemory // MiB per GPU, as GFD writes it
	LabelCount     = v1alpha1.LabelGPUCount
	LabelSimulated = v1alpha1.LabelSimulated
	// AnnotationDuration makes a simulated pod succeed after running this long.
	AnnotationDuration = "allot.dev/sim-duration"
	// AnnotationStopAfter makes a deleted simulated pod's containers take this long to stop
	// (at most its grace period), as a training job saving a checkpoint would: until then
	// the pod is terminating and still holds its devices.
	AnnotationStopAfter = "allot.dev/sim-stop-after"
	// AnnotationUtilization is how busy a simulated pod keeps its part of its GPUs, in
	// percent. Without it a training or inference pod keeps them 95% busy and an interactive
	// one (a notebook between cells) leaves them idle.
	AnnotationUtilization = "allot.dev/sim-gpu-utilization"
)

// Spec describes a group of identical simulated nodes.
type Spec struct {
	Prefix      string
	Count       int
	GPUs        int
	GPUType     string
	GPUMemoryMi int64
	CPU, Memory string
	Labels      map[string]string
	// Sharing is the GPU sharing enforcement the node's agent declares
	// (allot.dev/gpu-sharing); empty declares none. Only nodes with Devices have agents.
	Sharing string
	// Compute is the loosest compute mode the node's agent allows its sharing pods
	// (allot.dev/gpu-compute-mode); empty: capped.
	Compute string
	// DRA publishes the GPUs as NVIDIA's DRA driver does, in ResourceSlices (dra.go),
	// instead of as the device plugin's nvidia.com/gpu.
	DRA bool
	// MIGGPUs is how many GPUs of each DRA node are in MIG mode, published as seven
	// 1g.10gb devices each (class mig.nvidia.com) instead of whole.
	MIGGPUs int
	// DRAShared GPUs may be allocated to several claims, each consuming part of the
	// GPU's memory (consumable capacity).
	DRAShared bool
	// Kind, when set, makes the nodes another vendor's: GPUs devices of the kind's first
	// resource instead of nvidia.com/gpu, GPUType and GPUMemoryMi under the kind's model
	// and memory labels, and none of NVIDIA's labels or UUIDs. Its device plugin is not
	// simulated: the kubelet admits a pod while the node has enough left (AdmitExtended).
	Kind *convert.Accelerator
	// MIGLayout puts every GPU of the nodes in MIG mode with these instances (profile
	// names, each at its first free start), advertised as the device plugin's mixed
	// strategy does (nvidia.com/mig-<profile>); MIGDynamic puts them in MIG mode with no
	// instance, for Allot to lay out (label allot.dev/mig-dynamic=true). Either way the
	// nodes have no whole nvidia.com/gpu. With Devices, the mock GPUs are in MIG mode too
	// and the node's agent reports and makes the instances.
	MIGLayout  []string
	MIGDynamic bool
	// MIGStrategy "single" advertises the fixed layout (MIGLayout, of one profile) as the
	// device plugin's single strategy does: nvidia.com/gpu, one an instance, with GPU
	// Feature Discovery's labels for it (nvidia.com/mig.strategy=single, product
	// "<GPUType>-MIG-<profile>", count and memory the instances'). Empty: mixed.
	MIGStrategy string
}

// MIG reports whether the nodes' GPUs are in MIG mode.
func (s Spec) MIG() bool { return len(s.MIGLayout) > 0 || s.MIGDynamic }

// CheckMIG says what is wrong with the spec's MIG layout: a GPU model without MIG, a
// profile the model lacks, or a layout that does not fit one GPU.
func (s Spec) CheckMIG() error {
	m, err := s.migModel()
	if err != nil {
		return err
	}
	switch s.MIGStrategy {
	case "", "mixed":
	case "single":
		if len(s.MIGLayout) == 0 || s.MIGDynamic || slices.ContainsFunc(s.MIGLayout, func(p string) bool { return p != s.MIGLayout[0] }) {
			return fmt.Errorf("MIG strategy single needs a fixed layout of one profile (not dynamic): the device plugin's single strategy gives instances of one profile, got %s", strings.Join(s.MIGLayout, "+"))
		}
	default:
		return fmt.Errorf("MIG strategy %q: single or mixed", s.MIGStrategy)
	}
	var l mig.Layout
	for _, name := range s.MIGLayout {
		p, _ := m.Profile(name)
		placed := false
		for _, st := range p.Starts {
			if m.Valid(l, p, st) == nil {
				l, placed = append(l, mig.Placed{Profile: p, Start: st}), true
				break
			}
		}
		if !placed {
			return fmt.Errorf("the layout %s does not fit one %s: no room left for %s", strings.Join(s.MIGLayout, "+"), m.Name, name)
		}
	}
	return nil
}

// migModel is the MIG geometry of the spec's GPUs.
func (s Spec) migModel() (*mig.Model, error) {
	m, ok := mig.ForProduct(s.GPUType, s.GPUMemoryMi<<20)
	if !ok {
		return nil, fmt.Errorf("GPU type %q has no MIG: families %s", s.GPUType, strings.Join(mig.Families(), ", "))
	}
	for _, p := range s.MIGLayout {
		if _, ok := m.Profile(p); !ok {
			return nil, fmt.Errorf("MIG profile %q is not one of %s's: %s", p, m.Name, strings.Join(m.Names(), ", "))
		}
	}
	return m, nil
}

// Create makes the Node objects (existing ones are kept) and marks them Ready.
func Create(ctx context.Context, client kubernetes.Interface, spec Spec) error {
	for i := 1; i <= spec.Count; i++ {
		name := fmt.Sprintf("%s-%d", spec.Prefix, i)
		labels := map[string]string{LabelProduct: spec.GPUType, LabelMemory: strconv.FormatInt(spec.GPUMemoryMi, 10),
			LabelCount: strconv.Itoa(spec.GPUs), LabelSimulated: "true", corev1.LabelHostname: name,
			// The simulated kubelet reads a sharing pod's device from its environment, as
			// the NVIDIA runtime in legacy mode does.
			v1alpha1.LabelGPUDelivery: v1alpha1.DeliveryEnv}
		// The simulated kubelet runs no container for a limit to hold: where the nodes
		// declare no enforcement, their admin takes slices on trust (as their agents say
		// once they start, where they have agents).
		if spec.Sharing != v1alpha1.SharingMPS && spec.Sharing != v1alpha1.SharingHAMiCore {
			labels[v1alpha1.LabelFractionsOnTrust] = "true"
		}
		for k, v := range spec.Labels {
			labels[k] = v
		}
		capacity := corev1.ResourceList{
			GPUResource:           *resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI),
			corev1.ResourceCPU:    resource.MustParse(spec.CPU),
			corev1.ResourceMemory: resource.MustParse(spec.Memory),
			corev1.ResourcePods:   resource.MustParse("250"),
			// As a real node's kubelet reports its scratch disk.
			corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
		}
		uuids := make([]string, spec.GPUs)
		for g := range uuids {
			uuids[g] = simulatedUUID(name, g)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			Annotations: map[string]string{v1alpha1.AnnotationGPUUUIDs: strings.Join(uuids, ",")}}}
		if spec.DRA {
			delete(capacity, GPUResource)
			node.Annotations = nil
		}
		if spec.MIG() {
			if _, err := spec.migModel(); err != nil {
				return err
			}
			delete(capacity, GPUResource)
			labels["nvidia.com/mig.strategy"] = "mixed"
			if spec.MIGStrategy == "single" {
				if err := spec.CheckMIG(); err != nil {
					return err
				}
				// GFD's single-strategy labels: the instances' product, count and memory
				// written over the GPUs' (the device plugin's internal/lm labelers).
				m, _ := spec.migModel()
				p, _ := m.Profile(spec.MIGLayout[0])
				n := spec.GPUs * len(spec.MIGLayout)
				labels["nvidia.com/mig.strategy"] = "single"
				labels[LabelProduct] = spec.GPUType + "-MIG-" + spec.MIGLayout[0]
				labels[LabelCount] = strconv.Itoa(n)
				labels[LabelMemory] = strconv.FormatInt(spec.GPUMemoryMi*int64(p.Slices)/int64(m.MemorySlices), 10)
				capacity[GPUResource] = *resource.NewQuantity(int64(n), resource.DecimalSI)
			}
			for _, p := range spec.MIGLayout {
				if spec.MIGStrategy == "single" {
					break // no nvidia.com/mig-<profile>: the instances are nvidia.com/gpu
				}
				r := corev1.ResourceName(v1alpha1.MIGResourcePrefix + p)
				q := capacity[r]
				q.Add(*resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI))
				capacity[r] = q
			}
			if spec.MIGDynamic {
				labels[v1alpha1.LabelMIGDynamic] = "true"
			}
		}
		if k := spec.Kind; k != nil {
			delete(capacity, GPUResource)
			capacity[k.Resources[0]] = *resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI)
			node.Annotations, node.Labels = nil, kindLabels(*k, spec, name)
		}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			if created, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		created.Status.Capacity, created.Status.Allocatable = capacity, capacity
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "SimulatedKubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("node %s status: %w", name, err)
		}
		// The API server taints a new node not-ready; on a real cluster the node lifecycle
		// controller lifts the taint once the kubelet reports Ready, as this does.
		kept := slices.DeleteFunc(slices.Clone(updated.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if len(kept) != len(updated.Spec.Taints) {
			updated.Spec.Taints = kept
			if _, err := client.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("node %s: lifting the not-ready taint: %w", name, err)
			}
		}
	}
	if spec.DRA {
		if err := EnsureDeviceClass(ctx, client); err != nil {
			return fmt.Errorf("device class %s: %w", DRAClass, err)
		}
		return PublishSlices(ctx, client, spec)
	}
	return nil
}

// kindLabels are the labels of a simulated node of another vendor's kind: its devices'
// model and memory as the kind's labels say them, with the simulated node's own.
func kindLabels(k convert.Accelerator, spec Spec, name string) map[string]string {
	labels := map[string]string{LabelSimulated: "true", corev1.LabelHostname: name}
	if len(k.ModelLabels) > 0 && spec.GPUType != "" {
		labels[k.ModelLabels[0]] = spec.GPUType
	}
	if k.MemoryLabel != "" && spec.GPUMemoryMi > 0 {
		mi := spec.GPUMemoryMi
		switch k.MemoryUnit {
		case convert.MemoryGiB:
			labels[k.MemoryLabel] = strconv.FormatInt(mi>>10, 10) + "G" // as AMD's node labeller writes it
		case convert.MemoryBytes:
			labels[k.MemoryLabel] = strconv.FormatInt(mi<<20, 10)
		case convert.MemoryNodeBytes:
			labels[k.MemoryLabel] = strconv.FormatInt(int64(spec.GPUs)*mi<<20, 10)
		default:
			labels[k.MemoryLabel] = strconv.FormatInt(mi, 10)
		}
	}
	for key, v := range spec.Labels {
		labels[key] = v
	}
	return labels
}

// simulatedUUID gives a device a stable UUID in NVIDIA's format, derived from its node and
// index, so that a restarted cluster names its GPUs as before.
func simulatedUUID(node string, index int) string {
	h := sha1.Sum([]byte(node + "/" + strconv.Itoa(index)))
	x := hex.EncodeToString(h[:16])
	return "GPU-" + x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// Kubelet runs pods bound to simulated nodes: they become Running at once, succeed after
// their allot.dev/sim-duration, and are removed when deleted.
type Kubelet struct {
	client kubernetes.Interface
	now    func() time.Time

	devices *Devices // nil: no device plugin, agent or PodResources (GPUs known by index only)

	mu       sync.Mutex
	waiting  map[types.UID]bool               // bound pods whose ConfigMaps are not there yet
	leases   map[string]*coordinationv1.Lease // the last written, by node; the run loop's only
	removed  map[types.UID]bool               // pods deleted, until the informer sees them go
	stopping map[types.UID]bool               // pods a worker is stopping now
	// preparedFor is the claim each DRA device was last prepared for, by pool/device.
	preparedFor map[string]claimRef
	// admitted holds what each pod admitted asks of other vendors' devices (AdmitExtended),
	// until it stops; released, the pods stopped since, until the informer sees them go.
	admitted map[types.UID]admittedPod
	released map[types.UID]bool
	// pods and nodes are the informers' stores, once Run started them.
	pods, nodes cache.Store
	// endpoint is the loopback port of the nodes' kubelet endpoint (streaming.go), once
	// served; workspaces are the simulated processes of web workspaces (workspace.go).
	endpoint   int
	workspaces workspaces
}

// admittedPod is what a running pod holds of other vendors' devices on its node.
type admittedPod struct {
	node string
	asks corev1.ResourceList
}

// NewKubelet returns a kubelet for all simulated nodes. Give it a client with a high QPS:
// it writes one status per pod.
func NewKubelet(client kubernetes.Interface) *Kubelet {
	return &Kubelet{client: client, now: time.Now, waiting: map[types.UID]bool{}, removed: map[types.UID]bool{}, stopping: map[types.UID]bool{}, leases: map[string]*coordinationv1.Lease{},
		preparedFor: map[string]claimRef{}, admitted: map[types.UID]admittedPod{}, released: map[types.UID]bool{}}
}

// WithDevices has the kubelet hand devices out through d, as a kubelet with the NVIDIA
// device plugin does, and leave the load reports to the nodes' agents.
func (k *Kubelet) WithDevices(d *Devices) *Kubelet {
	k.devices = d
	return k
}

// maxWorkers bounds the pods the kubelet works on at once, for all its nodes.
const maxWorkers = 512

// Run works until ctx ends.
func (k *Kubelet) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(k.client, 0)
	pods := factory.Core().V1().Pods().Informer()
	nodes := factory.Core().V1().Nodes().Informer()
	queue := make(chan *corev1.Pod, 1024)
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			select {
			case queue <- p:
			default:
				go func() { queue <- p }()
			}
		}
	}
	forget := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && k.devices != nil {
			k.devices.Release(p.Spec.NodeName, p.UID) // removed without this kubelet stopping it
		}
		if p, ok := obj.(*corev1.Pod); ok {
			k.workspaces.stop(p.UID)
			k.mu.Lock()
			delete(k.waiting, p.UID)
			delete(k.removed, p.UID)
			delete(k.admitted, p.UID)
			delete(k.released, p.UID)
			k.mu.Unlock()
		}
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: forget})
	k.mu.Lock()
	k.pods, k.nodes = pods.GetStore(), nodes.GetStore()
	k.mu.Unlock()
	factory.Start(ctx.Done())
	if err := k.serve(ctx); err != nil {
		slog.Warn("simulated kubelet: no kubelet endpoint (port-forward and logs will not answer)", "err", err)
	}
	// Nodes work in parallel, as real kubelets do: each node's kubelet has its own client
	// and a worker per pod, so a reclaim that stops a pod on each of 500 nodes is 500
	// stops at once there. One worker per node (8 at least, maxWorkers at most) does that
	// here; with 8 for all nodes, the victims of a 500-node reclaim queued behind each
	// other for a minute (allot bench --scenario reclaim-all), each stop two API writes.
	cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced)
	for w := 0; w < min(max(8, len(nodes.GetStore().ListKeys())), maxWorkers); w++ {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-queue:
					k.sync(ctx, p)
				}
			}
		}()
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	k.renewLeases(ctx)
	beats := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if beats++; beats%10 == 0 {
				k.renewLeases(ctx)
			}
			if beats%10 == 5 || k.devices != nil {
				k.reportUtilization(ctx, nodes.GetStore().List(), pods.GetStore().List())
			}
			// Pods waiting for their ConfigMaps are retried; running ones may be done.
			for _, obj := range pods.GetStore().List() {
				p := obj.(*corev1.Pod)
				if p.Spec.NodeName != "" && (p.Status.Phase == corev1.PodRunning || k.isWaiting(p)) {
					k.sync(ctx, p)
				}
			}
		}
	}
}

// renewLeases keeps each simulated node's Lease in kube-node-lease fresh, as a kubelet's
// heartbeat does, so that node lifecycle controllers see the nodes alive.
func (k *Kubelet) renewLeases(ctx context.Context) {
	nodes, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelSimulated + "=true"})
	if err != nil {
		return
	}
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	duration := int32(40)
	for _, n := range nodes.Items {
		k.advertise(ctx, &n)
		now := metav1.NewMicroTime(k.now())
		// As a kubelet does, renew from the copy the last write returned; read only when
		// there is none or it went stale.
		if l := k.leases[n.Name]; l != nil {
			l = l.DeepCopy()
			l.Spec.RenewTime = &now
			if updated, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
				k.leases[n.Name] = updated
				continue
			}
		}
		l, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.Name, LeaseDurationSeconds: &duration, RenewTime: &now}}
			l, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else if err == nil {
			l.Spec.RenewTime = &now
			l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err == nil {
			k.leases[n.Name] = l
		}
		if err != nil && ctx.Err() == nil {
			slog.Warn("simulated kubelet: node lease", "node", n.Name, "err", err)
		}
	}
}

// reportUtilization writes each simulated node's per-GPU utilisation, as the agent does
// on a real node, when it has changed since the last report.
func (k *Kubelet) reportUtilization(ctx context.Context, nodes, pods []any) {
	byNode := map[string][]*corev1.Pod{}
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	for _, o := range nodes {
		n := o.(*corev1.Node)
		if n.Labels[LabelSimulated] != "true" {
			continue
		}
		gpus := n.Status.Capacity[corev1.ResourceName(v1alpha1.GPUResource)]
		if k.devices.plays(n.Name) {
			// The node's agent reads the load from its (simulated) GPUs and reports it.
			k.devices.failRequested(n)
			busy, mem := k.devices.load(n.Name, int(gpus.Value()), convert.GPUMemoryMiB(n), byNode[n.Name])
			k.devices.setLoad(n.Name, busy, mem)
			continue
		}
		util := utilization(int(gpus.Value()), byNode[n.Name])
		if n.Annotations[v1alpha1.AnnotationGPUUtilization] == util {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationGPUUtilization: util}}})
		if _, err := k.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
			slog.Warn("simulated kubelet: GPU utilisation", "node", n.Name, "err", err)
		}
	}
}

// utilization is the node annotation's value for a node of gpus devices running pods: a
// device is as busy as the sum of its holders' shares times how busy each keeps it.
func utilization(gpus int, pods []*corev1.Pod) string {
	busy := make([]float64, gpus)
	for _, p := range pods {
		percent, ok := podBusy(p)
		if !ok {
			continue
		}
		indices, share := v1alpha1.HeldGPUs(p)
		for _, g := range indices {
			if g < gpus {
				busy[g] += share * percent
			}
		}
	}
	out := make([]string, gpus)
	for i, b := range busy {
		out[i] = strconv.Itoa(int(min(100, b) + 0.5))
	}
	return strings.Join(out, ",")
}

// podBusy is how busy a pod keeps its part of its GPUs, in percent; false for a shared
// GPU's placeholder, which runs nothing.
func podBusy(p *corev1.Pod) (float64, bool) {
	if v1alpha1.IsReservation(p) {
		return 0, false
	}
	percent := 95.0
	if p.Labels[v1alpha1.LabelClass] == v1alpha1.ClassInteractive {
		percent = 0
	}
	if v, err := strconv.ParseFloat(p.Annotations[AnnotationUtilization], 64); err == nil && v >= 0 && v <= 100 {
		percent = v
	}
	return percent, true
}

func (k *Kubelet) setWaiting(p *corev1.Pod, waiting bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if waiting {
		k.waiting[p.UID] = true
	} else {
		delete(k.waiting, p.UID)
	}
}

func (k *Kubelet) isWaiting(p *corev1.Pod) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.waiting[p.UID]
}

// configReady tells whether every ConfigMap the pod's containers read environment from
// exists (optional ones aside).
func (k *Kubelet) configReady(ctx context.Context, p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, from := range c.EnvFrom {
			ref := from.ConfigMapRef
			if ref == nil || (ref.Optional != nil && *ref.Optional) {
				continue
			}
			if _, err := k.client.CoreV1().ConfigMaps(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err != nil {
				return false
			}
		}
	}
	return true
}

func (k *Kubelet) sync(ctx context.Context, p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		// Events queued before the pod went still arrive: remove it once.
		k.mu.Lock()
		done := k.removed[p.UID]
		k.mu.Unlock()
		if done {
			return
		}
		if d, err := time.ParseDuration(p.Annotations[AnnotationStopAfter]); err == nil && p.DeletionGracePeriodSeconds != nil {
			asked := p.DeletionTimestamp.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
			if k.now().Before(asked.Add(d)) && k.now().Before(p.DeletionTimestamp.Time) {
				return // still stopping; the next tick looks again
			}
		}
		// One stop at a time per pod: its own status write comes back as an update, and
		// another worker taking that would write and delete again.
		k.mu.Lock()
		if k.removed[p.UID] || k.stopping[p.UID] {
			k.mu.Unlock()
			return
		}
		k.stopping[p.UID] = true
		k.mu.Unlock()
		defer func() { k.mu.Lock(); delete(k.stopping, p.UID); k.mu.Unlock() }()
		if k.devices != nil {
			// The containers are killed: their devices are free before the pod reports its
			// end, as on a kubelet, so that a pod bound the moment this one is seen ending
			// or gone can have them.
			k.devices.Release(p.Spec.NodeName, p.UID)
		}
		k.releaseExtended(p.UID)
		k.workspaces.stop(p.UID)
		// As a kubelet does: the containers are killed, the pod reports its end, then it is
		// removed. Controllers (a Job's pod failure policy) read that last status.
		if p.Status.Phase == corev1.PodRunning {
			p = p.DeepCopy()
			p.Status.Phase = corev1.PodFailed
			now := metav1.NewTime(k.now())
			for i := range p.Status.ContainerStatuses {
				c := &p.Status.ContainerStatuses[i]
				c.Ready, c.State = false, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Killed", FinishedAt: now}}
			}
			podutil.SetCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodTerminated", LastTransitionTime: now})
			if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				slog.Warn("simulated kubelet: stop", "pod", p.Name, "err", err)
			}
		}
		zero := int64(0)
		err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			slog.Warn("simulated kubelet: delete", "pod", p.Name, "err", err)
		}
		k.mu.Lock()
		k.removed[p.UID] = true
		k.mu.Unlock()
		return
	}
	switch p.Status.Phase {
	case corev1.PodPending, "":
		if !k.configReady(ctx, p) {
			k.setWaiting(p, true) // as a kubelet does: the container waits for its ConfigMaps
			return
		}
		if len(p.Spec.ResourceClaims) > 0 {
			ready, refused := k.claimsReady(ctx, p)
			if refused != "" {
				slog.Warn("simulated kubelet: DRA claims refused", "pod", p.Namespace+"/"+p.Name, "err", refused)
				p = p.DeepCopy()
				p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "UnexpectedAdmissionError", refused
				if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					slog.Warn("simulated kubelet: admission", "pod", p.Name, "err", err)
				}
				return
			}
			if !ready {
				k.setWaiting(p, true) // as a kubelet does: NodePrepareResources waits for the claims
				return
			}
		}
		k.setWaiting(p, false)
		if reason, err := k.AdmitExtended(p); err != nil {
			slog.Warn("simulated kubelet: admission refused", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName, "err", err)
			p = p.DeepCopy()
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, reason, "Pod was rejected: "+err.Error()
			if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				slog.Warn("simulated kubelet: admission", "pod", p.Name, "err", err)
			}
			return
		}
		if k.devices != nil {
			// Admission: the device plugin hands out the devices, or the pod fails as a
			// kubelet fails a pod whose devices are not there.
			if _, err := k.devices.Allocate(p); err != nil {
				slog.Warn("simulated kubelet: admission refused", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName, "err", err)
				p = p.DeepCopy()
				p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "UnexpectedAdmissionError", err.Error()
				if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					slog.Warn("simulated kubelet: admission", "pod", p.Name, "err", err)
				}
				return
			}
		}
		p = p.DeepCopy()
		now := metav1.NewTime(k.now())
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		// As a kubelet gives its node's address (where a NodePort Service of the pod is
		// reached): the simulated nodes' is loopback, which advertise gives them.
		k.mu.Lock()
		if k.endpoint != 0 {
			p.Status.HostIP, p.Status.HostIPs = "127.0.0.1", []corev1.HostIP{{IP: "127.0.0.1"}}
		}
		k.mu.Unlock()
		for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
			podutil.SetCondition(p, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
		if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("simulated kubelet: start", "pod", p.Name, "err", err)
		}
	case corev1.PodRunning:
		d, err := time.ParseDuration(p.Annotations[AnnotationDuration])
		if err != nil || p.Status.StartTime == nil || k.now().Sub(p.Status.StartTime.Time) < d {
			return
		}
		if k.devices != nil {
			k.devices.Release(p.Spec.NodeName, p.UID)
		}
		k.releaseExtended(p.UID)
		p = p.DeepCopy()
		p.Status.Phase = corev1.PodSucceeded
		podutil.SetCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: metav1.NewTime(k.now())})
		if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("simulated kubelet: complete", "pod", p.Name, "err", err)
		}
	}
}

// AdmitExtended admits a starting pod as a kubelet's resource check does for extended
// resources other than NVIDIA's GPUs (another vendor's devices, whose device plugin is not
// simulated): while its node has enough left of each, its allocatable less what the pods
// running there ask. A refusal gives the kubelet's reason (OutOf<resource>) and message.
func (k *Kubelet) AdmitExtended(p *corev1.Pod) (reason string, err error) {
	want := extendedAsked(p)
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(want) == 0 || k.nodes == nil {
		return "", nil
	}
	if _, done := k.admitted[p.UID]; done {
		return "", nil
	}
	o, ok, _ := k.nodes.GetByKey(p.Spec.NodeName)
	if !ok {
		return "", nil
	}
	n := o.(*corev1.Node)
	used := corev1.ResourceList{}
	add := func(l corev1.ResourceList) {
		for r, q := range l {
			u := used[r]
			u.Add(q)
			used[r] = u
		}
	}
	for _, a := range k.admitted {
		if a.node == n.Name {
			add(a.asks)
		}
	}
	// Pods that ran there before this kubelet started hold theirs too.
	for _, o := range k.pods.List() {
		q := o.(*corev1.Pod)
		_, counted := k.admitted[q.UID]
		if q.Spec.NodeName == n.Name && q.UID != p.UID && q.Status.Phase == corev1.PodRunning && !counted && !k.released[q.UID] && !k.removed[q.UID] {
			add(extendedAsked(q))
		}
	}
	names := make([]string, 0, len(want))
	for r := range want {
		names = append(names, string(r))
	}
	slices.Sort(names)
	for _, name := range names {
		r := corev1.ResourceName(name)
		asked, alloc := want[r], n.Status.Allocatable[r]
		u := used[r]
		total := u.DeepCopy()
		total.Add(asked)
		if total.Cmp(alloc) > 0 {
			return "OutOf" + name, fmt.Errorf("Node didn't have enough resource: %s, requested: %s, used: %s, capacity: %s", r, asked.String(), u.String(), alloc.String())
		}
	}
	k.admitted[p.UID] = admittedPod{node: n.Name, asks: want}
	return "", nil
}

// releaseExtended frees what a stopping pod held of other vendors' devices.
func (k *Kubelet) releaseExtended(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.admitted[uid]; ok {
		delete(k.admitted, uid)
		k.released[uid] = true
	}
}

// extendedAsked is what a pod holds at once of extended resources other than NVIDIA's
// GPUs (v1alpha1.PodAmount: containers, sidecars and init containers, limits else
// requests), as the kubelet admits it.
func extendedAsked(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				for r := range l {
					domain, _, qualified := strings.Cut(string(r), "/")
					if _, seen := out[r]; seen || !qualified || r == GPUResource || strings.HasSuffix(domain, "kubernetes.io") {
						continue
					}
					out[r] = *resource.NewQuantity(v1alpha1.PodAmount(p, func(c *corev1.Container) int64 {
						return v1alpha1.ContainerAsks(c, r)
					}), resource.DecimalSI)
				}
			}
		}
	}
	return out
}
