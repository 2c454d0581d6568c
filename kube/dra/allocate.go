package dra

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Classes lists DeviceClasses for the allocator (structured.DeviceClassLister).
type Classes map[string]*resourceapi.DeviceClass

func (c Classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, d := range c {
		out = append(out, d)
	}
	return out, nil
}

func (c Classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if d, ok := c[name]; ok {
		return d, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// State is what is allocated in the cluster: every device some claim holds, and the shares
// and capacity consumed of devices that several claims may share.
type State struct {
	Devices sets.Set[structured.DeviceID]
	Shared  sets.Set[structured.SharedDeviceID]
	Used    structured.ConsumedCapacityCollection
}

// NewState reads what the claims hold.
func NewState(claims []*resourceapi.ResourceClaim) State {
	s := State{Devices: sets.New[structured.DeviceID](), Shared: sets.New[structured.SharedDeviceID](), Used: structured.NewConsumedCapacityCollection()}
	for _, c := range claims {
		s.Add(c.Status.Allocation)
	}
	return s
}

// Add counts an allocation as held.
func (s State) Add(a *resourceapi.AllocationResult) {
	if a == nil {
		return
	}
	for _, r := range a.Devices.Results {
		if AdminAccess(r) {
			continue // watches a device without taking it, as kube-scheduler counts it
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			s.Devices.Insert(id)
			continue
		}
		s.Shared.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		if r.ConsumedCapacity != nil {
			s.Used.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
}

func (s State) allocator() structured.AllocatedState {
	return structured.AllocatedState{AllocatedDevices: s.Devices, AllocatedSharedDeviceIDs: s.Shared, AggregatedCapacity: s.Used}
}

// ErrNoFit is an allocation that failed on this node only: the devices there do not
// satisfy the claims (now, or ever).
var ErrNoFit = errors.New("the node's devices do not satisfy the claims")

// ErrGaveUp is an allocation the allocator did not finish within AllocateTimeout: the
// claims ask more combinations of devices than it can try (several requests, each of a
// few devices, that together cannot be met make it try them all). A tenant can write such
// a claim in its own namespace; unbounded, one would hold every team's cycle.
var ErrGaveUp = errors.New("the DRA allocator gave up: the claims' requests ask more combinations of devices than it can try in time (fewer requests, or one request of several devices, are found at once)")

// AllocateTimeout bounds one run of the allocator on one node (kube-scheduler bounds its
// DRA filter the same way, at 10 s for a pod on a node). An allocation that fits is found
// in milliseconds.
var AllocateTimeout = time.Second

// Allocate allocates claims, none of them allocated yet, on node with kube-scheduler's
// structured allocator, as one: all or none. prefer are the GPUs the engine chose there
// (for a reclaim, the victim's): the allocator is first offered only those of the node's
// GPUs, so the pod gets the very devices its place was planned on, and only if that fails
// any free one. The results are in the claims' order.
func (inv *Inventory) Allocate(ctx context.Context, features structured.Features, classes Classes, held State, node *corev1.Node,
	claims []*resourceapi.ResourceClaim, prefer []structured.DeviceID) ([]resourceapi.AllocationResult, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	if len(prefer) > 0 {
		keep := sets.New(prefer...)
		narrowed := State{Devices: held.Devices.Clone(), Shared: held.Shared, Used: held.Used}
		for _, d := range inv.nodes[node.Name] {
			if d.ID != (structured.DeviceID{}) && !keep.Has(d.ID) {
				narrowed.Devices.Insert(d.ID)
			}
		}
		for _, p := range inv.partsOf[node.Name] {
			if !keep.Has(p.ID) {
				narrowed.Devices.Insert(p.ID)
			}
		}
		if out, err := inv.allocate(ctx, features, classes, narrowed, node, claims); err == nil {
			return out, nil
		} else if !errors.Is(err, ErrNoFit) {
			return nil, err
		}
	}
	return inv.allocate(ctx, features, classes, held, node, claims)
}

func (inv *Inventory) allocate(ctx context.Context, features structured.Features, classes Classes, held State, node *corev1.Node,
	claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, AllocateTimeout, ErrGaveUp)
	defer cancel()
	a, err := structured.NewAllocator(ctx, features, held.allocator(), classes, inv.slicesFor(node.Name), inv.cel)
	if err != nil {
		return nil, err
	}
	out, err := a.Allocate(ctx, node, claims)
	switch {
	case err != nil && errors.Is(context.Cause(ctx), ErrGaveUp):
		// (An answer that came just before the deadline stands.)
		return nil, fmt.Errorf("node %s: %w", node.Name, ErrGaveUp)
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return nil, fmt.Errorf("%w: %v", ErrNoFit, err)
	case err != nil:
		return nil, err
	case len(out) != len(claims):
		return nil, ErrNoFit // the allocator found no solution on this node
	}
	return out, nil
}

// Fits tells whether the claims could ever be allocated on node: with nothing else
// allocated. Allocated claims are left out; the engine counts whether GPUs are free now.
func (inv *Inventory) Fits(ctx context.Context, features structured.Features, classes Classes, node *corev1.Node,
	claims []*resourceapi.ResourceClaim) (bool, error) {
	var open []*resourceapi.ResourceClaim
	for _, c := range claims {
		if c.Status.Allocation == nil {
			open = append(open, c)
		}
	}
	empty := State{Devices: sets.New[structured.DeviceID](), Shared: sets.New[structured.SharedDeviceID](), Used: structured.NewConsumedCapacityCollection()}
	_, err := inv.allocate(ctx, features, classes, empty, node, open)
	if errors.Is(err, ErrNoFit) {
		return false, nil
	}
	return err == nil, err
}

// AdminAccess tells whether a result gives a device for monitoring only (adminAccess): it
// takes nothing from anyone, and holds nothing in the books.
func AdminAccess(r resourceapi.DeviceRequestAllocationResult) bool {
	return r.AdminAccess != nil && *r.AdminAccess
}
