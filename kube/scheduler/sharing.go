package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
)

// gpuEnv is what a pod sharing GPUs reads: its devices, and the memory cap and compute
// share of each in the forms NVIDIA MPS and HAMi-core enforce. A slice of several devices
// names them all and holds each to the same cap: MPS by device ordinal as the container
// sees them (0, 1, …), HAMi-core by CUDA_DEVICE_MEMORY_LIMIT (every device) and
// CUDA_DEVICE_MEMORY_LIMIT_<i> (the i-th), as HAMi's own device plugin writes them.
//
// The compute share holds by mode (v1alpha1.ComputeModes): capped, at all times (MPS's
// thread percentage, HAMi-core's SM limit with its policy forced: its own default limits
// only while other processes use the GPU); fair, under contention only (HAMi-core's
// default policy; MPS, with no such cap, gets no thread limit); shared, never.
func gpuEnv(uuids []string, memoryBytes int64, computePercent int32, share engine.MilliGPU, compute string) map[string]string {
	// HAMi-core reads a limit of 0 as none: a slice of less than 1 MiB (which admission
	// refuses) is held to 1 MiB, never to nothing.
	mi := max(memoryBytes>>20, 1)
	pinned := make([]string, len(uuids))
	for i := range uuids {
		pinned[i] = fmt.Sprintf("%d=%dM", i, mi)
	}
	mpsPercent, smPercent, policy := computePercent, computePercent, "force"
	switch compute {
	case v1alpha1.ComputeFair:
		mpsPercent, policy = 100, "default"
	case v1alpha1.ComputeShared:
		mpsPercent, smPercent, policy = 100, 100, "disable"
	}
	env := map[string]string{
		"NVIDIA_VISIBLE_DEVICES":            strings.Join(uuids, ","),
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  strings.Join(pinned, ","),
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": strconv.Itoa(int(mpsPercent)),
		// HAMi-core reads sizes with a unit suffix and the SM share as a percentage.
		"CUDA_DEVICE_MEMORY_LIMIT":    fmt.Sprintf("%dm", mi),
		"CUDA_DEVICE_SM_LIMIT":        strconv.Itoa(int(smPercent)),
		"GPU_CORE_UTILIZATION_POLICY": policy,
		"ALLOT_GPU_SHARE":             strconv.FormatFloat(float64(share)/float64(engine.OneGPU), 'f', -1, 64),
		"ALLOT_GPU_COMPUTE":           compute,
	}
	if len(uuids) > 1 {
		for i := range uuids {
			env[v1alpha1.DeviceMemoryLimitEnv(i)] = fmt.Sprintf("%dm", mi)
		}
	}
	return env
}

// percent is thousandths of a GPU's compute as the whole percent MPS and HAMi-core take,
// rounded down so that the limits of a GPU's sharers never add up to more than its compute
// (eight of 0.125 each get 12%, not 13%), and at least 1.
func percent(c engine.MilliGPU) int32 {
	return int32(max(1, int64(c)*100/int64(engine.OneGPU)))
}

// enforcementEnv is what a sharing pod on a node of the given enforcement is told, beside
// its limits: where the node's MPS control daemon for its GPU listens, or HAMi-core's
// library to preload, under the host directory the webhook mounted (root); which
// directory under it is its /dev/shm (the MPS daemons' on an MPS node, which an MPS server
// and its clients need in common, else its own); and the mode.
func enforcementEnv(env map[string]string, mode, root, uuid string, pod types.UID, perPodMPS bool) {
	env["ALLOT_GPU_SHARING"] = mode
	if mode == "" {
		env["ALLOT_GPU_SHARING"] = "undeclared"
	}
	// Named even with no root of the scheduler's own: were the webhook to mount one, an
	// empty name would make the whole shm directory, every pod's, this pod's /dev/shm.
	env["ALLOT_SHM_DIR"] = v1alpha1.ShmPodDir(string(pod))
	// Never empty either (the kubelet would refuse the container): elsewhere than on an
	// mps node, the pod's own directory.
	env["ALLOT_MPS_DIR"] = "shm/" + v1alpha1.ShmPodDir(string(pod))
	if root == "" {
		return
	}
	switch mode {
	case v1alpha1.SharingMPS:
		env["ALLOT_SHM_DIR"] = v1alpha1.ShmMPS
		env["ALLOT_MPS_DIR"] = v1alpha1.MPSSubDir(uuid)
		// Its GPU's daemon as the container sees it (mounted at MPSClientDir); a pod
		// admitted before that mount sees the whole root, the daemon at its host path.
		dir := v1alpha1.MPSDir(root, uuid)
		if perPodMPS {
			dir = v1alpha1.MPSClientDir(root)
		}
		env["CUDA_MPS_PIPE_DIRECTORY"] = dir + "/pipe"
		env["CUDA_MPS_LOG_DIRECTORY"] = dir + "/log"
	}
	// HAMi-core is preloaded through the loader's list the webhook mounts read-only (its
	// /etc/ld.so.preload), not LD_PRELOAD, which a process can empty for its children.
	if mode == v1alpha1.SharingHAMiCore {
		env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = v1alpha1.HAMiCacheFile
	}
}

// mountsMPSClientDir tells whether a sharing pod's containers see their GPU's MPS directory
// at v1alpha1.MPSClientDir (the webhook's mount since per-pod MPS directories), rather
// than the whole sharing root.
func mountsMPSClientDir(p *corev1.Pod, root string) bool {
	want := v1alpha1.MPSClientDir(path.Clean(root))
	for _, c := range p.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) == want {
				return true
			}
		}
	}
	return false
}

// shareEnv works out a shared pod's environment from where the engine put it and what it
// booked (the engine's Binding: bytes and thousandths of each device): every device of b,
// each held to the booked slice.
func shareEnv(p *corev1.Pod, node *engine.Node, b engine.Binding, root string) map[string]string {
	uuids := make([]string, 0, len(b.GPUs))
	for _, g := range b.GPUs {
		if g < 0 || g >= len(node.GPUs) {
			return nil
		}
		uuids = append(uuids, node.GPUs[g].UUID)
	}
	if len(uuids) == 0 {
		return nil
	}
	// A slice that books no compute (memory alone) is still capped, in proportion to its
	// share: a limit, not a guarantee.
	capped := b.Compute
	if capped == 0 {
		capped = min(b.Share, engine.OneGPU)
	}
	// A dynamic fraction is held to its limit; it is booked by its request.
	compute := v1alpha1.EffectiveCompute(node.Compute, p.Annotations[v1alpha1.AnnotationComputeMode])
	env := gpuEnv(uuids, max(b.Memory, b.MemoryLimit), percent(capped), b.Share, compute)
	enforcementEnv(env, node.Sharing, root, uuids[0], p.UID, mountsMPSClientDir(p, root))
	return env
}

// deliveryAnnotations are what the bind writes on a sharing pod for its containers to be
// given device uuid with environment env on node n: the environment's values, read by the
// containers' env entries (the webhook's, through the downward API), and on a node whose
// delivery is CDI the NRI plugin's device annotation for each container, with no device
// in the environment.
func deliveryAnnotations(p *corev1.Pod, n *corev1.Node, env map[string]string, cdiKind string) (map[string]string, error) {
	delivery, err := v1alpha1.ParseDelivery(n.Labels[v1alpha1.LabelGPUDelivery])
	if err == nil && delivery == "" {
		err = errors.New(convert.NoFractions(n))
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	out := make(map[string]string, len(env)+len(p.Spec.Containers))
	for _, name := range v1alpha1.GPUEnvNames {
		out[v1alpha1.AnnotationGPUEnvPrefix+name] = env[name]
	}
	for name, v := range env {
		if v1alpha1.IsGPUEnvName(name) {
			out[v1alpha1.AnnotationGPUEnvPrefix+name] = v
		}
	}
	if delivery == v1alpha1.DeliveryCDI {
		out[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"] = ""
		// The container given the slice alone (v1alpha1.SliceContainer).
		names := []string{v1alpha1.SliceContainer(p)}
		// Named as the device plugin's spec names them there (its DEVICE_ID_STRATEGY).
		ids, err := v1alpha1.ParseCDIDeviceIDs(n.Labels[v1alpha1.LabelCDIDeviceIDs])
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		devs, err := v1alpha1.CDIDeviceIDs(env["NVIDIA_VISIBLE_DEVICES"], ids, n.Annotations[v1alpha1.AnnotationGPUUUIDs])
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		for k, v := range v1alpha1.CDIAnnotations(names, cdiKind, devs) {
			out[k] = v
		}
	}
	return out, nil
}

// writeConfigMap fills the ConfigMap an earlier version's admission webhook pointed the
// pod's containers at (pods admitted before an upgrade), owned by the pod so that it goes
// when the pod goes. Pods admitted since read annotations instead, and have none to fill:
// on a pod created since, the annotation was written by its owner (the webhooks skipped),
// naming a ConfigMap the scheduler would otherwise create or overwrite. Only the scheduler
// may write it (ConfigMapsPolicy).
func (s *Scheduler) writeConfigMap(ctx context.Context, p *corev1.Pod, data map[string]string) error {
	name := p.Annotations[v1alpha1.AnnotationConfigMap]
	if name == "" || !v1alpha1.CreatedBeforeOneContainerSlice(p) {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
		Labels:          map[string]string{managedByLabel: SchedulerName},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}}},
		Data: data}
	_, err := s.client.CoreV1().ConfigMaps(p.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A bind that failed after writing it, or a pod placed again after eviction.
		_, err = s.client.CoreV1().ConfigMaps(p.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("gpu configmap %s/%s: %w", p.Namespace, name, err)
	}
	return nil
}

// reservationName names the pod that holds GPU g of a node while fractions share it.
// Names are deterministic so that two binds (or two replicas) wanting the same GPU make one
// pod, never two that would take two devices; slot k > 0 names another reservation wanted
// for g while the first of that name holds some other device (the device plugin chose it).
func reservationName(node engine.NodeID, g, slot int) string {
	if slot == 0 {
		return fmt.Sprintf("allot-reservation-%s-gpu%d", node, g)
	}
	return fmt.Sprintf("allot-reservation-%s-gpu%d-%d", node, g, slot)
}

// ensureReservation creates the pod that holds a shared GPU as one whole nvidia.com/gpu,
// so that the kubelet's device accounting and any other scheduler see it as taken.
func (s *Scheduler) ensureReservation(ctx context.Context, node engine.NodeID, g int) error {
	_, err := s.createReservation(ctx, node, g, reservationName(node, g, 0))
	return err
}

func (s *Scheduler) createReservation(ctx context.Context, node engine.NodeID, g int, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.SystemNamespace,
		Labels:      map[string]string{v1alpha1.LabelReservation: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUs: strconv.Itoa(g)}},
		Spec: corev1.PodSpec{NodeName: string(node), SchedulerName: SchedulerName,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "reservation", Image: "registry.k8s.io/pause:3.10", Resources: reservationResources()}}}}
	if s.reservationClass {
		p.Spec.PriorityClassName = ReservationPriorityClass
	}
	created, err := s.client.CoreV1().Pods(v1alpha1.SystemNamespace).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, nil // another bind made it: it is looked up again from the informer
	}
	if err != nil {
		return nil, fmt.Errorf("reservation %s: %w", p.Name, err)
	}
	return created, nil
}

// DefaultDeviceReportTimeout is how long a shared pod waits for the node's agent to report
// which device its GPU's reservation was given before it is left unbound, with an Event.
const DefaultDeviceReportTimeout = 30 * time.Second

// errAwaitingDevice: the bind waits until the reservation's device is reported.
var errAwaitingDevice = errors.New("waiting for the node's agent to report the reservation's device")

// awaitingBind is a shared pod held back until the reservation of each of its GPUs
// reports its device.
type awaitingBind struct {
	job bindJob
	// reservations hold its GPUs, reservations[i] the i-th of job.b.GPUs.
	reservations []string
	since        time.Time
	// resumed: its devices are reported and its bind is in flight; the entry (and so the
	// reservations it keeps) goes when the bind is done. resumedAt is when.
	resumed   bool
	resumedAt time.Time
}

// agentUUIDs is a node's device UUIDs by index when an agent reports the node's devices
// (then shared pods follow their reservation's reported device); ok is false otherwise.
func (s *Scheduler) agentUUIDs(node engine.NodeID) (uuids []string, ok bool) {
	o, exists, _ := s.nodes.GetStore().GetByKey(string(node))
	if !exists {
		return nil, false
	}
	n := o.(*corev1.Node)
	if _, managed := n.Annotations[v1alpha1.AnnotationAgent]; !managed || !s.agentAlive(node) {
		return nil, false
	}
	return strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ","), true
}

// nodeAnnotation reads one annotation of a node from the informer.
func (s *Scheduler) nodeAnnotation(node engine.NodeID, key string) (string, bool) {
	o, exists, _ := s.nodes.GetStore().GetByKey(string(node))
	if !exists {
		return "", false
	}
	v, ok := o.(*corev1.Node).Annotations[key]
	return v, ok
}

// sharingUnenforced tells whether a node lets pods share GPUs without holding them to
// their share (allot.dev/gpu-sharing=none).
func (s *Scheduler) sharingUnenforced(node engine.NodeID) bool {
	o, ok, _ := s.nodes.GetStore().GetByKey(string(node))
	return ok && o.(*corev1.Node).Labels[v1alpha1.LabelGPUSharing] == v1alpha1.SharingNone
}

// reservationState is what a reservation pod says of its device.
type reservationState int

const (
	reservationWaiting  reservationState = iota // not seen yet, or its device not reported
	reservationReported                         // its device is known
	reservationFailed                           // the kubelet refused it, or it is gone
)

// reservedDevice reads a reservation's reported device, as an index of the node's devices.
func reservedDevice(p *corev1.Pod, uuids []string) (int, reservationState, string) {
	if p == nil {
		return -1, reservationWaiting, ""
	}
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		why := p.Status.Message
		if why == "" {
			why = "it stopped"
		}
		return -1, reservationFailed, why
	}
	rec := strings.TrimSpace(p.Annotations[v1alpha1.AnnotationGPUDevices])
	if rec == "" {
		return -1, reservationWaiting, ""
	}
	if i := slices.Index(uuids, rec); i >= 0 {
		return i, reservationReported, ""
	}
	return -1, reservationFailed, fmt.Sprintf("its reported device %s is not among the node's (annotation %s)", rec, v1alpha1.AnnotationGPUUUIDs)
}

// effectiveIndex is the device a live reservation holds as the books know it: the
// reported one, else the one it was made for.
func effectiveIndex(p *corev1.Pod, uuids []string) int {
	if g, st, _ := reservedDevice(p, uuids); st == reservationReported {
		return g
	}
	g, err := strconv.Atoi(p.Annotations[v1alpha1.AnnotationGPUs])
	if err != nil {
		return -1
	}
	return g
}

// reservationFor finds the live reservation holding GPU g of node (by its reported device,
// or, unreported, by the device it was made for), making one when there is none. A new
// one takes the first free name for g: the one of slot 0 may be held by a reservation the
// device plugin gave another device.
func (s *Scheduler) reservationFor(ctx context.Context, node engine.NodeID, g int, uuids []string, planned time.Time) (string, *corev1.Pod, error) {
	// A pod placed beside one still held back for a reservation goes to that reservation:
	// the engine put them together on what it takes to be GPU g (the held pod is counted
	// there until its device is known), also where the held one was resumed after that plan
	// (its bind ran late, beside the next cycle). Not beside one resumed before the plan:
	// the books had it on its real device, and g may be a device that is really free.
	s.amu.Lock()
	for _, a := range s.awaiting {
		if (a.resumed && !a.resumedAt.After(planned)) || a.job.b.Node != node {
			continue
		}
		if i := slices.Index(a.job.b.GPUs, g); i >= 0 && i < len(a.reservations) {
			s.amu.Unlock()
			return a.reservations[i], nil, nil
		}
	}
	s.amu.Unlock()
	taken := map[string]bool{}
	inSystem, _ := s.pods.GetIndexer().ByIndex(cache.NamespaceIndex, v1alpha1.SystemNamespace)
	for _, o := range inSystem {
		p := o.(*corev1.Pod)
		if p.Labels[v1alpha1.LabelReservation] != "true" || p.Spec.NodeName != string(node) {
			continue
		}
		taken[p.Name] = true
		if _, st, _ := reservedDevice(p, uuids); st != reservationFailed && effectiveIndex(p, uuids) == g {
			return p.Name, p, nil
		}
	}
	name := reservationName(node, g, 0)
	for slot := 1; taken[name]; slot++ {
		name = reservationName(node, g, slot)
	}
	created, err := s.createReservation(ctx, node, g, name)
	return name, created, err
}

// reservationPod reads a reservation from the informer.
func (s *Scheduler) reservationPod(name string) *corev1.Pod {
	o, ok, _ := s.pods.GetStore().GetByKey(v1alpha1.SystemNamespace + "/" + name)
	if !ok {
		return nil
	}
	return o.(*corev1.Pod)
}

// placeOnReservation makes a shared pod's bind follow its reservations' reported devices
// on a node with an agent: one reservation holds each of its GPUs. It returns
// errAwaitingDevice (the pod is held, still assumed) until every one is reported; once
// they are, the pod goes to those devices, which may not be the ones the engine preferred:
// the environment is then worked out for the real ones. Two of its GPUs' reservations
// holding one device bind nothing: an error, and the pod is placed again.
func (s *Scheduler) placeOnReservation(ctx context.Context, j *bindJob, uuids []string) error {
	names, created := j.reservations, make([]*corev1.Pod, len(j.b.GPUs))
	if len(names) != len(j.b.GPUs) {
		names = make([]string, len(j.b.GPUs))
		for i, g := range j.b.GPUs {
			var err error
			if names[i], created[i], err = s.reservationFor(ctx, j.b.Node, g, uuids, j.planned); err != nil {
				return err
			}
		}
	}
	pods := make([]*corev1.Pod, len(names))
	for i, name := range names {
		if pods[i] = s.reservationPod(name); pods[i] == nil {
			pods[i] = created[i]
		}
	}
	d := sliceDevices(j.b.GPUs, names, pods, uuids)
	if d.state == reservationWaiting && len(j.reservations) > 0 {
		// Resumed once all had reported: one is gone since. Held again, nothing would
		// resume it (resumeAwaiting passes over resumed pods).
		return fmt.Errorf("reservation %s for GPU %d: gone since it reported its device", names[d.bad[0]], j.b.GPUs[d.bad[0]])
	}
	switch d.state {
	case reservationWaiting:
		s.amu.Lock()
		if _, held := s.awaiting[j.p.UID]; !held {
			s.awaiting[j.p.UID] = awaitingBind{job: *j, reservations: names, since: s.opts.Now()}
		}
		s.amu.Unlock()
		return errAwaitingDevice
	case reservationFailed:
		if d.collision != "" {
			return errors.New(d.collision)
		}
		return fmt.Errorf("reservation %s for GPU %d: %s", names[d.bad[0]], j.b.GPUs[d.bad[0]], d.why)
	}
	if slices.Equal(d.real, j.b.GPUs) {
		return nil
	}
	s.opts.Metrics.adoptedDevices("shared", 1)
	j.b.GPUs = d.real
	if o, ok, _ := s.nodes.GetStore().GetByKey(string(j.b.Node)); ok {
		n := convert.Node(o.(*corev1.Node))
		if slices.Max(d.real) < len(n.GPUs) {
			j.env = shareEnv(j.p, &n, j.b, s.opts.SharingRoot)
		}
	}
	s.amu.Lock()
	if _, assumed := s.assumed[j.p.UID]; assumed {
		s.assumed[j.p.UID] = j.b
	}
	s.amu.Unlock()
	return nil
}

// reservedSlice is what the reservations of a shared pod's GPUs say of their devices.
type reservedSlice struct {
	state reservationState // reported: all of them; failed: any one, or a collision
	real  []int            // the reported devices, real[i] held for the i-th GPU; when reported
	// bad are the positions of the reservations not reported (waiting) or of the first
	// that failed, why its reason; collision says which two hold one device instead.
	bad       []int
	why       string
	collision string
}

// sliceDevices reads the devices of the reservations names (pods, as the informer has
// them, nil where not seen yet), names[i] made to hold GPU gpus[i]. A slice's devices are
// distinct: two GPUs held by one reservation, or two reservations reporting one device,
// fail, rather than the pod being bound to one device twice.
func sliceDevices(gpus []int, names []string, pods []*corev1.Pod, uuids []string) reservedSlice {
	out := reservedSlice{state: reservationReported, real: make([]int, len(names))}
	for i, p := range pods {
		real, st, why := reservedDevice(p, uuids)
		out.real[i] = real
		switch {
		case st == reservationFailed && out.state != reservationFailed:
			out.state, out.bad, out.why = reservationFailed, []int{i}, why
		case st == reservationWaiting && out.state != reservationFailed:
			out.state, out.bad = reservationWaiting, append(out.bad, i)
		}
	}
	for i := range names {
		for k := range i {
			switch {
			case names[i] == names[k]:
				out.collision = fmt.Sprintf("one reservation, %s, was found for both GPU %d and GPU %d", names[i], gpus[k], gpus[i])
			case out.state == reservationReported && out.real[i] == out.real[k]:
				out.collision = fmt.Sprintf("the reservations %s (made for GPU %d) and %s (made for GPU %d) both report device %d (%s)",
					names[k], gpus[k], names[i], gpus[i], out.real[i], uuids[out.real[i]])
			default:
				continue
			}
			out.state, out.bad = reservationFailed, nil
			return out
		}
	}
	if out.state != reservationReported {
		out.real = nil
	}
	return out
}

// resumeAwaiting binds the held shared pods whose reservations have all reported their
// devices, and gives up on those whose reports did not come in time, or one of whose
// reservations failed, or two of whose reservations report one device: the pod is left
// unbound (never put on a device that may not be the one it shares), with an Event and a
// reason, and tried again after a back-off.
func (s *Scheduler) resumeAwaiting(ctx context.Context) {
	s.amu.Lock()
	held := maps.Clone(s.awaiting)
	s.amu.Unlock()
	now := s.opts.Now()
	for uid, a := range held {
		if a.resumed {
			continue
		}
		if s.heldPodGone(a.job.p, uid) {
			s.amu.Lock()
			delete(s.awaiting, uid) // deleted meanwhile: nothing to bind
			s.amu.Unlock()
			continue
		}
		uuids, _ := s.agentUUIDs(a.job.b.Node)
		pods := make([]*corev1.Pod, len(a.reservations))
		for i, name := range a.reservations {
			pods[i] = s.reservationPod(name)
		}
		d := sliceDevices(a.job.b.GPUs, a.reservations, pods, uuids)
		if d.state == reservationWaiting && now.Sub(a.since) < s.deviceReportTimeout() {
			continue
		}
		s.amu.Lock()
		if d.state == reservationReported {
			a.resumed, a.resumedAt = true, now
			s.awaiting[uid] = a
			if b, ok := s.assumed[uid]; ok {
				b.GPUs = d.real // the books, from now on, where it really goes
				s.assumed[uid] = b
			}
		} else {
			delete(s.awaiting, uid)
		}
		s.amu.Unlock()
		if d.state == reservationReported {
			a.job.reservations = a.reservations
			if !s.queueBind(ctx, a.job) {
				return
			}
			continue
		}
		reason, msg := "DeviceNotReported", awaitedMessage(a, d, s.deviceReportTimeout())
		if d.collision != "" {
			reason = "DevicesCollide"
		} else if d.state == reservationWaiting {
			s.opts.Metrics.reportTimedOut()
		}
		s.amu.Lock()
		delete(s.assumed, uid)
		s.backoff[uid] = time.Now().Add(deviceBackoff)
		s.amu.Unlock()
		s.recorder.Event(a.job.p, corev1.EventTypeWarning, reason, msg)
		if err := s.setUnschedulable(ctx, a.job.p, msg); err == nil {
			s.reasons[uid] = msg
		}
	}
}

// awaitedMessage says why a held shared pod is not bound: which of its GPUs' reservations
// failed or reported no device within timeout, or which two report one device.
func awaitedMessage(a awaitingBind, d reservedSlice, timeout time.Duration) string {
	gpus := a.job.b.GPUs
	var msg string
	switch {
	case d.collision != "":
		msg = fmt.Sprintf("placed on %s GPUs %s, but %s", a.job.b.Node, formatIndices(gpus), d.collision)
	case len(gpus) == 1:
		msg = fmt.Sprintf("placed on %s GPU %d, but the reservation %s holding that GPU ", a.job.b.Node, gpus[0], a.reservations[0])
	default:
		var names, held []string
		for _, i := range d.bad {
			names, held = append(names, a.reservations[i]), append(held, strconv.Itoa(gpus[i]))
		}
		which := fmt.Sprintf("the reservation %s holding GPU %s", names[0], held[0])
		if len(names) > 1 {
			which = fmt.Sprintf("the reservations %s holding GPUs %s", strings.Join(names, ", "), strings.Join(held, ", "))
		}
		msg = fmt.Sprintf("placed on %s GPUs %s, but %s ", a.job.b.Node, formatIndices(gpus), which)
	}
	switch {
	case d.collision != "":
	case d.state == reservationFailed:
		msg += "failed: " + d.why
	default:
		msg += fmt.Sprintf("had no device reported by the node's allot agent within %s (is the agent running there, and can it reach the kubelet's PodResources socket?)", timeout)
	}
	return msg + "; not bound rather than given a device that may not be the one it shares, tried again shortly"
}

// deviceBackoff is how long a shared pod whose reservation gave no device waits before the
// engine's placement of it is bound again.
const deviceBackoff = 10 * time.Second

func (s *Scheduler) deviceReportTimeout() time.Duration {
	if s.opts.DeviceReportTimeout > 0 {
		return s.opts.DeviceReportTimeout
	}
	return DefaultDeviceReportTimeout
}

// ensureSystemNamespace creates the namespace reservation pods live in.
// On a real cluster the Helm chart installs into it, and the scheduler may not create
// namespaces: look first.
func (s *Scheduler) ensureSystemNamespace(ctx context.Context) error {
	if _, err := s.client.CoreV1().Namespaces().Get(ctx, v1alpha1.SystemNamespace, metav1.GetOptions{}); err == nil {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

type gpuKey struct {
	node engine.NodeID
	gpu  int
}

// releaseReservations deletes the reservation of every GPU no fraction uses any more,
// counting the pods the snapshot and this plan place on shared GPUs.
func (s *Scheduler) releaseReservations(ctx context.Context, snap *engine.Snapshot, plan *engine.Plan, idx *index) {
	snapNodes := make(map[engine.NodeID]*engine.Node, len(snap.Nodes))
	for i := range snap.Nodes {
		snapNodes[snap.Nodes[i].ID] = &snap.Nodes[i]
	}
	shared := map[gpuKey]bool{}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if p.Binding != nil && p.Request.Shared() {
				for _, g := range p.Binding.GPUs {
					shared[gpuKey{p.Binding.Node, g}] = true
				}
			}
		}
	}
	evicted := map[engine.PodID]bool{}
	for _, e := range plan.Evictions {
		evicted[e.Pod] = true
	}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if evicted[p.ID] && p.Binding != nil && p.Request.Shared() {
				for _, g := range p.Binding.GPUs {
					delete(shared, gpuKey{p.Binding.Node, g})
				}
			}
		}
	}
	for _, b := range plan.Binds {
		if b.Binding.Share > 0 {
			for _, g := range b.Binding.GPUs {
				shared[gpuKey{b.Binding.Node, g}] = true
			}
		}
	}
	// A fraction still terminating runs on its GPU until its containers stop: the
	// reservation stays until it is gone, or the kubelet could give the device away under it.
	for n, gpus := range idx.releasing {
		for g := range gpus {
			if g >= 0 {
				shared[gpuKey{n, g}] = true
			}
		}
	}
	// Reservations that held-back shared pods wait on are kept, whatever their device.
	awaited := map[string]bool{}
	s.amu.Lock()
	for _, a := range s.awaiting {
		for _, name := range a.reservations {
			awaited[name] = true
		}
	}
	s.amu.Unlock()
	// The namespace index keeps this off the cost of every other pod in the cluster.
	inSystem, _ := s.pods.GetIndexer().ByIndex(cache.NamespaceIndex, v1alpha1.SystemNamespace)
	for _, o := range inSystem {
		p := o.(*corev1.Pod)
		if p.Labels[v1alpha1.LabelReservation] != "true" || p.DeletionTimestamp != nil || awaited[p.Name] {
			continue
		}
		var uuids []string
		if n := snapNodes[engine.NodeID(p.Spec.NodeName)]; n != nil {
			for _, gpu := range n.GPUs {
				uuids = append(uuids, gpu.UUID)
			}
		}
		// A reservation the kubelet refused is replaced, not kept.
		_, st, _ := reservedDevice(p, uuids)
		if g := effectiveIndex(p, uuids); st != reservationFailed && shared[gpuKey{engine.NodeID(p.Spec.NodeName), g}] {
			continue
		}
		slog.Info("allot scheduler: releasing a reservation no fraction uses", "pod", p.Name, "node", p.Spec.NodeName, "gpu", effectiveIndex(p, uuids), "state", st)
		err := s.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: release reservation", "pod", p.Name, "err", err)
		}
	}
}

// The node annotation allot.dev/gpu-occupancy, as kube/convert defines and reads it.
type (
	Occupancy    = convert.Occupancy
	GPUOccupancy = convert.GPUOccupancy
	GPUHolderOf  = convert.GPUHolderOf
)

// ParseOccupancy reads a node's allot.dev/gpu-occupancy annotation.
var ParseOccupancy = convert.ParseOccupancy

// occupancy computes every node's annotation value from the snapshot and the plan's binds.
func occupancy(snap *engine.Snapshot, plan *engine.Plan) map[engine.NodeID]string {
	holders := map[gpuKey][]GPUHolderOf{}
	add := func(pod engine.PodID, b *engine.Binding) {
		share := int(engine.OneGPU)
		if b.Share > 0 {
			share = int(b.Share)
		}
		for _, g := range b.GPUs {
			k := gpuKey{b.Node, g}
			holders[k] = append(holders[k], GPUHolderOf{Pod: string(pod), Share: share})
		}
	}
	evicted := map[engine.PodID]bool{}
	for _, e := range plan.Evictions {
		evicted[e.Pod] = true
	}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if p.Binding != nil && !evicted[p.ID] {
				add(p.ID, p.Binding)
			}
		}
	}
	for _, b := range plan.Binds {
		add(b.Pod, &b.Binding)
	}
	out := make(map[engine.NodeID]string, len(snap.Nodes))
	for _, n := range snap.Nodes {
		var occ Occupancy
		for g, gpu := range n.GPUs {
			h := holders[gpuKey{n.ID, g}]
			if len(h) == 0 || (len(h) == 1 && h[0].Share == int(engine.OneGPU)) {
				continue // free, or one pod's whole GPU
			}
			sort.Slice(h, func(a, b int) bool { return h[a].Pod < h[b].Pod })
			used := 0
			for _, x := range h {
				used += x.Share
			}
			occ.GPUs = append(occ.GPUs, GPUOccupancy{Index: g, UUID: gpu.UUID, Used: min(used, int(engine.OneGPU)), Holders: h})
		}
		if len(occ.GPUs) == 0 {
			out[n.ID] = "" // nothing shared: no annotation
			continue
		}
		b, _ := json.Marshal(occ)
		out[n.ID] = string(b)
	}
	return out
}

// writeOccupancy patches the annotation of nodes whose occupancy changed.
func (s *Scheduler) writeOccupancy(ctx context.Context, occ map[engine.NodeID]string) {
	for node, val := range occ {
		o, ok, _ := s.nodes.GetStore().GetByKey(string(node))
		if !ok {
			continue
		}
		n := o.(*corev1.Node)
		if n.Annotations[v1alpha1.AnnotationOccupancy] == val {
			continue
		}
		if last, ok := s.occWritten[node]; ok && last == val {
			continue
		}
		var v any = val
		if val == "" {
			v = nil // a merge patch removes the annotation
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationOccupancy: v}}})
		if _, err := s.client.CoreV1().Nodes().Patch(ctx, string(node), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			if !apierrors.IsNotFound(err) {
				slog.Warn("allot scheduler: node occupancy", "node", node, "err", err)
			}
			continue
		}
		s.occWritten[node] = val
	}
}
