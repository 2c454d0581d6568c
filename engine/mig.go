package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/allot-dev/allot/mig"
)

// MIG instances: a device in MIG mode is given out only as instances of its model's
// profiles. On a static device (its layout made by an admin) a pod takes an instance the
// device has and no pod holds; on a dynamic one the engine chooses where a new instance
// goes, on memory slices no running pod holds (idle instances there are destroyed by the
// agent before the pod binds), so a GPU with running work is never reshaped under it.
// Either way an instance counts against its queue as its profile's share of the GPU, by
// compute slices (a 1g of seven is 142 thousandths).

// profileFor is the profile a MIG request takes on a device: the one it names, or the
// smallest holding the share and memory it asks; false where the device has none.
func profileFor(r PodRequest, dev *GPU) (*mig.Profile, bool) {
	m := dev.MIG.Model
	if r.MIG != "" {
		return m.Profile(r.MIG)
	}
	share := int64(r.MIGShare)
	memShare := max(share, int64(ceilShare(r.MIGMemory, dev.Memory)))
	if r.MIGMemory > dev.Memory {
		return nil, false
	}
	return m.Smallest(share, memShare)
}

// migChoice is one place an instance may go: a device, a start, and whether an instance
// of that profile is already there (no reconfiguration needed).
type migChoice struct {
	g      int
	start  int
	prof   *mig.Profile
	exists bool
}

// migChoices lists where on device g of the node an instance for the request may go,
// given the slices booked: a static device's free instances that suit it (the smallest
// first, for a request by size), a dynamic device's allowed starts of its profile clear
// of booked slices.
func migChoices(j *jobState, r PodRequest, n *nodeState, g int, booked mig.Mask, buf []migChoice) []migChoice {
	dev := &n.n.GPUs[g]
	if dev.MIG == nil || dev.MIG.Model == nil || dev.OutOfService() != "" || !j.deviceOK(dev) ||
		(r.MIGFrom == MIGFixed && dev.MIG.Dynamic) || (r.MIGFrom == MIGDynamic && !dev.MIG.Dynamic) ||
		(dev.MIG.Dynamic && n.n.NoFractions != "") {
		// An instance Allot makes reaches its pod as a slice's device does: not where the
		// node declares no way to hand one over.
		return buf
	}
	m := dev.MIG.Model
	if !dev.MIG.Dynamic {
		want, ok := profileFor(r, dev)
		if !ok {
			return buf
		}
		for _, in := range dev.MIG.Instances {
			p, ok := m.Profile(in.Profile)
			if !ok || booked&p.Mask(in.Start) != 0 {
				continue
			}
			// By name, that profile; by size, any at least as large, the smallest first.
			if (r.MIG != "" && p == want) || (r.MIG == "" && p.Compute >= want.Compute && p.Slices >= want.Slices) {
				buf = append(buf, migChoice{g: g, start: in.Start, prof: p, exists: true})
			}
		}
		slices.SortStableFunc(buf, func(a, b migChoice) int { return a.prof.Slices*8 + a.prof.Compute - b.prof.Slices*8 - b.prof.Compute })
		return buf
	}
	p, ok := profileFor(r, dev)
	if !ok {
		return buf
	}
	for _, st := range p.Starts {
		if booked&p.Mask(st) != 0 {
			continue
		}
		exists := slices.ContainsFunc(dev.MIG.Instances, func(in MIGInstance) bool {
			ip, ok := m.Profile(in.Profile)
			return ok && in.Start == st && ip == p
		})
		buf = append(buf, migChoice{g: g, start: st, prof: p, exists: exists})
	}
	return buf
}

// pickMIG chooses an instance on each of the request's devices (several may be on one
// GPU): an instance that exists first (nothing to reconfigure), then the fullest GPU when
// bin-packing (the emptiest when spreading), then the start that keeps the largest
// profiles possible on what is left.
func (s *session) pickMIG(j *jobState, r PodRequest, n *nodeState, books []devBook) ([]int, part, bool) {
	k := r.SharedDevices()
	spread := s.gpuSpread(j)
	var taken []mig.Mask // slices chosen for earlier instances of this pod, per device
	var gpus, at []int
	var prof *mig.Profile
	var buf [16]migChoice
	for range k {
		var best *migChoice
		var bestLeft mig.Mask
		for g := range n.n.GPUs {
			booked := books[g].slices
			if taken != nil {
				booked |= taken[g]
			}
			for _, c := range migChoices(j, r, n, g, booked, buf[:0]) {
				if prof != nil && c.prof != prof {
					continue // one pod's instances are of one profile
				}
				left := booked | c.prof.Mask(c.start)
				if best == nil || betterMIG(n, spread, c, left, *best, bestLeft) {
					cc := c
					best, bestLeft = &cc, left
				}
			}
		}
		if best == nil {
			return nil, wholePart, false
		}
		if taken == nil {
			taken = make([]mig.Mask, len(n.n.GPUs))
		}
		taken[best.g] |= best.prof.Mask(best.start)
		prof = best.prof
		gpus, at = append(gpus, best.g), append(at, best.start)
	}
	model := n.n.GPUs[gpus[0]].MIG.Model
	return gpus, part{milli: MilliGPU(model.Share(prof)), mig: prof, at: at}, true
}

// betterMIG reports whether choice a (leaving slices aLeft booked on its device) beats b.
func betterMIG(n *nodeState, spread bool, a migChoice, aLeft mig.Mask, b migChoice, bLeft mig.Mask) bool {
	if a.exists != b.exists {
		return a.exists
	}
	// By size, the smallest profile that holds the request first, wherever it is.
	if a.prof.Slices != b.prof.Slices || a.prof.Compute != b.prof.Compute {
		return a.prof.Slices < b.prof.Slices || (a.prof.Slices == b.prof.Slices && a.prof.Compute < b.prof.Compute)
	}
	if a.g != b.g {
		ca, cb := aLeft.Count(), bLeft.Count()
		if ca != cb {
			return (ca > cb) != spread
		}
		return false
	}
	return n.n.GPUs[a.g].MIG.Model.Better(aLeft, bLeft)
}

// heldMIG is the part a pod bound to MIG instances holds. A binding whose devices are no
// longer in MIG mode, or whose profile the device does not know, holds the whole of each
// device it names, so that nothing is placed over it while it runs.
func heldMIG(b *Binding, n *nodeState) part {
	if len(b.GPUs) == 0 || len(b.MIGStarts) != len(b.GPUs) {
		return wholePart
	}
	dev := &n.n.GPUs[b.GPUs[0]]
	if dev.MIG == nil || dev.MIG.Model == nil {
		return wholePart // a device Allot cannot read the layout of: held whole, so nothing lands on it
	}
	p, ok := dev.MIG.Model.Profile(b.MIG)
	if !ok {
		return wholePart
	}
	for i, g := range b.GPUs {
		// A start the profile does not have (a hand-written or stale annotation) would
		// book slices that are not the instance's, or none: held whole instead.
		if n.n.GPUs[g].MIG == nil || n.n.GPUs[g].MIG.Model != dev.MIG.Model || !slices.Contains(p.Starts, b.MIGStarts[i]) {
			return wholePart
		}
	}
	return part{milli: MilliGPU(dev.MIG.Model.Share(p)), mig: p, at: slices.Clone(b.MIGStarts)}
}

// pendingMIG is what a waiting MIG request counts as demand: by name, the least its
// profile counts on the snapshot's devices that have it (a 1g is 1/7 of an A100, 1/4 of an
// A30); by size, the share it asks.
func (s *session) pendingMIG(r PodRequest) MilliGPU {
	if r.MIG == "" {
		return max(r.MIGShare, ceilShare(r.MIGMemory, max(s.maxGPUMemory, 1)))
	}
	if share, ok := s.migShares[mig.TrimMedia(r.MIG)]; ok {
		return share
	}
	return OneGPU // no device has the profile: it waits, and wants a GPU meanwhile
}

// noteMIGShares records, for pendingMIG, the least share each profile counts on a device.
func (s *session) noteMIGShares(dev *GPU) {
	if dev.MIG == nil || dev.MIG.Model == nil {
		return
	}
	if s.migShares == nil {
		s.migShares = map[string]MilliGPU{}
	}
	m := dev.MIG.Model
	for i := range m.Profiles {
		p := &m.Profiles[i]
		if v, ok := s.migShares[p.Name]; !ok || MilliGPU(m.Share(p)) < v {
			s.migShares[p.Name] = MilliGPU(m.Share(p))
		}
	}
}

// describeMIG names a MIG request for a person.
func describeMIG(r PodRequest) string {
	what := "a MIG instance"
	switch {
	case r.MIG != "":
		what = "a MIG " + r.MIG + " instance"
	case r.MIGShare > 0 && r.MIGMemory > 0:
		what = fmt.Sprintf("the smallest MIG instance holding %s of a GPU and %s", percent(r.MIGShare), Format(ResourceMemory, r.MIGMemory))
	case r.MIGShare > 0:
		what = fmt.Sprintf("the smallest MIG instance holding %s of a GPU", percent(r.MIGShare))
	case r.MIGMemory > 0:
		what = fmt.Sprintf("the smallest MIG instance holding %s", Format(ResourceMemory, r.MIGMemory))
	}
	if d := r.SharedDevices(); d > 1 {
		what = fmt.Sprintf("%d × %s", d, strings.TrimPrefix(what, "a "))
	}
	return what
}

// migShortage says why no device the job may use has an instance for the request: no
// device in MIG mode, no static layout with such an instance and no dynamic device with
// such a profile, or (naming the first) every one's slices held.
func (s *session) migShortage(j *jobState, r PodRequest, nodes []*nodeState) string {
	var devices, offer int
	var busiest, layout, notLaidOut string
	for _, n := range nodes {
		if notLaidOut == "" && n.n.MIGNotLaidOut != "" {
			notLaidOut = fmt.Sprintf("%s asks for it, but %s", n.n.ID, n.n.MIGNotLaidOut)
		}
		for g := range n.n.GPUs {
			dev := &n.n.GPUs[g]
			if dev.MIG == nil || dev.MIG.Model == nil || dev.OutOfService() != "" || !j.deviceOK(dev) ||
				(r.MIGFrom == MIGFixed && dev.MIG.Dynamic) || (r.MIGFrom == MIGDynamic && !dev.MIG.Dynamic) {
				continue
			}
			devices++
			if !dev.MIG.Dynamic {
				// A fixed layout offers what its instances are, held or not.
				if len(migChoices(j, r, n, g, 0, nil)) == 0 {
					if layout == "" {
						layout = fmt.Sprintf("%s GPU %d has %s", n.n.ID, g, describeLayout(dev.MIG.Instances))
					}
					continue
				}
			} else if _, ok := profileFor(r, dev); !ok {
				continue
			}
			offer++
			if busiest == "" {
				busiest = s.migHolders(n, g)
			}
		}
	}
	switch {
	case devices == 0 && r.MIGFrom == MIGFixed:
		return "no GPU it may use is in MIG mode with a fixed layout (a device plugin's nvidia.com/mig-* resources)"
	case devices == 0 && r.MIGFrom == MIGDynamic && notLaidOut != "":
		return "no GPU it may use is in MIG mode for Allot to lay out: " + notLaidOut
	case devices == 0 && r.MIGFrom == MIGDynamic:
		return "no GPU it may use is in MIG mode for Allot to lay out (node label allot.dev/mig-dynamic=true, with Allot's agent)"
	case devices == 0:
		return "no GPU it may use is in MIG mode"
	case offer == 0 && layout != "":
		return fmt.Sprintf("no GPU in MIG mode it may use has such an instance in its layout, and none lays instances out as pods need (%s)", layout)
	case offer == 0:
		return fmt.Sprintf("none of the %s in MIG mode it may use offers that profile", plural(devices, "GPU"))
	}
	return fmt.Sprintf("every instance it could have on the %s offering it is held, or its slices are (%s)", plural(offer, "GPU"), busiest)
}

// describeLayout counts a fixed layout's instances by profile: "7 × 1g.10gb".
func describeLayout(in []MIGInstance) string {
	count := map[string]int{}
	var order []string
	for _, i := range in {
		if count[i.Profile] == 0 {
			order = append(order, i.Profile)
		}
		count[i.Profile]++
	}
	if len(order) == 0 {
		return "no instances"
	}
	out := make([]string, len(order))
	for k, p := range order {
		out[k] = fmt.Sprintf("%d × %s", count[p], p)
	}
	return strings.Join(out, ", ")
}

// migHolders describes what holds a MIG device's slices: "n1 GPU 0: 3g.40gb at 0, 2g.20gb at 4".
func (s *session) migHolders(n *nodeState, g int) string {
	var held []string
	for _, p := range n.pods {
		if p.share.mig == nil {
			continue
		}
		for i, pg := range p.gpus {
			if pg == g {
				held = append(held, fmt.Sprintf("%s at %d", p.share.mig.Name, p.share.at[i]))
			}
		}
	}
	slices.Sort(held)
	if len(held) == 0 {
		held = append(held, "no running instance")
	}
	return fmt.Sprintf("%s GPU %d: %s", n.n.ID, g, strings.Join(held, ", "))
}

// migOnlyNote, for a whole-GPU request no node has room for, names a node whose GPUs are
// all MIG instances that pods ask for otherwise (MIGDevice.AskedBy), and how: a pod asking
// plain GPUs there would otherwise only hear that none is free.
func migOnlyNote(nodes []*nodeState) string {
	var first *nodeState
	more := 0
	for _, n := range nodes {
		asked := len(n.n.GPUs) > 0
		for g := range n.n.GPUs {
			if m := n.n.GPUs[g].MIG; m == nil || m.AskedBy == "" {
				asked = false
				break
			}
		}
		switch {
		case asked && first == nil:
			first = n
		case asked:
			more++
		}
	}
	if first == nil {
		return ""
	}
	var in []MIGInstance
	for g := range first.n.GPUs {
		in = append(in, first.n.GPUs[g].MIG.Instances...)
	}
	also := ""
	if more > 0 {
		also = fmt.Sprintf(" (and %s like it)", plural(more, "node"))
	}
	return fmt.Sprintf("; %s's GPUs are MIG instances (%s)%s, %s", first.n.ID, describeLayout(in), also, first.n.GPUs[0].MIG.AskedBy)
}
