package dra

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
)

// ClaimLookup finds a ResourceClaim by namespace and name (nil when there is none).
type ClaimLookup func(namespace, name string) *resourceapi.ResourceClaim

// PodClaims resolves a pod's spec.resourceClaims to their ResourceClaims, in spec order.
// A claim made from a template exists only once the resource claim controller has made it
// and named it in the pod's status; until then, and for a named claim that does not
// exist, problem says what the pod waits for. A template claim the pod does not need
// (the controller named none) is left out.
func PodClaims(p *corev1.Pod, lookup ClaimLookup) (claims []*resourceapi.ResourceClaim, problem string) {
	for i := range p.Spec.ResourceClaims {
		pc := &p.Spec.ResourceClaims[i]
		name, mustCheckOwner, err := resourceclaim.Name(p, pc)
		switch {
		case errors.Is(err, resourceclaim.ErrClaimNotFound):
			return nil, fmt.Sprintf("spec.resourceClaims %s: waiting for the resource claim controller to make its ResourceClaim from template %s",
				pc.Name, deref(pc.ResourceClaimTemplateName))
		case err != nil:
			return nil, fmt.Sprintf("spec.resourceClaims %s: %v", pc.Name, err)
		case name == nil:
			continue
		}
		c := lookup(p.Namespace, *name)
		if c == nil {
			if pc.ResourceClaimTemplateName != nil {
				return nil, fmt.Sprintf("spec.resourceClaims %s: waiting for ResourceClaim %s, made from template %s, to be seen", pc.Name, *name, *pc.ResourceClaimTemplateName)
			}
			return nil, fmt.Sprintf("spec.resourceClaims %s: ResourceClaim %s/%s does not exist", pc.Name, p.Namespace, *name)
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(p, c); err != nil {
				return nil, fmt.Sprintf("spec.resourceClaims %s: %v", pc.Name, err)
			}
		}
		if c.DeletionTimestamp != nil && !resourceclaim.IsReservedForPod(p, c) {
			return nil, fmt.Sprintf("spec.resourceClaims %s: ResourceClaim %s is being deleted", pc.Name, c.Name)
		}
		claims = append(claims, c)
	}
	return claims, ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// AllocatedNode is the node an allocated claim's devices are on: the one node its
// allocation's node selector names by metadata.name, as the allocator writes it for a
// node's own devices; "" when it names none (network devices, or not allocated).
func AllocatedNode(c *resourceapi.ResourceClaim) string {
	a := c.Status.Allocation
	if a == nil || a.NodeSelector == nil {
		return ""
	}
	for _, t := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// Claimed is what a claim counts for: whole GPUs, or a part of one GPU (a MIG device, or
// memory consumed on a GPU several claims share), in thousandths of it; or, not yet
// allocated, bytes of memory on one shared GPU.
type Claimed struct {
	GPUs   int
	Share  int
	Memory int64
}

// Count is what a claim counts for. An allocated claim counts the GPUs and MIG parts it
// holds. One not yet allocated counts what its requests ask: the count of an exact request
// of a GPU class, the first choice of a prioritized list (firstAvailable), and for a MIG
// device the smallest its selectors match. A request of a GPU class for all matching
// devices, or for several MIG devices, or a claim of whole GPUs and a MIG device at once,
// cannot be counted as the engine books a pod: problem says so.
func (inv *Inventory) Count(c *resourceapi.ResourceClaim) (n Claimed, problem string) {
	if c.Status.Allocation != nil {
		for _, h := range inv.Holds(c) {
			if h.Share == 0 {
				n.GPUs++
			} else {
				n.Share += h.Share
			}
		}
	} else {
		for _, r := range c.Spec.Devices.Requests {
			var k Claimed
			var msg string
			switch {
			case r.Exactly != nil && r.Exactly.Capacity != nil && inv.IsGPUClass(r.Exactly.DeviceClassName):
				// Memory of a GPU several claims share (consumable capacity).
				mem, ok := r.Exactly.Capacity.Requests["memory"]
				if !ok || r.Exactly.Count > 1 || len(r.Exactly.Capacity.Requests) > 1 {
					msg = fmt.Sprintf("request %s asks for capacity %v of %d device(s): Allot counts a part of one GPU by its memory (capacity.requests.memory, count 1)",
						r.Name, r.Exactly.Capacity.Requests, max(r.Exactly.Count, 1))
				}
				k.Memory = mem.Value()
			case r.Exactly != nil:
				k, msg = inv.request(r.Name, r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count, r.Exactly.Selectors)
			case len(r.FirstAvailable) > 0:
				// Any choice may be the one allocated: the largest is booked, so that the
				// allocation never holds more than the books say.
				for _, s := range r.FirstAvailable {
					c, m := inv.request(r.Name+"/"+s.Name, s.DeviceClassName, s.AllocationMode, s.Count, s.Selectors)
					if m != "" {
						msg = m
						break
					}
					if (c.GPUs > 0 && k.Share > 0) || (c.Share > 0 && k.GPUs > 0) {
						msg = fmt.Sprintf("request %s lists whole GPUs and MIG devices among its choices: Allot books a pod one way", r.Name)
						break
					}
					k.GPUs, k.Share = max(k.GPUs, c.GPUs), max(k.Share, c.Share)
				}
			}
			if msg != "" {
				return Claimed{}, fmt.Sprintf("ResourceClaim %s: %s", c.Name, msg)
			}
			n.GPUs += k.GPUs
			n.Share += k.Share
			n.Memory += k.Memory
		}
	}
	if (n.Share > 0 || n.Memory > 0) && (n.GPUs > 0 || n.Share >= 1000 || (n.Share > 0 && n.Memory > 0)) {
		return Claimed{}, fmt.Sprintf("ResourceClaim %s: whole GPUs and MIG devices, or several MIG devices, in one pod: ask for one MIG device per pod, or for whole GPUs", c.Name)
	}
	return n, ""
}

func (inv *Inventory) request(name, class string, mode resourceapi.DeviceAllocationMode, count int64, sel []resourceapi.DeviceSelector) (Claimed, string) {
	switch {
	case !inv.IsGPUClass(class) && !inv.IsMIGClass(class):
		return Claimed{}, ""
	case mode == resourceapi.DeviceAllocationModeAll:
		return Claimed{}, fmt.Sprintf("request %s asks for all devices of class %s: a queue's quota needs a count (allocationMode: ExactCount, count: N)", name, class)
	case inv.IsGPUClass(class):
		return Claimed{GPUs: int(max(count, 1))}, ""
	case count > 1:
		return Claimed{}, fmt.Sprintf("request %s asks for %d MIG devices: a pod takes one MIG device (or whole GPUs)", name, count)
	}
	if share := inv.largestPart(class, sel); share < 1000 {
		return Claimed{Share: share}, ""
	}
	return Claimed{GPUs: 1}, "" // a MIG device as large as its GPU
}

// largestPart is the share of the largest MIG device a request could be given (booked so
// that the allocation never holds more than the books say); a seventh when none matches
// (the pod then waits saying so).
func (inv *Inventory) largestPart(class string, sel []resourceapi.DeviceSelector) int {
	best := 0
	c := inv.classes[class]
	for _, s := range inv.slices {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			p, ok := inv.parts[structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)]
			if !ok || c == nil {
				continue
			}
			if ok, _ := inv.selects(c.Spec.Selectors, s.Spec.Driver, d); !ok {
				continue
			}
			if ok, _ := inv.selects(sel, s.Spec.Driver, d); ok && p.Share > best {
				best = p.Share
			}
		}
	}
	if best == 0 {
		best = 1000 / 7
	}
	return best
}

// Hold is a GPU an allocated claim holds: where it is, and the part of it the claim holds
// in thousandths (a MIG device, or memory of a GPU several claims share); 0 for all of it.
type Hold struct {
	Place
	Share int
}

// Holds lists the GPUs an allocated claim holds, whole or in part: the one reading of an
// allocation the books, the faces and the counts share. Results for monitoring only
// (adminAccess) and devices that are no GPU are left out.
func (inv *Inventory) Holds(c *resourceapi.ResourceClaim) []Hold {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []Hold
	for _, r := range c.Status.Allocation.Devices.Results {
		if AdminAccess(r) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if pl, ok := inv.where[id]; ok {
			out = append(out, Hold{pl, inv.consumedShare(pl, r)})
		} else if p, ok := inv.parts[id]; ok {
			share := p.Share
			if share >= 1000 {
				share = 0 // a MIG device as large as its GPU (7g of 7) holds it whole
			}
			out = append(out, Hold{p.Place, share})
		}
	}
	return out
}

// consumedShare is the part of a GPU a result consumes on a device several claims share,
// in thousandths rounded up (so that the books never hold less than the claim); 0 when it
// consumes all of it, or the device is not shared.
func (inv *Inventory) consumedShare(pl Place, r resourceapi.DeviceRequestAllocationResult) int {
	mem, ok := r.ConsumedCapacity["memory"]
	if r.ShareID == nil || !ok {
		return 0
	}
	total := inv.nodes[pl.Node][pl.Index].Memory
	if total <= 0 || mem.Value() >= total {
		return 0
	}
	return int((mem.Value()*1000 + total - 1) / total)
}
