package convert

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/mig"
)

// How a node's GPUs in MIG mode reach the engine. The agent's inventory (read through
// NVML) says which devices are in MIG mode, their instances by placement and the UUIDs
// of the MIG devices; those devices are listed after the node's whole GPUs, each with its
// layout, fixed, or for the engine to change where the node carries LabelMIGDynamic.
// Without the agent, a node whose device plugin advertises nvidia.com/mig-<profile>
// resources is taken at its word: that many instances of each profile, laid out on as few
// GPUs of the node's model as hold them (their real places are the kubelet's to choose;
// the books only need the count right).

// Labels of NVIDIA's GPU Operator on a node: the MIG manager's layout to apply, and the
// per-node switches of the operator's MIG manager and device plugin ("false": not run
// there).
const (
	LabelMIGConfig          = "nvidia.com/mig.config"
	LabelDeployMIGManager   = "nvidia.com/gpu.deploy.mig-manager"
	LabelDeployDevicePlugin = "nvidia.com/gpu.deploy.device-plugin"
)

// MIGLayoutConflict says why a node's GPUs in MIG mode may not be laid out by Allot, or
// "": a component of NVIDIA's acts on their instances on its own.
//   - The GPU Operator's MIG manager applies the node's nvidia.com/mig.config (the operator
//     labels every MIG-capable node all-disabled by default), destroying the instances
//     Allot made, or taking the GPUs out of MIG mode.
//   - NVIDIA's device plugin, under each MIG strategy: single crash-loops on GPUs whose
//     instances differ; mixed offers the instances Allot made, as nvidia.com/mig-<profile>,
//     to any pod once it restarts; none offers the GPUs in MIG mode whole. It runs where the
//     operator says so (nvidia.com/gpu.deploy.device-plugin=true); without the operator it
//     is seen where it advertises instances, or more GPUs than the node has whole. (A
//     plugin of the mixed strategy started before the first instance is not seen: the
//     docs name the setup.)
//
// The setup that works: the operator's switches off on such nodes,
// nvidia.com/gpu.deploy.mig-manager=false and nvidia.com/gpu.deploy.device-plugin=false
// (every GPU of the node then in MIG mode, delivered by Allot as a fraction is).
func MIGLayoutConflict(n *corev1.Node) string {
	inv, _ := v1alpha1.ParseInventory(n.Annotations[v1alpha1.AnnotationGPUInventory])
	return migLayoutConflict(n, inv)
}

// migLayoutConflict is MIGLayoutConflict with the node's inventory read.
func migLayoutConflict(n *corev1.Node, inv []v1alpha1.GPUInfo) string {
	var why []string
	if cfg := n.Labels[LabelMIGConfig]; cfg != "" && n.Labels[LabelDeployMIGManager] != "false" {
		why = append(why, fmt.Sprintf("the GPU Operator's MIG manager applies %s=%s to its GPUs and would destroy the instances Allot makes (label the node %s=false)",
			LabelMIGConfig, cfg, LabelDeployMIGManager))
	}
	// Without the operator's switch, a device plugin is seen by what it advertises: MIG
	// instances, or more GPUs than the agent found whole (its none strategy counts the GPUs
	// in MIG mode too).
	advertises := false
	for name, q := range n.Status.Capacity {
		if strings.HasPrefix(string(name), v1alpha1.MIGResourcePrefix) && q.Sign() > 0 {
			advertises = true
		}
	}
	if len(inv) > 0 {
		whole, _ := wholeInventory(inv)
		q := n.Status.Capacity[GPUResource]
		advertises = advertises || q.Value() > int64(len(whole))
	}
	if d := n.Labels[LabelDeployDevicePlugin]; d == "true" || (d == "" && advertises) {
		var does string
		switch n.Labels[LabelMIGStrategy] {
		case MIGStrategySingle:
			does = "under its single MIG strategy it fails on GPUs whose instances differ"
		case "mixed":
			does = "under its mixed MIG strategy it offers the instances Allot makes, as " + v1alpha1.MIGResourcePrefix + "<profile>, to any pod once it restarts"
		default:
			does = "under its none MIG strategy it offers the GPUs in MIG mode whole, as nvidia.com/gpu"
		}
		why = append(why, fmt.Sprintf("NVIDIA's device plugin runs there, and %s (label the node %s=false)", does, LabelDeployDevicePlugin))
	}
	return strings.Join(why, "; and ")
}

// wholeInventory is the inventory's devices not in MIG mode, numbered as the engine lists
// the node's whole GPUs, and whether any device is in MIG mode.
func wholeInventory(inv []v1alpha1.GPUInfo) ([]v1alpha1.GPUInfo, bool) {
	if !slices.ContainsFunc(inv, func(g v1alpha1.GPUInfo) bool { return g.MIG }) {
		return inv, false
	}
	var out []v1alpha1.GPUInfo
	for _, g := range inv {
		if !g.MIG {
			g.Index = len(out)
			out = append(out, g)
		}
	}
	return out, true
}

// migGPUs are the node's GPUs in MIG mode, to list after its whole GPUs.
// notLaidOut is why the node's GPUs are not Allot's to lay out though it asks
// (engine.Node.MIGNotLaidOut).
func migGPUs(n *corev1.Node, inv []v1alpha1.GPUInfo, notLaidOut string) []engine.GPU {
	// Not where another component acts on the instances: the layout they have is kept.
	dynamic := n.Labels[v1alpha1.LabelMIGDynamic] == "true" && notLaidOut == ""
	single := singleMIG(n)
	product := n.Labels[v1alpha1.LabelGPUProduct]
	if single.ok {
		product = single.gpu // the GPUs' model; the label names their instances
	}
	var out []engine.GPU
	for _, g := range inv {
		if !g.MIG {
			continue
		}
		mem := max(g.MemoryMiB, 0) << 20
		model, ok := mig.ForProduct(g.Model, mem)
		if !ok {
			continue // a model whose geometry Allot does not know: its instances are not scheduled
		}
		dev := engine.GPU{Model: product, Memory: mem, UUID: g.UUID, Island: g.NVLink,
			MIG: &engine.MIGDevice{Model: model, Dynamic: dynamic, AskedBy: single.askedBy()}}
		for _, in := range g.MIGInstances {
			dev.MIG.Instances = append(dev.MIG.Instances, engine.MIGInstance{Profile: in.Profile, Start: in.Start, UUID: in.UUID})
		}
		out = append(out, dev)
	}
	listed := slices.ContainsFunc(out, func(g engine.GPU) bool { return len(g.MIG.Instances) > 0 })
	if (len(out) > 0 && (listed || dynamic)) || (len(out) == 0 && len(inv) > 0) {
		return out
	}
	// No inventory, or GPUs in MIG mode whose instances the agent could not read: the
	// device plugin's advertised counts.
	if adv := advertisedMIG(n); len(adv) > 0 {
		return adv
	}
	return out
}

// advertisedMIG lays the instances a node's device plugin advertises on as few GPUs of
// its model as hold them, the largest profiles first, each at its first free start: its
// mixed strategy's nvidia.com/mig-<profile> counts, or under the single strategy its
// nvidia.com/gpu count, all of the profile GPU Feature Discovery's product label names.
func advertisedMIG(n *corev1.Node) []engine.GPU {
	names, counts := v1alpha1.MIGProfiles(n)
	product := n.Labels[v1alpha1.LabelGPUProduct]
	mem := GPUMemoryMiB(n) << 20
	model, ok := mig.ForProduct(product, mem)
	single := singleMIG(n)
	if single.ok {
		// GFD's memory label is then an instance's, not the GPU's.
		names, counts = []string{single.profile}, map[string]int64{single.profile: int64(GPUCount(n))}
		product, model, ok = single.gpu, single.model, single.model != nil
		if ok {
			mem = model.Memory()
		}
	}
	if len(names) == 0 || !ok {
		return nil
	}
	var gpus []mig.Layout
	var profiles []*mig.Profile
	for _, name := range names {
		if p, ok := model.Profile(name); ok {
			profiles = append(profiles, p)
		}
	}
	slices.SortStableFunc(profiles, func(a, b *mig.Profile) int { return b.Slices - a.Slices })
	for _, p := range profiles {
		for range counts[p.Name] {
			placed := false
			for k := range gpus {
				if st, ok := firstFree(model, gpus[k], p); ok {
					gpus[k] = append(gpus[k], mig.Placed{Profile: p, Start: st})
					placed = true
					break
				}
			}
			if !placed && len(gpus) < 64 {
				gpus = append(gpus, mig.Layout{{Profile: p, Start: p.Starts[0]}})
			}
		}
	}
	out := make([]engine.GPU, len(gpus))
	for k, l := range gpus {
		dev := &engine.MIGDevice{Model: model, AskedBy: single.askedBy()}
		for _, pl := range l {
			name := pl.Profile.Name
			if single.ok {
				name = single.profile // as the device plugin names it (a media extension kept)
			}
			dev.Instances = append(dev.Instances, engine.MIGInstance{Profile: name, Start: pl.Start})
		}
		out[k] = engine.GPU{Model: product, Memory: mem, UUID: fmt.Sprintf("mig-gpu-%d", k), MIG: dev}
	}
	return out
}

func firstFree(m *mig.Model, l mig.Layout, p *mig.Profile) (int, bool) {
	for _, st := range p.Starts {
		if m.Valid(l, p, st) == nil {
			return st, true
		}
	}
	return 0, false
}

// MIGRequest reads what a pod asks of GPUs in MIG mode into r: a fixed layout's instances
// (FixedMIG: the device plugin's mixed-strategy resource, or nvidia.com/gpu pinned to its
// single strategy's product), or AnnotationMIG (an instance Allot lays out, a profile or
// the smallest holding the pod's slice). An error says what cannot be scheduled.
func MIGRequest(p *corev1.Pod, r *engine.PodRequest) error {
	prof, count, single, err := FixedMIG(p)
	if err != nil {
		return err
	}
	ann := p.Annotations[v1alpha1.AnnotationMIG]
	asked := v1alpha1.MIGResourcePrefix + prof
	if single {
		asked = fmt.Sprintf("%s pinned to %s=…-MIG-%s", v1alpha1.GPUResource, v1alpha1.LabelGPUProduct, prof)
	}
	switch {
	case prof != "" && ann != "":
		return fmt.Errorf("asks %s and annotation %s: ask a fixed layout's instance by its resource, or one Allot lays out by the annotation, not both", asked, v1alpha1.AnnotationMIG)
	case prof != "":
		if _, _, err := mig.ParseName(prof); err != nil {
			return err
		}
		if single {
			// Its nvidia.com/gpu count is the instances.
			if r.Shared() {
				return fmt.Errorf("asks %s with a slice (allot.dev/gpu-fraction, gpu-memory or gpu-compute): a MIG instance is not shared in slices; ask whole instances by %s", asked, v1alpha1.GPUResource)
			}
			r.GPUs = 0
		} else if r.GPUs > 0 || r.Shared() {
			return fmt.Errorf("asks %s beside other GPUs: a pod's GPUs are MIG instances or not", asked)
		}
		r.MIG, r.Devices, r.MIGFrom = prof, int(count), engine.MIGFixed
	case ann == v1alpha1.MIGSmallest:
		if r.GPUFraction == 0 && r.GPUMemory == 0 {
			return fmt.Errorf("annotation %s: %s needs allot.dev/gpu-fraction or allot.dev/gpu-memory to size the instance", v1alpha1.AnnotationMIG, v1alpha1.MIGSmallest)
		}
		r.MIGShare, r.MIGMemory, r.MIGFrom = r.GPUFraction, r.GPUMemory, engine.MIGDynamic
		r.GPUFraction, r.GPUMemory, r.GPUCompute = 0, 0, 0
	case ann != "":
		if _, _, err := mig.ParseName(ann); err != nil {
			return fmt.Errorf("annotation %s: %v, or %s", v1alpha1.AnnotationMIG, err, v1alpha1.MIGSmallest)
		}
		if r.GPUs > 0 || r.Shared() {
			return fmt.Errorf("annotation %s: a profile by name is the size; leave out nvidia.com/gpu and the slice annotations", v1alpha1.AnnotationMIG)
		}
		r.MIG, r.MIGFrom = ann, engine.MIGDynamic
	}
	return nil
}

// FormatMIGInstances writes where a binding's MIG instances are, for
// AnnotationMIGInstances: "<GPU UUID>/<profile>@<start>" per instance.
func FormatMIGInstances(node *engine.Node, b engine.Binding) string {
	var out []string
	for i, g := range b.GPUs {
		if g < 0 || g >= len(node.GPUs) || i >= len(b.MIGStarts) {
			return ""
		}
		out = append(out, fmt.Sprintf("%s/%s@%d", node.GPUs[g].UUID, b.MIG, b.MIGStarts[i]))
	}
	return strings.Join(out, ",")
}

// MIGInstancesByIndex writes a binding's instances by device index ("#3/1g.10gb@6"), for
// the scheduler's own view of a pod it holds before the bind writes them by UUID.
func MIGInstancesByIndex(b engine.Binding) string {
	var out []string
	for i, g := range b.GPUs {
		if i < len(b.MIGStarts) {
			out = append(out, fmt.Sprintf("#%d/%s@%d", g, b.MIG, b.MIGStarts[i]))
		}
	}
	return strings.Join(out, ",")
}

// MIGBinding reads where a bound pod's MIG instances are: the instances the kubelet gave
// it (the agent's record of MIG device UUIDs, found in the node's layouts), else where the
// scheduler booked them (AnnotationMIGInstances). ok is false when neither says (a pod
// bound by hand); then its instances are taken to be the first free of its profile.
func MIGBinding(p *corev1.Pod, node *engine.Node) (gpus, starts []int, profile string, ok bool) {
	if node == nil {
		return nil, nil, "", false
	}
	if rec := p.Annotations[v1alpha1.AnnotationGPUDevices]; rec != "" {
		for _, u := range strings.Split(rec, ",") {
			g, in, found := instanceByUUID(node, strings.TrimSpace(u))
			if !found || (profile != "" && in.Profile != profile) {
				gpus = nil
				break
			}
			gpus, starts, profile = append(gpus, g), append(starts, in.Start), in.Profile
		}
		if len(gpus) > 0 {
			return gpus, starts, profile, true
		}
	}
	gpus, starts, profile = nil, nil, ""
	for _, f := range strings.Split(p.Annotations[v1alpha1.AnnotationMIGInstances], ",") {
		dev, at, ok1 := strings.Cut(strings.TrimSpace(f), "@")
		uuid, prof, ok2 := strings.Cut(dev, "/")
		st, err := strconv.Atoi(at)
		g := slices.IndexFunc(node.GPUs, func(d engine.GPU) bool { return d.UUID == uuid })
		if i, err := strconv.Atoi(strings.TrimPrefix(uuid, "#")); strings.HasPrefix(uuid, "#") && err == nil && i >= 0 && i < len(node.GPUs) {
			g = i // the scheduler's own note of a pod it holds (MIGInstancesByIndex)
		}
		if !ok1 || !ok2 || err != nil || g < 0 || node.GPUs[g].MIG == nil || (profile != "" && prof != profile) {
			return nil, nil, "", false
		}
		gpus, starts, profile = append(gpus, g), append(starts, st), prof
	}
	return gpus, starts, profile, len(gpus) > 0
}

func instanceByUUID(node *engine.Node, uuid string) (int, engine.MIGInstance, bool) {
	for g := range node.GPUs {
		if m := node.GPUs[g].MIG; m != nil && uuid != "" {
			for _, in := range m.Instances {
				if in.UUID == uuid {
					return g, in, true
				}
			}
		}
	}
	return 0, engine.MIGInstance{}, false
}

// FreeMIGInstances places a bound MIG pod that says nowhere where its instances are (bound
// by hand): on the first instances of its profile no one else holds, so that they are
// booked somewhere on its node rather than nowhere.
func FreeMIGInstances(node *engine.Node, profile string, count int, held map[int]mig.Mask) (gpus, starts []int) {
	for g := range node.GPUs {
		m := node.GPUs[g].MIG
		if m == nil {
			continue
		}
		for _, in := range m.Instances {
			p, ok := m.Model.Profile(in.Profile)
			if !ok || p.Name != profile || held[g]&p.Mask(in.Start) != 0 {
				continue
			}
			held[g] |= p.Mask(in.Start)
			if gpus, starts = append(gpus, g), append(starts, in.Start); len(gpus) == count {
				return gpus, starts
			}
		}
	}
	return gpus, starts
}

// MIGProblem is what is wrong with a pod's MIG request, judged with the rest of what it
// asks (its whole GPUs and slice, which a request by size reads); nil when nothing is.
func MIGProblem(p *corev1.Pod) error {
	r := engine.PodRequest{GPUs: int(v1alpha1.WholeGPUs(p))}
	if share, err := v1alpha1.ParseGPUShare(p.Annotations); err == nil {
		r.GPUFraction = engine.MilliGPU(math.Round(share.Fraction * float64(engine.OneGPU)))
		r.GPUMemory = share.Memory
		r.GPUCompute = engine.MilliGPU(share.Compute) * engine.OneGPU / 100
	}
	return MIGRequest(p, &r)
}
