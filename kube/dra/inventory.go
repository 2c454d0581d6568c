// Package dra is what Allot knows of Dynamic Resource Allocation (resource.k8s.io/v1): which
// devices of the ResourceSlices are GPUs and on which node, what a pod's ResourceClaims ask
// for and hold, and the allocation itself, done by kube-scheduler's own structured
// allocator (k8s.io/dynamic-resource-allocation/structured). It reads Kubernetes objects
// and returns plain values; the scheduler turns those into the engine's GPUs, so the engine
// never learns that a GPU came from a claim.
package dra

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// DefaultGPUClasses are the DeviceClasses whose devices count as GPUs when the scheduler is
// told none: NVIDIA's DRA driver names its whole-GPU class gpu.nvidia.com.
var DefaultGPUClasses = []string{"gpu.nvidia.com"}

// DefaultMIGClasses are the DeviceClasses whose devices are MIG instances, parts of a GPU:
// NVIDIA's driver names its class mig.nvidia.com.
var DefaultMIGClasses = []string{"mig.nvidia.com"}

// Part is a MIG device: a part of a GPU of its node.
type Part struct {
	Place
	// Share is the part of its GPU it is, in thousandths: its compute slices of the GPU's
	// (1g of an A100 or H100's 7 is 142), rounded down so that a GPU's parts add up to at
	// most all of it.
	Share int
	ID    structured.DeviceID
}

// Device is one GPU a ResourceSlice publishes.
type Device struct {
	ID      structured.DeviceID
	UUID    string // the "uuid" attribute NVIDIA's driver publishes; else driver/pool/device
	Product string // "productName"
	Memory  int64  // bytes, from the "memory" capacity; 0 when not published
}

// Inventory is the GPUs of each node as its ResourceSlices publish them, in a stable order
// (driver, pool, then device name with numbers compared as numbers: gpu-2 before gpu-10),
// which is the order of the engine's GPU indices on that node.
type Inventory struct {
	nodes map[string][]Device
	where map[structured.DeviceID]Place
	// slices are the current ones (older generations of a pool dropped), for the allocator;
	// byNode the ones an allocation on each node can use (its own, and those of no node).
	slices []*resourceapi.ResourceSlice
	byNode map[string][]*resourceapi.ResourceSlice
	shared []*resourceapi.ResourceSlice
	// classes are the GPU and MIG classes, by name, for matching requests against devices.
	classes map[string]*resourceapi.DeviceClass
	gpu     map[string]bool
	mig     map[string]bool
	cel     *cel.Cache
	// parts are the MIG devices, by ID; partsOnly marks, per node and GPU index, the GPUs
	// in MIG mode whose whole is not published (only their parts can be claimed).
	parts     map[structured.DeviceID]Part
	partsOf   map[string][]Part
	partsOnly map[string]map[int]bool
}

// Place is where a device is: its node and its index among that node's GPUs.
type Place struct {
	Node  string
	Index int
}

// ClassNames say which DeviceClasses are whole GPUs and which MIG parts of one.
type ClassNames struct{ GPU, MIG []string }

// DefaultClassNames are NVIDIA's.
var DefaultClassNames = ClassNames{GPU: DefaultGPUClasses, MIG: DefaultMIGClasses}

// NewInventory reads the slices. names say which DeviceClasses count as GPUs and which as
// MIG parts; a device is one when such a class selects it (its CEL selectors, evaluated as
// the allocator does). Classes not in the cluster select nothing.
func NewInventory(published []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass, names ClassNames, celCache *cel.Cache) *Inventory {
	inv := &Inventory{nodes: map[string][]Device{}, where: map[structured.DeviceID]Place{}, classes: map[string]*resourceapi.DeviceClass{},
		gpu: map[string]bool{}, mig: map[string]bool{}, cel: celCache,
		parts: map[structured.DeviceID]Part{}, partsOf: map[string][]Part{}, partsOnly: map[string]map[int]bool{}}
	for _, c := range names.GPU {
		inv.gpu[c] = true
	}
	for _, c := range names.MIG {
		inv.mig[c] = true
	}
	for _, c := range classes {
		if inv.gpu[c.Name] || inv.mig[c.Name] {
			inv.classes[c.Name] = c
		}
	}
	inv.slices = current(published)
	inv.byNode = map[string][]*resourceapi.ResourceSlice{}
	for _, s := range inv.slices {
		if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			inv.byNode[*s.Spec.NodeName] = append(inv.byNode[*s.Spec.NodeName], s)
		} else {
			inv.shared = append(inv.shared, s)
		}
	}
	type found struct {
		node string
		dev  Device
		name string
		// driver and pool order a GPU in MIG mode (no ID of its own) by its parts'.
		driver, pool string
	}
	var all []found
	var migs []found // MIG devices, with their parent's UUID in dev.UUID's place below
	parentOf := map[structured.DeviceID]string{}
	sliceOf := map[structured.DeviceID]string{} // MIG profile, for its share
	for _, s := range inv.slices {
		node := ""
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		if node == "" {
			continue // network-attached devices: not a node's GPUs
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			isMIG := inv.selectedBy(inv.mig, s.Spec.Driver, d)
			if !isMIG && !inv.selectedBy(inv.gpu, s.Spec.Driver, d) {
				continue
			}
			id := structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)
			dev := Device{ID: id, UUID: id.String()}
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				dev.UUID = *a.StringValue
			}
			if a, ok := d.Attributes["productName"]; ok && a.StringValue != nil {
				dev.Product = *a.StringValue
			}
			if c, ok := d.Capacity["memory"]; ok {
				dev.Memory = c.Value.Value()
			}
			if isMIG {
				if a, ok := d.Attributes["parentUUID"]; ok && a.StringValue != nil {
					parentOf[id] = *a.StringValue
				}
				if a, ok := d.Attributes["profile"]; ok && a.StringValue != nil {
					sliceOf[id] = *a.StringValue
				}
				migs = append(migs, found{node, dev, d.Name, s.Spec.Driver, s.Spec.Pool.Name})
				continue
			}
			all = append(all, found{node, dev, d.Name, s.Spec.Driver, s.Spec.Pool.Name})
		}
	}
	// A GPU in MIG mode whose whole is not published is a GPU of its node all the same,
	// placed in the order by its first part's name (gpu-0-mig-… before gpu-1).
	whole := map[string]bool{}
	for _, f := range all {
		whole[f.node+"/"+f.dev.UUID] = true
	}
	for _, f := range migs {
		parent := parentOf[f.dev.ID]
		if parent == "" || whole[f.node+"/"+parent] {
			continue
		}
		whole[f.node+"/"+parent] = true
		all = append(all, found{f.node, Device{ID: structured.DeviceID{}, UUID: parent, Product: f.dev.Product}, f.name, f.driver, f.pool})
	}
	sort.SliceStable(all, func(a, b int) bool {
		x, y := all[a], all[b]
		if x.node != y.node {
			return x.node < y.node
		}
		if x.driver != y.driver {
			return x.driver < y.driver
		}
		if x.pool != y.pool {
			return x.pool < y.pool
		}
		return naturalLess(x.name, y.name)
	})
	for _, f := range all {
		if f.dev.ID == (structured.DeviceID{}) {
			// In MIG mode: only its parts can be claimed.
			if inv.partsOnly[f.node] == nil {
				inv.partsOnly[f.node] = map[int]bool{}
			}
			inv.partsOnly[f.node][len(inv.nodes[f.node])] = true
			inv.nodes[f.node] = append(inv.nodes[f.node], f.dev)
			continue
		}
		if _, dup := inv.where[f.dev.ID]; dup {
			continue // published twice (a pool mid-update): counted once
		}
		inv.where[f.dev.ID] = Place{f.node, len(inv.nodes[f.node])}
		inv.nodes[f.node] = append(inv.nodes[f.node], f.dev)
	}
	// A MIG device is a part of its parent GPU, found by UUID.
	for _, f := range migs {
		parent := parentOf[f.dev.ID]
		idx := slices.IndexFunc(inv.nodes[f.node], func(d Device) bool { return d.UUID == parent })
		if parent == "" || idx < 0 {
			continue // a part of no known GPU cannot be counted
		}
		p := Part{Place: Place{f.node, idx}, Share: migShare(sliceOf[f.dev.ID], f.dev.Product), ID: f.dev.ID}
		inv.parts[f.dev.ID] = p
		inv.partsOf[f.node] = append(inv.partsOf[f.node], p)
	}
	return inv
}

// migShare is the part of a GPU a MIG profile ("3g.40gb") is, in thousandths: its compute
// slices of the GPU's (7 on an A100 or H100, 4 on an A30), rounded down. An unreadable
// profile counts as one slice.
func migShare(profile, product string) int {
	n := 1
	if g, _, ok := strings.Cut(profile, "g."); ok {
		if k, err := strconv.Atoi(g); err == nil && k > 0 {
			n = k
		}
	}
	of := 7
	if strings.Contains(product, "A30") {
		of = 4
	}
	return min(n, of) * 1000 / of
}

// current drops the slices of a pool's older generations: a driver republishing its pool
// bumps the generation, and until the old slices are deleted only the newest count.
func current(slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	type pool struct{ driver, name string }
	newest := map[pool]int64{}
	for _, s := range slices {
		k := pool{s.Spec.Driver, s.Spec.Pool.Name}
		newest[k] = max(newest[k], s.Spec.Pool.Generation)
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, s := range slices {
		if s.Spec.Pool.Generation == newest[pool{s.Spec.Driver, s.Spec.Pool.Name}] {
			out = append(out, s)
		}
	}
	return out
}

func (inv *Inventory) selectedBy(names map[string]bool, driver string, d *resourceapi.Device) bool {
	for name, c := range inv.classes {
		if !names[name] {
			continue
		}
		if ok, _ := inv.selects(c.Spec.Selectors, driver, d); ok {
			return true
		}
	}
	return false
}

// selects evaluates CEL selectors against a device, all of which must hold.
func (inv *Inventory) selects(sel []resourceapi.DeviceSelector, driver string, d *resourceapi.Device) (bool, error) {
	for _, s := range sel {
		if s.CEL == nil {
			continue
		}
		r := inv.cel.GetOrCompile(s.CEL.Expression)
		if r.Error != nil {
			return false, fmt.Errorf("selector %q: %v", s.CEL.Expression, r.Error)
		}
		ok, _, err := r.DeviceMatches(context.Background(), cel.Device{Driver: driver, Attributes: d.Attributes, Capacity: d.Capacity,
			AllowMultipleAllocations: d.AllowMultipleAllocations})
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// Nodes lists the nodes that have GPUs through DRA.
func (inv *Inventory) Nodes() []string {
	out := make([]string, 0, len(inv.nodes))
	for n := range inv.nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NodeGPUs are a node's GPUs published through DRA, in index order; nil for a node with none.
func (inv *Inventory) NodeGPUs(node string) []Device { return inv.nodes[node] }

// Where says where a device is, when it is a GPU.
func (inv *Inventory) Where(id structured.DeviceID) (Place, bool) {
	p, ok := inv.where[id]
	return p, ok
}

// IsGPUClass tells whether a DeviceClass's devices count as GPUs.
func (inv *Inventory) IsGPUClass(name string) bool { return inv.gpu[name] }

// IsMIGClass tells whether a DeviceClass's devices are MIG parts of GPUs.
func (inv *Inventory) IsMIGClass(name string) bool { return inv.mig[name] }

// PartOf says which GPU a MIG device is a part of, and how large a part.
func (inv *Inventory) PartOf(id structured.DeviceID) (Part, bool) {
	p, ok := inv.parts[id]
	return p, ok
}

// Parts are a node's MIG devices.
func (inv *Inventory) Parts(node string) []Part { return inv.partsOf[node] }

// PartsOnly tells whether a node's GPU is in MIG mode with its whole not published: it
// can never be claimed whole.
func (inv *Inventory) PartsOnly(node string, index int) bool { return inv.partsOnly[node][index] }

// slicesFor are the slices an allocation on node can use: the allocator ignores the rest,
// but reads them all; given only these it is 4 times faster on 250 nodes.
func (inv *Inventory) slicesFor(node string) []*resourceapi.ResourceSlice {
	if len(inv.shared) == 0 {
		return inv.byNode[node]
	}
	return append(slices.Clip(inv.byNode[node]), inv.shared...)
}

// Matching counts, per node, the devices one request of a claim could be given: its class's
// selectors and its own hold (allocated or not). It is what a waiting pod's reason quotes.
func (inv *Inventory) Matching(class string, classSel, reqSel []resourceapi.DeviceSelector) (map[string]int, error) {
	out := map[string]int{}
	for _, s := range inv.slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			ok, err := inv.selects(classSel, s.Spec.Driver, d)
			if err != nil {
				return nil, fmt.Errorf("device class %s: %w", class, err)
			}
			if !ok {
				continue
			}
			if ok, err = inv.selects(reqSel, s.Spec.Driver, d); err != nil {
				return nil, err
			} else if ok {
				out[*s.Spec.NodeName]++
			}
		}
	}
	return out, nil
}

// naturalLess orders names with numbers compared as numbers.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		ia, ib := digits(a), digits(b)
		if ia > 0 && ib > 0 {
			na, _ := strconv.Atoi(a[:ia])
			nb, _ := strconv.Atoi(b[:ib])
			if na != nb {
				return na < nb
			}
			a, b = a[ia:], b[ib:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	return len(s) - len(strings.TrimLeft(s, "0123456789"))
}
