// Package mig knows NVIDIA's Multi-Instance GPU geometry: which GPU instance profiles a
// GPU model offers, how much of the GPU each takes, and where on the GPU each may be
// placed. The scheduler's engine chooses placements with it and the node agent checks
// what it is asked to create against it; neither needs a driver for that.
//
// A MIG-capable GPU is cut into memory slices (8 on GA100 and GH100, 4 on the A30) and
// compute slices (7, or 4). A GPU instance takes a run of memory slices starting at one of
// its profile's allowed starts; two instances never share a memory slice. The placements
// below are those NVIDIA's MIG user guide lists per profile and NVML reports through
// nvmlDeviceGetGpuInstancePossiblePlacements_v2.
package mig

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Profile is a GPU instance profile of one model.
type Profile struct {
	// Name is the profile's name as the device plugin and nvidia-smi spell it: "1g.10gb".
	Name string
	// Compute is its compute slices, of the model's ComputeSlices.
	Compute int
	// Slices is its memory slices, of the model's MemorySlices.
	Slices int
	// Starts are the memory slices at which an instance of it may begin.
	Starts []int
}

// Mask is the memory slices an instance of the profile placed at start occupies.
func (p *Profile) Mask(start int) Mask {
	return Mask((1<<p.Slices - 1) << start)
}

// Mask is a set of a GPU's memory slices, bit i for slice i.
type Mask uint16

// Count is how many slices the mask holds.
func (m Mask) Count() int { return bits.OnesCount16(uint16(m)) }

// Model is the MIG geometry of one GPU model.
type Model struct {
	// Name is the family the geometry belongs to ("A100-80GB"), for messages.
	Name          string
	ComputeSlices int
	MemorySlices  int
	// Profiles, smallest first (fewest compute slices, then fewest memory slices).
	Profiles []Profile
}

// Profile finds a profile by name; a media-extension profile ("1g.10gb+me", or ".me" as
// the device plugin spells it in resource names) is looked up by its base geometry.
func (m *Model) Profile(name string) (*Profile, bool) {
	name = TrimMedia(name)
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// Names lists the model's profiles, smallest first.
func (m *Model) Names() []string {
	out := make([]string, len(m.Profiles))
	for i := range m.Profiles {
		out[i] = m.Profiles[i].Name
	}
	return out
}

// Smallest is the smallest profile holding at least computeMilli thousandths of the GPU's
// compute and memMilli thousandths of its memory; false when none does (more than 1000).
func (m *Model) Smallest(computeMilli, memMilli int64) (*Profile, bool) {
	for i := range m.Profiles {
		p := &m.Profiles[i]
		if int64(p.Compute)*1000 >= computeMilli*int64(m.ComputeSlices) &&
			int64(p.Slices)*1000 >= memMilli*int64(m.MemorySlices) {
			return p, true
		}
	}
	return nil, false
}

// Share is what an instance of the profile counts as, in thousandths of the GPU: its
// compute slices as a part of the model's, rounded down so that a full layout never counts
// more than the GPU (seven 1g are 994; one 7g is 1000).
func (m *Model) Share(p *Profile) int64 {
	return int64(p.Compute) * 1000 / int64(m.ComputeSlices)
}

// Full is the mask of all the GPU's memory slices.
func (m *Model) Full() Mask { return Mask(1<<m.MemorySlices - 1) }

// geometry is a family's profiles by shape; names come from the memory each slice count
// carries on a given model.
type shape struct {
	compute, slices int
	starts          []int
}

// The seven-slice GPUs (A100, H100, H200, B200): 1g, 1g with two memory slices, 2g, 3g,
// 4g and 7g, at the starts NVIDIA lists.
var sevenSlice = []shape{
	{1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
	{1, 2, []int{0, 2, 4, 6}},
	{2, 2, []int{0, 2, 4}},
	{3, 4, []int{0, 4}},
	{4, 4, []int{0}},
	{7, 8, []int{0}},
}

// The A30: 1g, 2g and 4g of four slices each.
var fourSlice = []shape{
	{1, 1, []int{0, 1, 2, 3}},
	{2, 2, []int{0, 2}},
	{4, 4, []int{0}},
}

// family is one memory size of a MIG-capable GPU: the gigabytes in its profiles' names by
// memory slices.
type family struct {
	name   string
	match  []string // substrings of the product name (nvidia.com/gpu.product), upper case
	memGB  int      // its memory, for matching by size where the name says nothing
	shapes []shape
	gb     map[int]int // memory slices → the GB in the profile name
}

var families = []family{
	{"A30-24GB", []string{"A30"}, 24, fourSlice, map[int]int{1: 6, 2: 12, 4: 24}},
	{"A100-40GB", []string{"A100-SXM4-40GB", "A100-PCIE-40GB", "A100-40GB"}, 40, sevenSlice, map[int]int{1: 5, 2: 10, 4: 20, 8: 40}},
	{"A100-80GB", []string{"A100-SXM4-80GB", "A100-PCIE-80GB", "A100 80GB", "A100-80GB"}, 80, sevenSlice, map[int]int{1: 10, 2: 20, 4: 40, 8: 80}},
	{"H100-80GB", []string{"H100-80GB", "H100-SXM5-80GB", "H100-PCIE", "H100 80GB", "H100-SXM"}, 80, sevenSlice, map[int]int{1: 10, 2: 20, 4: 40, 8: 80}},
	{"H100-94GB", []string{"H100-NVL", "H100-94GB", "H100 NVL"}, 94, sevenSlice, map[int]int{1: 12, 2: 24, 4: 47, 8: 94}},
	{"H100-96GB", []string{"GH200", "H100-96GB", "H20"}, 96, sevenSlice, map[int]int{1: 12, 2: 24, 4: 48, 8: 96}},
	{"H200-141GB", []string{"H200"}, 141, sevenSlice, map[int]int{1: 18, 2: 35, 4: 71, 8: 141}},
	{"B200-180GB", []string{"B200"}, 180, sevenSlice, map[int]int{1: 23, 2: 45, 4: 90, 8: 180}},
}

var models = func() map[string]*Model {
	out := map[string]*Model{}
	for _, f := range families {
		m := &Model{Name: f.name, ComputeSlices: 7, MemorySlices: 8}
		if len(f.shapes) == len(fourSlice) {
			m.ComputeSlices, m.MemorySlices = 4, 4
		}
		for _, s := range f.shapes {
			m.Profiles = append(m.Profiles, Profile{
				Name: fmt.Sprintf("%dg.%dgb", s.compute, f.gb[s.slices]), Compute: s.compute, Slices: s.slices, Starts: s.starts})
		}
		out[f.name] = m
	}
	return out
}()

// ForProduct finds the geometry of a GPU from its product name (GPU Feature Discovery's
// nvidia.com/gpu.product, or NVML's device name) and, where the name is shared by memory
// sizes (an "A100-PCIE" of 40 or 80 GB), its memory in bytes (0 if unknown). False for a
// GPU that has no MIG.
func ForProduct(product string, memory int64) (*Model, bool) {
	p := strings.ToUpper(strings.ReplaceAll(product, "_", "-"))
	gb := int((memory + 500<<20) >> 30) // NVML's total is a little under the nominal size
	var found *family
	for i := range families {
		f := &families[i]
		for _, s := range f.match {
			if !strings.Contains(p, s) {
				continue
			}
			// A name matched by several sizes: the one closest to the memory, if known.
			if found == nil || (gb > 0 && abs(f.memGB-gb) < abs(found.memGB-gb)) {
				found = f
			}
		}
	}
	if found == nil {
		return nil, false
	}
	return models[found.name], true
}

// ByName returns a family's geometry by its name ("A100-80GB"); the names are Families'.
func ByName(name string) (*Model, bool) {
	m, ok := models[name]
	return m, ok
}

// Families lists the geometries this package knows, by name.
func Families() []string {
	out := make([]string, len(families))
	for i, f := range families {
		out[i] = f.name
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// ParseName reads a profile name ("3g.40gb", "1g.10gb+me", "1g.10gb.me") into its compute
// slices and the memory in its name, in GB; an error names what is wrong.
func ParseName(name string) (compute, gb int, err error) {
	base := TrimMedia(name)
	c, m, ok := strings.Cut(base, "g.")
	if ok && strings.HasSuffix(m, "gb") {
		compute, err1 := strconv.Atoi(c)
		gb, err2 := strconv.Atoi(strings.TrimSuffix(m, "gb"))
		if err1 == nil && err2 == nil && compute > 0 && gb > 0 {
			return compute, gb, nil
		}
	}
	return 0, 0, fmt.Errorf("MIG profile %q: want <compute>g.<memory>gb, as 1g.10gb or 3g.40gb", name)
}

// TrimMedia is a profile's base geometry: a media-extension instance ("1g.10gb+me", or
// ".me" as resource names spell it) is its base profile's, as Model names it.
func TrimMedia(name string) string {
	name = strings.TrimSuffix(name, "+me")
	return strings.TrimSuffix(name, ".me")
}

// Layout is the placed instances of one GPU, for checking a set of placements.
type Layout []Placed

// Placed is one instance: its profile and first memory slice.
type Placed struct {
	Profile *Profile
	Start   int
}

// Valid says whether the placement is one the model allows and the layout has room for;
// the error says why not.
func (m *Model) Valid(l Layout, p *Profile, start int) error {
	if !containsInt(p.Starts, start) {
		return fmt.Errorf("%s cannot start at memory slice %d on %s: allowed starts are %v", p.Name, start, m.Name, p.Starts)
	}
	if l.Mask()&p.Mask(start) != 0 {
		return fmt.Errorf("%s at memory slice %d overlaps an instance already on the GPU (slices in use %08b)", p.Name, start, uint16(l.Mask()))
	}
	return nil
}

// Mask is the memory slices the layout's instances occupy.
func (l Layout) Mask() Mask {
	var m Mask
	for _, p := range l {
		m |= p.Profile.Mask(p.Start)
	}
	return m
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Room counts, for each of the model's profiles in order, how many more instances of it
// alone could be placed beside the occupied slices: what a layout leaves possible.
func (m *Model) Room(occupied Mask) []int {
	out := make([]int, len(m.Profiles))
	for i := range m.Profiles {
		p := &m.Profiles[i]
		used := occupied
		for _, s := range p.Starts {
			if used&p.Mask(s) == 0 {
				used |= p.Mask(s)
				out[i]++
			}
		}
	}
	return out
}

// Better reports whether occupying slices a keeps larger profiles possible than
// occupying b: the room for the largest profile decides first, then the next, and so on.
func (m *Model) Better(a, b Mask) bool {
	ra, rb := m.Room(a), m.Room(b)
	for i := len(ra) - 1; i >= 0; i-- {
		if ra[i] != rb[i] {
			return ra[i] > rb[i]
		}
	}
	return false
}

// SingleProduct reads the product GPU Feature Discovery labels a node with under the
// NVIDIA device plugin's single MIG strategy, "<GPU model>-MIG-<profile>"
// ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"): the GPU's model and the one profile of all its
// instances. False for a product that names no MIG profile, and for "<model>-MIG-INVALID",
// which GFD writes when the GPUs' instances are not of one profile.
func SingleProduct(product string) (gpu, profile string, ok bool) {
	i := strings.LastIndex(product, "-MIG-")
	if i <= 0 {
		return "", "", false
	}
	gpu, profile = product[:i], product[i+len("-MIG-"):]
	if _, _, err := ParseName(profile); err != nil {
		return "", "", false
	}
	return gpu, profile, true
}

// ForProfile finds the geometry of a GPU from its product name and the name of one of its
// profiles: the family the name matches that has the profile, which tells apart sizes the
// name does not ("A100-PCIE" of 40 or 80 GB: 1g.5gb or 1g.10gb).
func ForProfile(product, profile string) (*Model, *Profile, bool) {
	p := strings.ToUpper(strings.ReplaceAll(product, "_", "-"))
	for i := range families {
		f := &families[i]
		if !slices.ContainsFunc(f.match, func(s string) bool { return strings.Contains(p, s) }) {
			continue
		}
		m := models[f.name]
		if prof, ok := m.Profile(profile); ok {
			return m, prof, true
		}
	}
	return nil, nil, false
}

// Memory is the model's whole memory in bytes, as its largest profile names it.
func (m *Model) Memory() int64 {
	_, gb, _ := ParseName(m.Profiles[len(m.Profiles)-1].Name)
	return int64(gb) << 30
}
