package convert

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Accelerators of other vendors (docs/accelerators.md). NVIDIA's GPUs are what the rest of
// this package reads; a kind of this table is another vendor's devices, asked for by an
// extended resource of its device plugin and counted as its own resource by the engine
// (engine.AcceleratorResource), in whole devices. Slices of a device, MIG, an agent's
// inventory and device records stay NVIDIA's.

// Accelerator is one kind of accelerator: how pods ask for it and how a node says what it
// has.
type Accelerator struct {
	// Name is the kind as people write it: in a Queue's spec.accelerators, in allot submit
	// --accelerator and in reasons.
	Name string
	// Resources are the extended resources that ask for one device of the kind, as its
	// device plugins name them. The first is what allot submit writes and what a Queue's
	// status is keyed by.
	Resources []corev1.ResourceName
	// ModelLabels are the node labels that name the devices' model, the first present
	// winning (what allot.dev/gpu-type matches, and allot top nodes shows).
	ModelLabels []string
	// MemoryLabel is the node label that gives each device's memory, in MemoryUnit; empty
	// when the kind's tools write none (the memory is then unknown).
	MemoryLabel string
	MemoryUnit  MemoryUnit
}

// MemoryUnit is how a memory label is written.
type MemoryUnit string

const (
	// MemoryMiB: a number of MiB per device (as nvidia.com/gpu.memory).
	MemoryMiB MemoryUnit = "MiB"
	// MemoryGiB: a number of GiB per device, with or without a trailing G (AMD's node
	// labeller writes "192G", rounded to whole GiB).
	MemoryGiB MemoryUnit = "GiB"
	// MemoryBytes: a number of bytes per device.
	MemoryBytes MemoryUnit = "bytes"
	// MemoryNodeBytes: the bytes of all the node's devices together (Intel's
	// gpu.intel.com/memory.max), shared out evenly.
	MemoryNodeBytes MemoryUnit = "node-bytes"
)

var memoryUnits = []MemoryUnit{MemoryMiB, MemoryGiB, MemoryBytes, MemoryNodeBytes}

// DefaultAccelerators are the kinds the scheduler knows without being told, as their
// vendors' device plugins and node labellers name them (docs/accelerators.md says where
// each name was checked). The first engine.MaxAccelerators are on unless --accelerators
// says otherwise; the rest are known, so that a pod asking for them is refused by name
// rather than placed as if it asked for nothing.
func DefaultAccelerators() []Accelerator {
	return []Accelerator{
		{Name: "amd", Resources: []corev1.ResourceName{"amd.com/gpu"},
			ModelLabels: []string{"amd.com/gpu.product-name", "beta.amd.com/gpu.product-name"},
			MemoryLabel: "amd.com/gpu.vram", MemoryUnit: MemoryGiB},
		{Name: "intel", Resources: []corev1.ResourceName{"gpu.intel.com/i915", "gpu.intel.com/xe"},
			ModelLabels: []string{"gpu.intel.com/product"},
			MemoryLabel: "gpu.intel.com/memory.max", MemoryUnit: MemoryNodeBytes},
		// The Ascend device plugin names the resource by chip (huawei.com/Ascend910 for the
		// whole 910 family); HAMi's names the 910B apart.
		{Name: "ascend", Resources: []corev1.ResourceName{"huawei.com/Ascend910", "huawei.com/Ascend910B", "huawei.com/Ascend310P", "huawei.com/Ascend310"},
			ModelLabels: []string{"node.kubernetes.io/npu.chip.name", "accelerator"}},
		{Name: "cambricon", Resources: []corev1.ResourceName{"cambricon.com/mlu"}},
		{Name: "hygon", Resources: []corev1.ResourceName{"hygon.com/dcunum"}},
		// Whole Neuron devices (neurondevice is the newer name of neuron). Neuron cores are
		// another kind: a device holds several, how many depends on the chip.
		{Name: "neuron", Resources: []corev1.ResourceName{"aws.amazon.com/neuron", "aws.amazon.com/neurondevice"},
			ModelLabels: []string{"node.kubernetes.io/instance-type"}},
		{Name: "neuroncore", Resources: []corev1.ResourceName{"aws.amazon.com/neuroncore"},
			ModelLabels: []string{"node.kubernetes.io/instance-type"}},
	}
}

// DefaultAcceleratorNames are the kinds on by default.
func DefaultAcceleratorNames() []string {
	var out []string
	for _, k := range DefaultAccelerators()[:engine.MaxAccelerators] {
		out = append(out, k.Name)
	}
	return out
}

// DefaultTable is the table of the kinds on by default, as allot scheduler has it
// without --accelerators.
func DefaultTable() *Accelerators {
	a, err := ParseAccelerators(DefaultAcceleratorNames())
	if err != nil {
		return nil // not so: TestAcceleratorsTable reads the defaults
	}
	return a
}

// Accelerators is the scheduler's table of kinds: those it schedules, in the engine's
// order, and the other kinds it knows, whose resources a pod may not ask for. A nil table
// has no kind on: NVIDIA's GPUs only.
type Accelerators struct {
	on    []Accelerator
	known []Accelerator // on first, then the defaults that are not on
	// byResource is each resource's kind, an index of known.
	byResource map[corev1.ResourceName]int
}

// AcceleratorsFlagForms is how --accelerators is written, for its help and its errors.
const AcceleratorsFlagForms = `a kind's name (` + "amd, intel, ascend, cambricon, hygon, neuron, neuroncore" + `), several comma-separated, "none", ` +
	`or a kind defined as name=resource[,resource...][;model-label=LABEL][;memory-label=LABEL][;memory-unit=MiB|GiB|bytes|node-bytes]`

var kindName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseAccelerators reads the values of --accelerators (repeatable): each is kinds' names
// (comma-separated, or "none") or one kind's definition (name=resources;key=value…), which
// replaces a default kind of that name. The kinds named or defined are on, in that order.
func ParseAccelerators(values []string) (*Accelerators, error) {
	defaults := DefaultAccelerators()
	var on []Accelerator
	seen := map[string]bool{}
	add := func(k Accelerator, v string) error {
		if seen[k.Name] {
			return fmt.Errorf("--accelerators %q: kind %s is named twice", v, k.Name)
		}
		seen[k.Name] = true
		on = append(on, k)
		return nil
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if strings.Contains(v, "=") {
			k, err := parseKind(v)
			if err != nil {
				return nil, fmt.Errorf("--accelerators %q: %w; allowed: %s", v, err, AcceleratorsFlagForms)
			}
			if err := add(k, v); err != nil {
				return nil, err
			}
			continue
		}
		if v == "none" || v == "" {
			continue
		}
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			i := slices.IndexFunc(defaults, func(k Accelerator) bool { return k.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("--accelerators %q: %q is not a kind the scheduler knows; allowed: %s", v, name, AcceleratorsFlagForms)
			}
			if err := add(defaults[i], v); err != nil {
				return nil, err
			}
		}
	}
	if len(on) > engine.MaxAccelerators {
		var names []string
		for _, k := range on {
			names = append(names, k.Name)
		}
		return nil, fmt.Errorf("--accelerators: %d kinds are on (%s), at most %d: leave out the kinds this cluster does not have",
			len(on), strings.Join(names, ", "), engine.MaxAccelerators)
	}
	a := &Accelerators{on: on, byResource: map[corev1.ResourceName]int{}}
	a.known = append(a.known, on...)
	for _, k := range defaults {
		if !seen[k.Name] {
			a.known = append(a.known, k)
		}
	}
	for i, k := range a.known {
		for _, r := range k.Resources {
			prev, taken := a.byResource[r]
			switch {
			case !taken:
				a.byResource[r] = i
			case i < len(on):
				return nil, fmt.Errorf("--accelerators: kinds %s and %s both ask for %s: a resource asks for one kind", a.known[prev].Name, k.Name, r)
			}
			// A kind that is off keeps only the resources no kind that is on has.
		}
	}
	return a, nil
}

// parseKind reads one kind's definition: name=resource[,resource...][;key=value...].
func parseKind(v string) (Accelerator, error) {
	parts := strings.Split(v, ";")
	name, res, _ := strings.Cut(parts[0], "=")
	k := Accelerator{Name: strings.TrimSpace(name), MemoryUnit: MemoryMiB}
	if !kindName.MatchString(k.Name) || len(k.Name) > 63 {
		return k, fmt.Errorf("kind name %q is not allowed: lower-case letters, digits and '-', at most 63", k.Name)
	}
	if k.Name == "nvidia" || k.Name == "gpu" {
		return k, fmt.Errorf("kind name %q is not allowed: NVIDIA's GPUs are nvidia.com/gpu, not a kind of this table", k.Name)
	}
	for _, r := range strings.Split(res, ",") {
		r = strings.TrimSpace(r)
		if err := checkResourceName(r); err != nil {
			return k, err
		}
		k.Resources = append(k.Resources, corev1.ResourceName(r))
	}
	for _, p := range parts[1:] {
		key, val, ok := strings.Cut(p, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || val == "" {
			return k, fmt.Errorf("%q is not key=value", p)
		}
		switch key {
		case "model-label", "memory-label":
			if errs := validation.IsQualifiedName(val); len(errs) > 0 {
				return k, fmt.Errorf("%s %q is not a label key: %s", key, val, strings.Join(errs, "; "))
			}
			if key == "model-label" {
				k.ModelLabels = append(k.ModelLabels, val)
			} else {
				k.MemoryLabel = val
			}
		case "memory-unit":
			if !slices.Contains(memoryUnits, MemoryUnit(val)) {
				return k, fmt.Errorf("memory-unit %q is not allowed: MiB, GiB, bytes or node-bytes", val)
			}
			k.MemoryUnit = MemoryUnit(val)
		default:
			return k, fmt.Errorf("%q is not a setting of a kind: model-label, memory-label or memory-unit", key)
		}
	}
	return k, nil
}

// checkResourceName refuses what no device plugin could advertise, and NVIDIA's own.
func checkResourceName(r string) error {
	if r == v1alpha1.GPUResource {
		return fmt.Errorf("resource %s is NVIDIA's GPUs, scheduled without this table", r)
	}
	if !strings.Contains(r, "/") || len(validation.IsQualifiedName(r)) > 0 || strings.HasSuffix(strings.SplitN(r, "/", 2)[0], "kubernetes.io") {
		return fmt.Errorf("resource %q is not an extended resource name such as vendor.com/device", r)
	}
	return nil
}

// SubmitKind reads what allot submit --accelerator names: a kind the scheduler knows by
// default (asked for by its first resource), or KIND=RESOURCE for a kind defined with the
// scheduler's --accelerators. known is false for the latter, whose nodes the CLI cannot
// tell.
func SubmitKind(v string) (k Accelerator, known bool, err error) {
	var names []string
	for _, d := range DefaultAccelerators() {
		if d.Name == v {
			return d, true, nil
		}
		names = append(names, d.Name)
	}
	name, res, ok := strings.Cut(v, "=")
	if ok && kindName.MatchString(name) && checkResourceName(res) == nil {
		return Accelerator{Name: name, Resources: []corev1.ResourceName{corev1.ResourceName(res)}}, false, nil
	}
	return k, false, fmt.Errorf("--accelerator %q is not allowed: a kind of the scheduler's --accelerators (%s), or KIND=RESOURCE for a kind defined there (tpu=google.com/tpu)",
		v, strings.Join(names, ", "))
}

// Names are the kinds on, in the engine's order: engine.Snapshot.Accelerators.
func (a *Accelerators) Names() []string {
	if a == nil {
		return nil
	}
	out := make([]string, len(a.on))
	for i, k := range a.on {
		out[i] = k.Name
	}
	return out
}

// On are the kinds the scheduler schedules.
func (a *Accelerators) On() []Accelerator {
	if a == nil {
		return nil
	}
	return slices.Clone(a.on)
}

// Kind finds a kind that is on by name.
func (a *Accelerators) Kind(name string) (Accelerator, bool) {
	if a != nil {
		for _, k := range a.on {
			if k.Name == name {
				return k, true
			}
		}
	}
	return Accelerator{}, false
}

// Resources are every resource of the kinds on: the engine counts them, as it counts
// nvidia.com/gpu.
func (a *Accelerators) Resources() []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, k := range a.On() {
		out = append(out, k.Resources...)
	}
	return out
}

// kindOf finds the kind a resource asks for: on tells whether the scheduler schedules it.
func (a *Accelerators) kindOf(r corev1.ResourceName) (k *Accelerator, on bool) {
	if a == nil {
		return nil, false
	}
	i, ok := a.byResource[r]
	if !ok {
		return nil, false
	}
	return &a.known[i], i < len(a.on)
}

// Scheduled tells whether a resource asks for a kind the scheduler schedules.
func (a *Accelerators) Scheduled(r corev1.ResourceName) bool {
	_, on := a.kindOf(r)
	return on
}

// OnList is the kinds on, for a message: "ascend, amd", or that there are none.
func (a *Accelerators) OnList() string {
	if names := a.Names(); len(names) > 0 {
		return strings.Join(names, ", ")
	}
	return "none: NVIDIA GPUs only"
}

// Node converts a node as Node does and, where it has no NVIDIA GPU but one of the kinds'
// resources allocatable, as a node of that kind: one device per unit allocatable (at
// most 64), each of the model and memory its labels give, cordoned as
// allot.dev/gpu-cordon names by index.
func (a *Accelerators) Node(n *corev1.Node) engine.Node {
	out := Node(n)
	k, count := a.nodeKind(n)
	if len(out.GPUs) > 0 || k == nil || count == 0 {
		return out
	}
	out.Accelerator = k.Name
	model, memory := k.model(n), k.memory(n, count)
	cordoned, _ := Cordoned(n, count, nil)
	for g := 0; g < count; g++ {
		var cordon string
		if cordoned[g] {
			cordon = CordonReason
		}
		out.GPUs = append(out.GPUs, engine.GPU{Model: model, Memory: memory, UUID: strconv.Itoa(g), Island: g * 2 / count, Cordoned: cordon})
	}
	return out
}

// nodeKind is the kind of a node's devices and how many it has: the first kind on (in the
// table's order) of which the node has a resource allocatable, its first such resource.
func (a *Accelerators) nodeKind(n *corev1.Node) (*Accelerator, int) {
	for i := range a.On() {
		k := &a.on[i]
		if r, ok := k.nodeResource(n); ok {
			return k, allocatable(n, r)
		}
	}
	return nil, 0
}

// nodeResource is the first of the kind's resources the node has allocatable.
func (k *Accelerator) nodeResource(n *corev1.Node) (corev1.ResourceName, bool) {
	for _, r := range k.Resources {
		if _, ok := n.Status.Allocatable[r]; ok {
			return r, true
		}
	}
	return "", false
}

// allocatable is a device count as Allot trusts it: none when negative, at most 64.
func allocatable(n *corev1.Node, r corev1.ResourceName) int {
	q := n.Status.Allocatable[r]
	return int(min(max(q.Value(), 0), 64))
}

func (k *Accelerator) model(n *corev1.Node) string {
	for _, l := range k.ModelLabels {
		if v := strings.TrimSpace(n.Labels[l]); v != "" {
			return v
		}
	}
	return ""
}

// memory is each device's memory in bytes from the kind's label; 0 (unknown) without one
// or when it is not a number in the kind's unit up to 2^50 bytes.
func (k *Accelerator) memory(n *corev1.Node, count int) int64 {
	b, _ := k.memoryOf(n, count)
	return b
}

// memoryOf also says whether a label that is there was readable.
func (k *Accelerator) memoryOf(n *corev1.Node, count int) (int64, bool) {
	v, ok := n.Labels[k.MemoryLabel]
	if k.MemoryLabel == "" || !ok {
		return 0, true
	}
	v = strings.TrimSpace(v)
	unit := int64(1)
	switch k.MemoryUnit {
	case MemoryMiB:
		unit = 1 << 20
	case MemoryGiB:
		unit, v = 1<<30, strings.TrimSuffix(v, "G")
	}
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil || x < 0 || x > (1<<50)/unit {
		return 0, false
	}
	b := x * unit
	if k.MemoryUnit == MemoryNodeBytes && count > 0 {
		b /= int64(count)
	}
	return b, true
}

// AcceleratorProblems names what the table did not trust on a node, beside NodeProblems:
// a device count out of range, devices of two kinds, a memory label that is not a number.
func (a *Accelerators) AcceleratorProblems(n *corev1.Node) []string {
	var out []string
	var kinds []string
	for _, k := range a.On() {
		r, ok := k.nodeResource(n)
		if !ok {
			continue
		}
		kinds = append(kinds, fmt.Sprintf("%s (%s)", k.Name, r))
		q := n.Status.Allocatable[r]
		switch {
		case q.Sign() < 0:
			out = append(out, fmt.Sprintf("allocatable %s is %s: counted as none", r, q.String()))
		case q.Value() > 64:
			out = append(out, fmt.Sprintf("allocatable %s is %s: counted as 64, the most devices one node may have", r, q.String()))
		}
		if _, ok := k.memoryOf(n, allocatable(n, r)); !ok {
			out = append(out, fmt.Sprintf("label %s: %q is not a number of %s: %s device memory unknown", k.MemoryLabel, n.Labels[k.MemoryLabel], k.MemoryUnit, k.Name))
		}
	}
	switch {
	case len(kinds) > 0 && GPUCount(n) > 0:
		out = append(out, fmt.Sprintf("allocatable has %s and %s: counted as NVIDIA GPUs only", GPUResource, strings.Join(kinds, ", ")))
	case len(kinds) > 1:
		out = append(out, fmt.Sprintf("allocatable has devices of %d kinds, %s: counted as %s only (a node's devices are of one kind)",
			len(kinds), strings.Join(kinds, " and "), kinds[0]))
	}
	return out
}

// PodKind is the kind of device a pod asks for.
type PodKind struct {
	// Name is the kind; empty for NVIDIA's GPUs (or no device at all).
	Name string
	// Resource is the resource it asks by: a node that does not have it cannot give it,
	// whatever its kind.
	Resource corev1.ResourceName
	// Problem says why the pod cannot be scheduled as written: devices of two kinds, a
	// slice of a device that is not NVIDIA's, a kind that is not on.
	Problem string
}

// FractionsNVIDIAOnly is why a slice of another vendor's device is refused.
const FractionsNVIDIAOnly = "fractions are NVIDIA GPUs only"

// PodRequest reads what a pod asks as PodRequest does, and which kind of device: a pod
// asking for a kind's resource asks for that many whole devices of it.
func (a *Accelerators) PodRequest(p *corev1.Pod) (engine.PodRequest, PodKind) {
	r := PodRequest(p)
	var pk PodKind
	asks := a.Asks(p)
	if len(asks) == 0 {
		return r, pk
	}
	if err := a.CheckAsks(p, asks); err != nil {
		pk.Problem = err.Error()
		return r, pk
	}
	k, _ := a.kindOf(asks[0].Resource)
	pk.Name, pk.Resource = k.Name, asks[0].Resource
	r.GPUs = int(asks[0].Count)
	return r, pk
}

// Ask is how many devices of a kind's resource a pod's containers ask for.
type Ask struct {
	Resource corev1.ResourceName
	Count    int64
}

// Asks lists the resources of known kinds (on or not) a pod asks for, each as much as the
// pod holds at once (v1alpha1.PodAmount over its containers, sidecars and init containers,
// limits else requests, as WholeGPUs reads nvidia.com/gpu), in name order.
func (a *Accelerators) Asks(p *corev1.Pod) []Ask {
	if a == nil {
		return nil
	}
	var out []Ask
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				for name := range list {
					if k, _ := a.kindOf(name); k == nil || slices.ContainsFunc(out, func(x Ask) bool { return x.Resource == name }) {
						continue
					}
					out = append(out, Ask{Resource: name, Count: min(v1alpha1.PodAmount(p, func(c *corev1.Container) int64 {
						return v1alpha1.ContainerAsks(c, name)
					}), math.MaxInt32)})
				}
			}
		}
	}
	out = slices.DeleteFunc(out, func(x Ask) bool { return x.Count == 0 })
	slices.SortStableFunc(out, func(x, y Ask) int { return strings.Compare(string(x.Resource), string(y.Resource)) })
	return out
}

// CheckAsks refuses what a pod asking for devices of the table cannot be given: a kind
// that is not on, two resources (of two kinds, or two names of one kind, which no node
// has both of), one with nvidia.com/gpu, or with a slice of a GPU (Allot's annotations).
func (a *Accelerators) CheckAsks(p *corev1.Pod, asks []Ask) error {
	if len(asks) == 0 {
		return nil
	}
	first, _ := a.kindOf(asks[0].Resource)
	for _, x := range asks {
		if k, on := a.kindOf(x.Resource); !on {
			return fmt.Errorf("%s asks for kind %s, which the scheduler does not schedule (its --accelerators turns on: %s)", x.Resource, k.Name, a.OnList())
		}
	}
	if len(asks) > 1 {
		second, _ := a.kindOf(asks[1].Resource)
		return fmt.Errorf("the pod asks for %s (%s) and %s (%s): a pod asks for devices of one kind and one name",
			asks[0].Resource, first.Name, asks[1].Resource, second.Name)
	}
	if v1alpha1.WholeGPUs(p) > 0 {
		return fmt.Errorf("the pod asks for %s (%s) and %s: a pod asks for devices of one kind", asks[0].Resource, first.Name, GPUResource)
	}
	if share, err := v1alpha1.ParseGPUShare(p.Annotations); err == nil && share.Shared() {
		return fmt.Errorf("%s: %s, %s or %s with %s (%s) is not allowed; ask for whole devices of %s",
			FractionsNVIDIAOnly, v1alpha1.AnnotationGPUFraction, v1alpha1.AnnotationGPUMemory, v1alpha1.AnnotationGPUCompute, asks[0].Resource, first.Name, first.Name)
	}
	return nil
}

// Queue converts a Queue as Queue does, with its quotas of the kinds on in
// spec.accelerators; unknown lists the kinds it names that are not on (sorted), which
// count for nothing.
func (a *Accelerators) Queue(q *v1alpha1.Queue) (out engine.Queue, unknown []string) {
	out = Queue(q)
	for name, d := range q.Spec.Accelerators {
		i := slices.Index(a.Names(), name)
		if i < 0 {
			unknown = append(unknown, name)
			continue
		}
		out.Resources[engine.AcceleratorResource(i)] = devices(d)
	}
	slices.Sort(unknown)
	return out, unknown
}

// UnknownKinds says what is wrong with the kinds a Queue names that the table does not
// have on, for its Event and the webhook: "" when there are none.
func (a *Accelerators) UnknownKinds(unknown []string) string {
	if len(unknown) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.accelerators: %s %s not a kind the scheduler schedules: its --accelerators turns on %s",
		strings.Join(unknown, ", "), map[bool]string{true: "is", false: "are"}[len(unknown) == 1], a.OnList())
}
