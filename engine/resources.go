package engine

import (
	"fmt"
	"strconv"
)

// MilliGPU counts GPU capacity in thousandths of one device, so that fractions add up
// exactly and the engine never compares floats.
type MilliGPU int64

// OneGPU is a whole device.
const OneGPU MilliGPU = 1000

// GPUs converts to a float for reports.
func (m MilliGPU) GPUs() float64 { return float64(m) / 1000 }

func (m MilliGPU) String() string {
	return strconv.FormatFloat(m.GPUs(), 'f', -1, 64)
}

// Resource names one of the resources queues account for: NVIDIA GPUs, CPU, memory, and
// the accelerators of other kinds a snapshot names (Snapshot.Accelerators), each counted
// apart, in whole devices, as GPUs are.
type Resource int

const (
	ResourceGPU Resource = iota
	ResourceCPU
	ResourceMemory
	resourceAccel0
	resourcePool0 = resourceAccel0 + MaxAccelerators
	numResources  = resourcePool0 + MaxPools
)

// MaxAccelerators is how many kinds of accelerator besides NVIDIA's GPUs one snapshot
// may name.
const MaxAccelerators = 6

// MaxPools is how many node pools one snapshot may divide apart (Snapshot.Pools).
const MaxPools = 8

// AcceleratorResource is the resource of Snapshot.Accelerators[i].
func AcceleratorResource(i int) Resource { return resourceAccel0 + Resource(i) }

// PoolResource is the resource of the NVIDIA GPUs of node pool Snapshot.Pools[k].
func PoolResource(k int) Resource { return resourcePool0 + Resource(k) }

// Accelerator reports whether the resource is a kind of accelerator (NVIDIA GPUs
// included, a pool's apart or not): counted in thousandths of a device, divided in whole
// devices.
func (r Resource) Accelerator() bool { return r == ResourceGPU || r >= resourceAccel0 }

// NVIDIA reports whether the resource is NVIDIA's GPUs: those of the pools not divided
// apart (ResourceGPU) or those of one pool that is.
func (r Resource) NVIDIA() bool { return r == ResourceGPU || r >= resourcePool0 }

func (r Resource) String() string {
	switch r {
	case ResourceGPU:
		return "GPU"
	case ResourceCPU:
		return "CPU"
	case ResourceMemory:
		return "memory"
	}
	if r >= resourceAccel0 && r < resourcePool0 {
		return fmt.Sprintf("accelerator %d", int(r-resourceAccel0))
	}
	if r >= resourcePool0 && r < numResources {
		return fmt.Sprintf("pool %d GPU", int(r-resourcePool0))
	}
	return fmt.Sprintf("Resource(%d)", int(r))
}

// Resources is an amount of each accounted resource: GPU in MilliGPU, CPU in millicores,
// memory in bytes.
type Resources [numResources]int64

// GPU returns the GPU amount.
func (r Resources) GPU() MilliGPU { return MilliGPU(r[ResourceGPU]) }

func (r Resources) Add(o Resources) Resources {
	for i := range r {
		r[i] += o[i]
	}
	return r
}

func (r Resources) Sub(o Resources) Resources {
	for i := range r {
		r[i] -= o[i]
	}
	return r
}

// Format renders an amount of resource r for a person.
func Format(r Resource, v int64) string {
	switch {
	case r.Accelerator():
		return MilliGPU(v).String()
	case r == ResourceCPU:
		return strconv.FormatFloat(float64(v)/1000, 'f', -1, 64)
	default:
		const gi = 1 << 30
		if v%gi == 0 {
			return strconv.FormatInt(v/gi, 10) + "Gi"
		}
		return strconv.FormatFloat(float64(v)/gi, 'f', 1, 64) + "Gi"
	}
}
