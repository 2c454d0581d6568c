package admission

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// Pods written for HAMi or KAI-Scheduler (Run:ai) ask for a slice of a GPU, a queue and
// their devices by those projects' names. The mutating webhook reads those names once, at
// admission, writes Allot's own in their place, and records what it read from which name
// in allot.dev/translated; from then on the scheduler reads Allot's names only, which the
// API server keeps from the pod's owner (allot-pod-fields). A peer name Allot cannot
// honour is refused with the reason, and two names for one thing that disagree are
// refused naming both: nothing is dropped silently.

// HAMi's names (Project-HAMi/HAMi): per-container resources beside nvidia.com/gpu, and pod
// annotations.
const (
	hamiGPUMem        = "nvidia.com/gpumem"            // MiB of each device
	hamiGPUMemPercent = "nvidia.com/gpumem-percentage" // percent of each device's memory
	hamiGPUCores      = "nvidia.com/gpucores"          // percent of each device's SMs
	hamiPriority      = "nvidia.com/priority"          // HAMi-core's task priority
	hamiUseUUID       = "nvidia.com/use-gpuuuid"
	hamiNoUseUUID     = "nvidia.com/nouse-gpuuuid"
	hamiUseType       = "nvidia.com/use-gputype"
	hamiNoUseType     = "nvidia.com/nouse-gputype"
	hamiNUMABind      = "nvidia.com/numa-bind"
	hamiVGPUMode      = "nvidia.com/vgpu-mode" // "hami-core", "mps" or "mig"
	hamiNodePolicy    = "hami.io/node-scheduler-policy"
	hamiGPUPolicy     = "hami.io/gpu-scheduler-policy"
	hamiScheduler     = "hami-scheduler"
)

// KAI-Scheduler's (and Run:ai's) names: pod annotations and queue labels.
const (
	kaiFraction   = "gpu-fraction"                // of one device, "0.5"
	kaiMemory     = "gpu-memory"                  // MiB of one device
	kaiNumDevices = "gpu-fraction-num-devices"    // devices the fraction or memory is taken of
	kaiContainer  = "gpu-fraction-container-name" // the container given the fraction
	// Run:ai's dynamic fractions: the limit a fraction or memory request may grow to.
	kaiFractionLimit = "gpu-fraction-limit" // of one device, "0.8"
	kaiMemoryLimit   = "gpu-memory-limit"   // MiB of one device
	kaiQueue         = "kai.scheduler/queue"
	runaiQueue       = "runai/queue"
	kaiScheduler     = "kai-scheduler"
)

// PeerSchedulers are the schedulerName values an admin may have the webhook take over.
var PeerSchedulers = []string{hamiScheduler, kaiScheduler}

// peerAnnotations and peerLabels are the peer names the webhook reads; a pod carrying
// any is sent to it (MutateCondition).
var (
	peerAnnotations = []string{hamiUseUUID, hamiNoUseUUID, hamiUseType, hamiNoUseType, hamiNUMABind, hamiVGPUMode,
		hamiNodePolicy, hamiGPUPolicy, kaiFraction, kaiMemory, kaiNumDevices, kaiContainer, kaiFractionLimit, kaiMemoryLimit}
	peerLabels = []string{kaiQueue, runaiQueue}
)

// otherVendors are the resource domains of the devices HAMi shares besides NVIDIA's
// (Cambricon MLUs, Huawei Ascend, Hygon DCUs, Iluvatar, MetaX, Moore Threads, Enflame,
// Kunlunxin, AWS Neuron) and of the other vendors' kinds Allot knows (AMD, Intel). A
// resource of a kind the scheduler's --accelerators turns on is scheduled; any other of
// these is refused, as Allot has no books for it and would place the pod as if it asked for
// no accelerator (slices of those devices, such as huawei.com/Ascend910-memory, included).
var otherVendors = []string{"cambricon.com/", "huawei.com/", "hygon.com/", "iluvatar.ai/", "metax-tech.com/",
	"mthreads.com/", "enflame.com/", "kunlunxin.com/", "aws.amazon.com/neuron", "amd.com/", "gpu.intel.com/"}

// Peers says how the webhook treats pods written for other schedulers.
type Peers struct {
	// AdoptSchedulers are the schedulerName values (of PeerSchedulers) the webhook rewrites
	// to allot: an admin's choice (allot scheduler --adopt-scheduler-names), as it moves
	// every such pod to Allot.
	AdoptSchedulers []string
	// DefaultGPUMemory, when set, is the memory of each device a pod that came through
	// HAMi's names gets when it asks for nvidia.com/gpu: N with no memory (HAMi's default
	// device memory): a slice of that much of each of N devices. Pods of Allot's own asking
	// for nvidia.com/gpu get whole GPUs whatever it says.
	DefaultGPUMemory int64
	// Accelerators are the kinds of other vendors' devices the scheduler schedules: their
	// resources are let through, other vendors' others refused. Nil: NVIDIA's GPUs only.
	Accelerators *convert.Accelerators
	// ForeignGPUPods is what becomes of a pod of any other scheduler asking for GPUs in a
	// tenant's namespace (foreign.go): adopt (the default when empty), refuse or off.
	ForeignGPUPods string
	// ForeignExempt are namespaces the rule leaves alone besides the system's and Allot's
	// (the GPU Operator's, say).
	ForeignExempt []string
}

// translation is one pod's rewriting: its notes, and which name wrote each of Allot's.
type translation struct {
	p      *corev1.Pod
	notes  []string
	wrote  map[string]string // Allot's name → "peer=value" it was written from
	hami   bool              // the pod came through HAMi's names
	slices bool              // a HAMi slice was read from a container
}

// Translate rewrites the peer names of p into Allot's, in place, and records them in
// allot.dev/translated. The error says what cannot be honoured, naming the peer's name.
func (o Peers) Translate(p *corev1.Pod) error {
	if _, ok := p.Annotations[v1alpha1.AnnotationTranslated]; ok {
		return fmt.Errorf("metadata.annotations: %s is written by Allot's webhook when it translates another scheduler's names, not by the pod's owner (remove it)", v1alpha1.AnnotationTranslated)
	}
	notes, err := o.translate(p)
	if err != nil || len(notes) == 0 {
		return err
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[v1alpha1.AnnotationTranslated] = strings.Join(notes, "; ")
	return nil
}

// untranslated says which peer names of p the webhook would still translate: none on a
// pod it admitted.
func untranslated(p *corev1.Pod, kinds *convert.Accelerators) (string, error) {
	notes, err := Peers{Accelerators: kinds}.translate(p.DeepCopy())
	return strings.Join(notes, "; "), err
}

func (o Peers) translate(p *corev1.Pod) ([]string, error) {
	t := &translation{p: p, wrote: map[string]string{}}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if name := p.Spec.SchedulerName; name != v1alpha1.SchedulerName && slices.Contains(o.AdoptSchedulers, name) {
		t.notes = append(t.notes, fmt.Sprintf("spec.schedulerName=%s → %s", name, v1alpha1.SchedulerName))
		p.Spec.SchedulerName = v1alpha1.SchedulerName
		t.hami = name == hamiScheduler
	}
	if err := t.resources(o); err != nil {
		return nil, err
	}
	if err := t.hamiAnnotations(); err != nil {
		return nil, err
	}
	if err := t.kai(); err != nil {
		return nil, err
	}
	if err := t.defaultMemory(o); err != nil {
		return nil, err
	}
	return t.notes, nil
}

// set writes Allot's annotation (or label) key as read from peer=raw, refusing a value
// already there that differs.
func (t *translation) set(label bool, key, val, peer, raw string) error {
	m := t.p.Annotations
	if label {
		m = t.p.Labels
	}
	from := peer + "=" + raw
	if cur, ok := m[key]; ok {
		if same(key, cur, val) {
			return nil // already Allot's, and the same: nothing to translate
		}
		by := key + "=" + cur
		if w, ok := t.wrote[key]; ok {
			by = w
		}
		return fmt.Errorf("%s and %s ask for %s differently: keep one of them", by, from, key)
	}
	m[key] = val
	t.wrote[key] = from
	t.notes = append(t.notes, fmt.Sprintf("%s → %s=%s", from, key, val))
	return nil
}

// same tells two values of one of Allot's names apart as it reads them.
func same(key, a, b string) bool {
	if a == b {
		return true
	}
	switch key {
	case v1alpha1.AnnotationGPUMemory:
		qa, ea := resource.ParseQuantity(strings.TrimSpace(a))
		qb, eb := resource.ParseQuantity(strings.TrimSpace(b))
		return ea == nil && eb == nil && qa.Cmp(qb) == 0
	case v1alpha1.AnnotationGPUFraction, v1alpha1.AnnotationGPUCompute, v1alpha1.AnnotationGPUCount:
		fa, ea := strconv.ParseFloat(strings.TrimSpace(a), 64)
		fb, eb := strconv.ParseFloat(strings.TrimSpace(b), 64)
		return ea == nil && eb == nil && fa == fb
	}
	return strings.TrimSpace(a) == strings.TrimSpace(b)
}

// quantityOf reads a resource of a container: its limit, else its request.
func quantityOf(c *corev1.Container, name corev1.ResourceName) (resource.Quantity, bool) {
	if q, ok := c.Resources.Limits[name]; ok {
		return q, true
	}
	q, ok := c.Resources.Requests[name]
	return q, ok
}

func drop(c *corev1.Container, names ...corev1.ResourceName) {
	for _, n := range names {
		delete(c.Resources.Limits, n)
		delete(c.Resources.Requests, n)
	}
}

// resources reads HAMi's per-container slice (nvidia.com/gpumem, gpumem-percentage,
// gpucores beside nvidia.com/gpu: N) into Allot's pod annotations, and takes those
// resources off the container: no device plugin on Allot's nodes serves them, and the
// kubelet's would hand the container N whole GPUs for its nvidia.com/gpu. It refuses
// other vendors' devices and HAMi's own names it cannot honour.
func (t *translation) resources(o Peers) error {
	type found struct {
		kind string
		c    *corev1.Container
	}
	var all []found
	for i := range t.p.Spec.InitContainers {
		all = append(all, found{"initContainers", &t.p.Spec.InitContainers[i]})
	}
	for i := range t.p.Spec.Containers {
		all = append(all, found{"containers", &t.p.Spec.Containers[i]})
	}
	var slice *found
	wholeIn := ""
	for i, f := range all {
		for _, list := range []corev1.ResourceList{f.c.Resources.Limits, f.c.Resources.Requests} {
			for name := range list {
				if err := o.vendorResource(name); err != nil {
					return fmt.Errorf("%s[%s].resources: %w", f.kind, f.c.Name, err)
				}
				if name == hamiPriority {
					return fmt.Errorf("%s[%s].resources: %s (HAMi-core's task priority) is not honoured: Allot orders pods by their PriorityClass and queue (remove it; set priorityClassName)",
						f.kind, f.c.Name, name)
				}
			}
		}
		_, mem := quantityOf(f.c, hamiGPUMem)
		_, pct := quantityOf(f.c, hamiGPUMemPercent)
		_, cores := quantityOf(f.c, hamiGPUCores)
		if mem || pct || cores {
			if f.kind == "initContainers" {
				return fmt.Errorf("initContainers[%s].resources: HAMi's slice of a GPU in an init container is not honoured: Allot gives the pod's containers one slice (move it to a container)", f.c.Name)
			}
			if slice != nil {
				return fmt.Errorf("containers[%s] and containers[%s] each ask for a slice of a GPU through HAMi's resources: Allot books one slice per pod, which all its containers see (ask for it in one container)",
					slice.c.Name, f.c.Name)
			}
			slice = &all[i]
		} else if _, whole := quantityOf(f.c, corev1.ResourceName(v1alpha1.GPUResource)); whole && f.kind == "containers" && wholeIn == "" {
			wholeIn = f.c.Name
		}
	}
	if slice == nil {
		return nil
	}
	t.hami, t.slices = true, true
	c := slice.c
	where := fmt.Sprintf("containers[%s].resources", c.Name)
	if wholeIn != "" {
		return fmt.Errorf("%s asks for a slice through HAMi's resources and containers[%s] for whole nvidia.com/gpu: a pod takes a slice of GPUs or whole GPUs, not both", where, wholeIn)
	}
	// The container that asked is the one given the slice; the pod's others get no GPU.
	if err := t.set(false, v1alpha1.AnnotationGPUContainer, c.Name, where, "HAMi's slice"); err != nil {
		return err
	}
	count := int64(1)
	rawCount := ""
	if q, ok := quantityOf(c, corev1.ResourceName(v1alpha1.GPUResource)); ok {
		count, rawCount = q.Value(), q.String()
	}
	if count < 1 || count > v1alpha1.MaxGPUCount {
		return fmt.Errorf("%s: %s=%s with HAMi's slice is not allowed: how many GPUs the slice is taken of, 1 to %d", where, v1alpha1.GPUResource, rawCount, v1alpha1.MaxGPUCount)
	}
	whole := func(name corev1.ResourceName, lo, hi int64) (int64, string, bool, error) {
		q, ok := quantityOf(c, name)
		if !ok {
			return 0, "", false, nil
		}
		v, exact := q.AsInt64()
		if !exact || v < lo || v > hi {
			return 0, "", false, fmt.Errorf("%s: %s=%s is not allowed: a whole number from %d to %d", where, name, q.String(), lo, hi)
		}
		return v, strconv.FormatInt(v, 10), true, nil
	}
	mem, rawMem, hasMem, err := whole(hamiGPUMem, 1, 1<<30)
	if err != nil {
		return err
	}
	pct, rawPct, hasPct, err := whole(hamiGPUMemPercent, 1, 100)
	if err != nil {
		return err
	}
	cores, rawCores, hasCores, err := whole(hamiGPUCores, 0, 100)
	if err != nil {
		return err
	}
	if hasMem && hasPct {
		return fmt.Errorf("%s: %s and %s are both set: ask for memory in MiB or in percent, not both", where, hamiGPUMem, hamiGPUMemPercent)
	}
	drop(c, hamiGPUMem, hamiGPUMemPercent, hamiGPUCores, corev1.ResourceName(v1alpha1.GPUResource))
	gpuFrom := fmt.Sprintf("%s=%d", v1alpha1.GPUResource, count)
	switch {
	case hasMem:
		if err := t.set(false, v1alpha1.AnnotationGPUMemory, fmt.Sprintf("%dMi", mem), string(hamiGPUMem), rawMem); err != nil {
			return err
		}
	case hasPct && pct == 100 && (!hasCores || cores == 0 || cores == 100):
		// All of each device's memory, and its compute unlimited or whole: whole GPUs.
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{} // given as requests only
		}
		c.Resources.Limits[corev1.ResourceName(v1alpha1.GPUResource)] = *resource.NewQuantity(count, resource.DecimalSI)
		t.notes = append(t.notes, fmt.Sprintf("%s=100 → %s (whole GPUs)", hamiGPUMemPercent, gpuFrom))
		return nil
	case hasPct && pct == 100:
		return fmt.Errorf("%s: %s=100 with %s=%d is not offered: a slice of all of a GPU's memory and part of its compute (ask for %s: %d alone, whole GPUs)",
			where, hamiGPUMemPercent, hamiGPUCores, cores, v1alpha1.GPUResource, count)
	case hasPct:
		if err := t.set(false, v1alpha1.AnnotationGPUFraction, strconv.FormatFloat(float64(pct)/100, 'f', -1, 64), string(hamiGPUMemPercent), rawPct); err != nil {
			return err
		}
	case o.DefaultGPUMemory > 0:
		// HAMi gives a pod that names no memory its default device memory.
		if err := t.set(false, v1alpha1.AnnotationGPUMemory, resource.NewQuantity(o.DefaultGPUMemory, resource.BinarySI).String(),
			"--default-gpu-memory", resource.NewQuantity(o.DefaultGPUMemory, resource.BinarySI).String()); err != nil {
			return err
		}
	}
	// gpucores=0 is HAMi's "no compute limit"; Allot then holds the slice's compute in
	// proportion to its memory, as for any slice that names no compute.
	if hasCores && cores > 0 {
		if err := t.set(false, v1alpha1.AnnotationGPUCompute, strconv.FormatInt(cores, 10), string(hamiGPUCores), rawCores); err != nil {
			return err
		}
	} else if !hasMem && !hasPct && o.DefaultGPUMemory == 0 {
		return fmt.Errorf("%s: %s=%s names no memory and no compute: ask for %s (MiB) or %s, or %s alone for whole GPUs",
			where, hamiGPUCores, rawCores, hamiGPUMem, hamiGPUCores, v1alpha1.GPUResource)
	}
	return t.set(false, v1alpha1.AnnotationGPUCount, strconv.FormatInt(count, 10), v1alpha1.GPUResource, strconv.FormatInt(count, 10))
}

// hamiAnnotations reads HAMi's device choice, NUMA binding, policies and vGPU mode.
func (t *translation) hamiAnnotations() error {
	a := t.p.Annotations
	for _, m := range []struct{ peer, allot string }{
		{hamiUseUUID, v1alpha1.AnnotationGPUUUIDPick}, {hamiNoUseUUID, v1alpha1.AnnotationGPUUUIDExclude},
		{hamiUseType, v1alpha1.AnnotationGPUTypes}, {hamiNoUseType, v1alpha1.AnnotationGPUTypeExclude},
	} {
		if v, ok := a[m.peer]; ok {
			t.hami = true
			if err := t.set(false, m.allot, v, m.peer, v); err != nil {
				return err
			}
		}
	}
	for _, m := range []struct{ peer, allot string }{{hamiNodePolicy, v1alpha1.AnnotationNodePolicy}, {hamiGPUPolicy, v1alpha1.AnnotationGPUPolicy}} {
		v, ok := a[m.peer]
		if !ok {
			continue
		}
		t.hami = true
		if !slices.Contains(v1alpha1.Policies, strings.TrimSpace(v)) {
			return fmt.Errorf("metadata.annotations: %s=%s is not honoured: Allot chooses by %s only (%s)", m.peer, v, strings.Join(v1alpha1.Policies, " or "), m.allot)
		}
		if err := t.set(false, m.allot, strings.TrimSpace(v), m.peer, v); err != nil {
			return err
		}
	}
	if v, ok := a[hamiNUMABind]; ok {
		t.hami = true
		bind, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("metadata.annotations: %s=%q is not allowed: true or false", hamiNUMABind, v)
		}
		if bind {
			if err := t.set(false, v1alpha1.AnnotationGPUIsland, "required", hamiNUMABind, v); err != nil {
				return err
			}
		}
	}
	if v, ok := a[hamiVGPUMode]; ok {
		t.hami = true
		switch mode := strings.TrimSpace(v); mode {
		case v1alpha1.SharingHAMiCore, v1alpha1.SharingMPS:
			// The enforcement is the node pool's: the pod goes where it is this one.
			cur, set := t.p.Spec.NodeSelector[v1alpha1.LabelGPUSharing]
			if set && cur != mode {
				return fmt.Errorf("%s=%s and nodeSelector %s=%s ask for different enforcement: keep one of them", hamiVGPUMode, v, v1alpha1.LabelGPUSharing, cur)
			}
			if !set {
				if t.p.Spec.NodeSelector == nil {
					t.p.Spec.NodeSelector = map[string]string{}
				}
				t.p.Spec.NodeSelector[v1alpha1.LabelGPUSharing] = mode
				t.notes = append(t.notes, fmt.Sprintf("%s=%s → nodeSelector %s=%s", hamiVGPUMode, v, v1alpha1.LabelGPUSharing, mode))
			}
		default:
			return fmt.Errorf("metadata.annotations: %s=%s is not honoured: Allot gives no MIG devices of HAMi's (MIG through DRA is: see docs/dra.md); allowed here: %s or %s",
				hamiVGPUMode, v, v1alpha1.SharingHAMiCore, v1alpha1.SharingMPS)
		}
	}
	return nil
}

// kai reads KAI-Scheduler's (Run:ai's) fraction, memory and device count, and its queue
// labels.
func (t *translation) kai() error {
	a := t.p.Annotations
	if v, ok := a[kaiFraction]; ok {
		if err := t.set(false, v1alpha1.AnnotationGPUFraction, strings.TrimSpace(v), kaiFraction, v); err != nil {
			return err
		}
	}
	if v, ok := a[kaiMemory]; ok {
		mi, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || mi < 1 || mi > 1<<30 {
			return fmt.Errorf("metadata.annotations: %s=%q is not allowed: KAI-Scheduler's GPU memory is a whole number of MiB, such as 8000", kaiMemory, v)
		}
		if err := t.set(false, v1alpha1.AnnotationGPUMemory, fmt.Sprintf("%dMi", mi), kaiMemory, v); err != nil {
			return err
		}
	}
	if v, ok := a[kaiFractionLimit]; ok {
		if err := t.set(false, v1alpha1.AnnotationGPUFractionLimit, strings.TrimSpace(v), kaiFractionLimit, v); err != nil {
			return err
		}
	}
	if v, ok := a[kaiMemoryLimit]; ok {
		mi, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || mi < 1 || mi > 1<<30 {
			return fmt.Errorf("metadata.annotations: %s=%q is not allowed: Run:ai's GPU memory limit is a whole number of MiB, such as 40000", kaiMemoryLimit, v)
		}
		if err := t.set(false, v1alpha1.AnnotationGPUMemoryLimit, fmt.Sprintf("%dMi", mi), kaiMemoryLimit, v); err != nil {
			return err
		}
	}
	if v, ok := a[kaiNumDevices]; ok {
		if err := t.set(false, v1alpha1.AnnotationGPUCount, strings.TrimSpace(v), kaiNumDevices, v); err != nil {
			return err
		}
	}
	if v, ok := a[kaiContainer]; ok {
		if err := t.set(false, v1alpha1.AnnotationGPUContainer, strings.TrimSpace(v), kaiContainer, v); err != nil {
			return err
		}
	}
	for _, l := range peerLabels {
		if v, ok := t.p.Labels[l]; ok {
			if err := t.set(true, v1alpha1.LabelQueue, v, l, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// defaultMemory gives a pod that came through HAMi's names and asks for nvidia.com/gpu: N
// alone HAMi's default device memory on each of N devices, where the admin set one. Only
// such pods: to a pod written for Allot (or for kube-scheduler) nvidia.com/gpu: N means N
// whole GPUs, and a scheduler-wide default must not turn them into slices.
func (t *translation) defaultMemory(o Peers) error {
	if o.DefaultGPUMemory <= 0 || !t.hami || t.slices {
		return nil
	}
	if share, _ := v1alpha1.ParseGPUShare(t.p.Annotations); share.Shared() {
		return nil
	}
	var with []*corev1.Container
	for i := range t.p.Spec.Containers {
		if _, ok := quantityOf(&t.p.Spec.Containers[i], corev1.ResourceName(v1alpha1.GPUResource)); ok {
			with = append(with, &t.p.Spec.Containers[i])
		}
	}
	if len(with) != 1 {
		return nil // none, or several containers' whole GPUs: left as they are
	}
	q, _ := quantityOf(with[0], corev1.ResourceName(v1alpha1.GPUResource))
	n := q.Value()
	if n < 1 || n > v1alpha1.MaxGPUCount {
		return nil
	}
	drop(with[0], corev1.ResourceName(v1alpha1.GPUResource))
	def := resource.NewQuantity(o.DefaultGPUMemory, resource.BinarySI).String()
	if err := t.set(false, v1alpha1.AnnotationGPUMemory, def, "--default-gpu-memory", def); err != nil {
		return err
	}
	return t.set(false, v1alpha1.AnnotationGPUCount, strconv.FormatInt(n, 10), v1alpha1.GPUResource, strconv.FormatInt(n, 10))
}

// vendorResource refuses another vendor's resource that is not a kind the scheduler
// schedules, naming the kinds it does.
func (o Peers) vendorResource(name corev1.ResourceName) error {
	if o.Accelerators.Scheduled(name) {
		return nil
	}
	for _, v := range otherVendors {
		if strings.HasPrefix(string(name), v) {
			return fmt.Errorf("%s is not honoured: Allot schedules NVIDIA GPUs and whole devices of the kinds the scheduler's --accelerators turns on (%s); it has no books for this one (turn its kind on, schedule this pod with HAMi, or remove the resource)",
				name, o.Accelerators.OnList())
		}
	}
	return nil
}
