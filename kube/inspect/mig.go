package inspect

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/submit"
	"github.com/allot-dev/allot/mig"
)

// MIGLayout is a GPU in MIG mode as people are shown it: the instances it is cut into,
// which pod holds each, and whether Allot lays it out or an admin did.
type MIGLayout struct {
	// Model is the geometry's family ("A100-80GB"), which says the profiles it has.
	Model string `json:"model"`
	// Dynamic: Allot lays the GPU out (its node is labelled allot.dev/mig-dynamic), making
	// and destroying idle instances as pods need them; else the layout is fixed, an admin's.
	Dynamic bool `json:"dynamic"`
	// MemorySlices is how many memory slices the GPU has; each instance takes a run of them.
	MemorySlices int `json:"memorySlices"`
	// MemoryMi is the GPU's memory, of which an instance has its slices' part.
	MemoryMi  int64         `json:"memoryMi"`
	Instances []MIGInstance `json:"instances"`
	// AskedBy says how a pod asks for the instances where that is not by the device
	// plugin's nvidia.com/mig-<profile>: under its single strategy they are nvidia.com/gpu,
	// for pods pinned to the node's product label.
	AskedBy string `json:"askedBy,omitempty"`
}

// MIGInstance is one instance of a GPU in MIG mode, by its place.
type MIGInstance struct {
	Profile string `json:"profile"`
	// Start is its first memory slice, Slices how many it takes.
	Start  int `json:"start"`
	Slices int `json:"slices"`
	// Share is what it counts as against its queue: its compute slices' part of the GPU.
	Share float64 `json:"share"`
	UUID  string  `json:"uuid,omitempty"`
	// Pod (namespace/name) holds it; empty while it is idle.
	Pod string `json:"pod,omitempty"`
	// Making: the scheduler asked the node's agent to make it for Pod, which waits for it.
	Making bool `json:"making,omitempty"`
	// InUse: the agent sees processes on it, yet no pod of Allot's holds it.
	InUse bool `json:"inUse,omitempty"`
}

// Name is how an instance is written: its profile at its first memory slice, "3g.40gb@4".
func (in MIGInstance) Name() string { return fmt.Sprintf("%s@%d", in.Profile, in.Start) }

// Held names the instances pod holds, as Name writes them, comma-separated.
func (l *MIGLayout) Held(pod string) string {
	var out []string
	for _, in := range l.Instances {
		if in.Pod == pod && !in.Making {
			out = append(out, in.Name())
		}
	}
	return strings.Join(out, ", ")
}

// FreeSlices are the runs of a layout's memory slices no instance takes, as "1-3" or "7".
// On a dynamic GPU Allot lays new instances out there; on a fixed one they give nothing.
func (l *MIGLayout) FreeSlices() []string {
	taken := make([]bool, l.MemorySlices)
	for _, in := range l.Instances {
		for s := in.Start; s < in.Start+in.Slices && s < len(taken); s++ {
			taken[max(s, 0)] = true
		}
	}
	var out []string
	for s := 0; s < len(taken); s++ {
		if taken[s] {
			continue
		}
		e := s
		for e+1 < len(taken) && !taken[e+1] {
			e++
		}
		if e == s {
			out = append(out, fmt.Sprint(s))
		} else {
			out = append(out, fmt.Sprintf("%d-%d", s, e))
		}
		s = e
	}
	return out
}

// migPod is a live pod bound to a node that asks MIG instances.
type migPod struct {
	p       *corev1.Pod
	profile string
	count   int
}

// migLayouts lays out the MIG devices of a converted node with the pods holding their
// instances, as the scheduler books them (convert.MIGBinding: the devices the kubelet gave,
// else where the bind booked them; a pod bound by hand on the first free instances of its
// profile), the instances the scheduler wants made for pods waiting on them
// (allot.dev/mig-wanted), and the agent's word on instances in use by no pod of Allot's.
// Keyed by device index; empty for a node with no device in MIG mode.
func migLayouts(n *corev1.Node, en *engine.Node, pods []*corev1.Pod) map[int]*MIGLayout {
	out := map[int]*MIGLayout{}
	for g := range en.GPUs {
		d := en.GPUs[g].MIG
		if d == nil {
			continue
		}
		l := &MIGLayout{Model: d.Model.Name, Dynamic: d.Dynamic, MemorySlices: d.Model.MemorySlices, MemoryMi: en.GPUs[g].Memory >> 20, AskedBy: d.AskedBy}
		for _, in := range d.Instances {
			p, ok := d.Model.Profile(in.Profile)
			if !ok {
				continue
			}
			l.Instances = append(l.Instances, MIGInstance{Profile: in.Profile, Start: in.Start, Slices: p.Slices,
				Share: float64(d.Model.Share(p)) / 1000, UUID: in.UUID})
		}
		out[g] = l
	}
	if len(out) == 0 {
		return out
	}
	// Holders: first the pods whose instances are known, then those bound by hand on
	// what is left, as the scheduler books them.
	hold := func(g, start int, pod string) bool {
		l := out[g]
		if l == nil {
			return false
		}
		for i := range l.Instances {
			if l.Instances[i].Start == start && l.Instances[i].Pod == "" {
				l.Instances[i].Pod = pod
				return true
			}
		}
		return false
	}
	var unplaced []migPod
	for _, p := range pods {
		if p.Spec.NodeName != n.Name || !live(p) {
			continue
		}
		profile, count, _, err := convert.FixedMIG(p) // the mixed strategy's resource, or the single's pinned nvidia.com/gpu
		_, dyn := p.Annotations[v1alpha1.AnnotationMIG]
		if err != nil || (profile == "" && !dyn) {
			continue
		}
		name := p.Namespace + "/" + p.Name
		gpus, starts, _, ok := convert.MIGBinding(p, en)
		if !ok {
			if profile != "" {
				unplaced = append(unplaced, migPod{p, profile, int(count)})
			}
			continue
		}
		for i, g := range gpus {
			hold(g, starts[i], name)
		}
	}
	if len(unplaced) > 0 {
		held := map[int]mig.Mask{}
		for g, l := range out {
			p := en.GPUs[g].MIG.Model
			for _, in := range l.Instances {
				if prof, ok := p.Profile(in.Profile); ok && in.Pod != "" {
					held[g] |= prof.Mask(in.Start)
				}
			}
		}
		for _, u := range unplaced {
			gpus, starts := convert.FreeMIGInstances(en, u.profile, u.count, held)
			for i, g := range gpus {
				hold(g, starts[i], u.p.Namespace+"/"+u.p.Name)
			}
		}
	}
	// Instances the scheduler asked for, for pods that still wait on them.
	waiting := map[string]bool{}
	for _, p := range pods {
		if live(p) && (p.Spec.NodeName == "" || p.Spec.NodeName == n.Name) {
			waiting[p.Namespace+"/"+p.Name] = true
		}
	}
	wishes, _ := v1alpha1.ParseMIGWishes(n.Annotations[v1alpha1.AnnotationMIGWanted])
	for _, w := range wishes {
		g := slices.IndexFunc(en.GPUs, func(d engine.GPU) bool { return d.UUID == w.GPU && d.MIG != nil })
		if g < 0 || !waiting[w.Pod] {
			continue
		}
		l, model := out[g], en.GPUs[g].MIG.Model
		p, ok := model.Profile(w.Profile)
		made := slices.ContainsFunc(l.Instances, func(in MIGInstance) bool { return in.Start == w.Start && in.Profile == w.Profile && in.UUID != "" })
		if !ok || made || slices.ContainsFunc(l.Instances, func(in MIGInstance) bool { return in.Pod == w.Pod }) {
			continue
		}
		// An idle instance in its way is destroyed for it: the wish stands in its place.
		l.Instances = slices.DeleteFunc(l.Instances, func(in MIGInstance) bool {
			return in.Pod == "" && in.Start < w.Start+p.Slices && w.Start < in.Start+in.Slices
		})
		l.Instances = append(l.Instances, MIGInstance{Profile: p.Name, Start: w.Start, Slices: p.Slices,
			Share: float64(model.Share(p)) / 1000, Pod: w.Pod, Making: true})
	}
	inUse := map[string]bool{}
	if inv, err := v1alpha1.ParseInventory(n.Annotations[v1alpha1.AnnotationGPUInventory]); err == nil {
		for _, d := range inv {
			for _, in := range d.MIGInstances {
				if in.UUID != "" && in.InUse {
					inUse[in.UUID] = true
				}
			}
		}
	}
	for _, l := range out {
		for i := range l.Instances {
			in := &l.Instances[i]
			in.InUse = in.Pod == "" && in.UUID != "" && inUse[in.UUID]
		}
		sort.Slice(l.Instances, func(a, b int) bool { return l.Instances[a].Start < l.Instances[b].Start })
	}
	return out
}

// migHolders are the pods holding a MIG device's instances, each with the part of the GPU
// its instances count as, and that part in all.
func migHolders(l *MIGLayout) ([]Holder, float64) {
	var out []Holder
	used := 0.0
	for _, in := range l.Instances {
		if in.Pod == "" || in.Making {
			continue
		}
		used += in.Share
		if k := slices.IndexFunc(out, func(h Holder) bool { return h.Pod == in.Pod }); k >= 0 {
			out[k].Share += in.Share
			continue
		}
		out = append(out, Holder{Pod: in.Pod, Share: in.Share})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Pod < out[b].Pod })
	return out, min(used, 1)
}

// migFreeMi is the memory of a MIG device no pod can be given now and it could: its idle
// instances' on a fixed layout, every slice not held on a dynamic one.
func migFreeMi(l *MIGLayout, memMi int64) int64 {
	if l.MemorySlices == 0 {
		return 0
	}
	free := 0
	if l.Dynamic {
		free = l.MemorySlices
	}
	for _, in := range l.Instances {
		switch {
		case in.Pod != "" || in.InUse:
			if l.Dynamic {
				free -= in.Slices
			}
		case !l.Dynamic:
			free += in.Slices
		}
	}
	return memMi * int64(max(free, 0)) / int64(l.MemorySlices)
}

// migOffer is what one node offers MIG requests: its fixed layouts' instances by profile,
// and the GPUs Allot lays out.
type migOffer struct {
	node  string
	fixed map[string]int
	dyn   []migGPU
}

type migGPU struct {
	model *mig.Model
	memMi int64
}

// fitsMIG tells whether some candidate node could ever give a MIG request: a fixed layout
// with that many instances of the profile, or a GPU Allot lays out whose model has the
// profile (or one holding the slice, for smallest). When none can, it names what the
// nodes give instead.
func fitsMIG(cands []Node, r submit.Request, where string) error {
	flag := "--mig " + r.MIG
	if r.MIGDynamic {
		flag = "--mig-dynamic " + r.MIG
	}
	var offers []migOffer
	var single []string // nodes whose instances are asked as nvidia.com/gpu, and how
	for _, n := range cands {
		o := migOffer{node: n.Name, fixed: map[string]int{}}
		for _, g := range n.GPUs {
			if g.MIG == nil {
				continue
			}
			if g.MIG.AskedBy != "" {
				// The device plugin's single strategy: --mig's nvidia.com/mig-<profile>
				// is not there to be had.
				if s := n.Name + " (" + g.MIG.AskedBy + ")"; !slices.Contains(single, s) {
					single = append(single, s)
				}
				continue
			}
			m, ok := mig.ByName(g.MIG.Model)
			if !ok {
				continue
			}
			if g.MIG.Dynamic {
				o.dyn = append(o.dyn, migGPU{m, g.MIG.MemoryMi})
				continue
			}
			for _, in := range g.MIG.Instances {
				if !in.Making {
					o.fixed[in.Profile]++
				}
			}
		}
		if len(o.fixed) > 0 || len(o.dyn) > 0 {
			offers = append(offers, o)
		}
	}
	holds, most, mostOn := 0, 0, ""
	for _, o := range offers {
		n := 0
		if r.MIGDynamic {
			for _, d := range o.dyn {
				if p, ok := migProfileFor(d, r); ok {
					n += d.model.Room(0)[slices.IndexFunc(d.model.Profiles, func(q mig.Profile) bool { return q.Name == p.Name })]
				}
			}
		} else {
			for prof, k := range o.fixed {
				if sameProfile(prof, r.MIG) {
					n += k
				}
			}
		}
		if n > most {
			most, mostOn = n, o.node
		}
		holds += n / max(r.MIGCount, 1)
	}
	switch {
	case most == 0 && len(single) > 0 && !r.MIGDynamic:
		return fmt.Errorf("%s: %s; MIG instances of the device plugin's single strategy are on %s", flag, migOffers(offers, r, where), strings.Join(single, ", "))
	case most == 0:
		return fmt.Errorf("%s: %s", flag, migOffers(offers, r, where))
	case most < r.MIGCount:
		return fmt.Errorf("%s --gpu-count %d: no node can hold it: the most %s instances on one node of %s is %d (%s)", flag, r.MIGCount, r.MIG, where, most, mostOn)
	case r.Pods > holds:
		return fmt.Errorf("a gang of %d pods of %d %s instance(s) each starts whole or not at all, and %s hold %d such pods at most", r.Pods, r.MIGCount, r.MIG, where, holds)
	}
	return nil
}

// migProfileFor is the profile a request takes on a GPU Allot lays out, as the engine
// chooses it: the one named, or the smallest holding the fraction and the memory.
func migProfileFor(d migGPU, r submit.Request) (*mig.Profile, bool) {
	if r.MIG != v1alpha1.MIGSmallest {
		return d.model.Profile(r.MIG)
	}
	share := int64(r.Fraction * 1000)
	memShare := share
	if r.MemoryMi > 0 {
		if d.memMi <= 0 || r.MemoryMi > d.memMi {
			return nil, false
		}
		memShare = max(share, (r.MemoryMi*1000+d.memMi-1)/d.memMi)
	}
	return d.model.Smallest(share, memShare)
}

// sameProfile compares profile names as the engine does: a media-extension instance
// ("1g.10gb+me", or ".me" in resource names) is its base geometry's.
func sameProfile(a, b string) bool {
	return mig.TrimMedia(a) == mig.TrimMedia(b)
}

// migOffers says, for a MIG request no node can give, what the nodes give instead: the
// profiles of their fixed layouts, and the GPUs Allot lays out with their models'
// profiles, each with the flag that asks it.
func migOffers(offers []migOffer, r submit.Request, where string) string {
	var fixed, dyn []string
	for _, o := range offers {
		if len(o.fixed) > 0 {
			var profs []string
			for p, k := range o.fixed {
				profs = append(profs, fmt.Sprintf("%s ×%d", p, k))
			}
			sort.Strings(profs)
			fixed = append(fixed, fmt.Sprintf("%s (%s)", o.node, strings.Join(profs, ", ")))
		}
		var models []string
		for _, d := range o.dyn {
			if m := d.model.Name + ": " + strings.Join(d.model.Names(), ", "); !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
		if len(models) > 0 {
			dyn = append(dyn, fmt.Sprintf("%s (%s)", o.node, strings.Join(models, "; ")))
		}
	}
	var b strings.Builder
	switch {
	case len(offers) == 0:
		fmt.Fprintf(&b, "no GPU of %s is in MIG mode", where)
	case r.MIGDynamic && r.MIG == v1alpha1.MIGSmallest:
		fmt.Fprintf(&b, "no GPU Allot lays out on %s has an instance that holds the slice asked", where)
	case r.MIGDynamic:
		fmt.Fprintf(&b, "no GPU Allot lays out on %s (nodes labelled %s=true) has that profile", where, v1alpha1.LabelMIGDynamic)
	default:
		fmt.Fprintf(&b, "no node of %s has a %s instance in a fixed layout (the device plugin's %s%s)", where, r.MIG, v1alpha1.MIGResourcePrefix, r.MIG)
	}
	if len(dyn) > 0 {
		fmt.Fprintf(&b, "; Allot lays out MIG on %s: ask with --mig-dynamic PROFILE (or smallest)", strings.Join(dyn, ", "))
	}
	if len(fixed) > 0 {
		fmt.Fprintf(&b, "; fixed layouts offer %s: ask with --mig PROFILE", strings.Join(fixed, ", "))
	}
	return b.String()
}
