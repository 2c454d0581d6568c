package engine

import (
	"cmp"
	"slices"

	"github.com/allot-dev/allot/mig"
)

// What a pod holds of each of its GPUs, and what is booked on each device, in exact units:
// bytes of memory and thousandths of compute. A device takes a slice only where both fit
// (and the node's cap on sharers allows one more), so three 8Gi slices fill a 24Gi GPU
// exactly; shares in thousandths of a GPU are what queues count, never what decides a fit.

// part is what a pod holds of each of its devices: the whole device (the zero part), or a
// slice of it: bytes of memory, thousandths of compute, and milli, the share it counts
// against its queue (the larger of the two as parts of the device).
type part struct {
	mem     int64
	compute MilliGPU
	milli   MilliGPU
	// mig is the profile of a MIG instance on each device, at[i] the first memory slice
	// of the instance on the i-th of the pod's devices; milli is then the profile's share.
	mig *mig.Profile
	at  []int
	// limit is the memory a dynamic fraction may use on each device (bytes; 0: mem);
	// over is what a bound one was measured to use beyond mem, its burst.
	limit, over int64
}

// wholePart is the part of a pod that holds whole devices.
var wholePart = part{}

func (p part) shared() bool { return p.milli > 0 }

// same tells whether two parts hold the same of each device, MIG instances included.
func (p part) same(o part) bool {
	// A burst dropped is a pod started afresh (on Kubernetes, evicted and made again).
	return p.mem == o.mem && p.compute == o.compute && p.milli == o.milli && p.mig == o.mig && slices.Equal(p.at, o.at) &&
		p.limit == o.limit && p.over == o.over
}

// on is the booking the part makes on a device: all of it for a whole device.
func (p part) on(dev *GPU) devBook { return p.onAt(dev, 0) }

// onAt is the booking the part makes on the i-th of the pod's devices (which differ only
// for MIG instances, placed at their own slices on each).
func (p part) onAt(dev *GPU, i int) devBook {
	switch {
	case p.mig != nil:
		return devBook{slices: p.mig.Mask(p.at[i])}
	case !p.shared():
		b := devBook{mem: dev.Memory, compute: OneGPU}
		if dev.MIG != nil && dev.MIG.Model != nil {
			b.slices = dev.MIG.Model.Full() // held whole: no instance may be made over it
		}
		return b
	}
	return devBook{mem: p.mem, compute: p.compute, sharers: 1, burst: p.over}
}

// devBook is what is booked on one device.
type devBook struct {
	mem     int64    // bytes of memory
	compute MilliGPU // thousandths of its compute
	sharers int32    // pods holding a slice of it
	// slices are the memory slices of a device in MIG mode its pods' instances hold.
	slices mig.Mask
	// burst is the memory its pods use beyond their requests (measured), which a new
	// request must find free too, or take back (reclaimBursts).
	burst int64
}

func (b devBook) add(o devBook, sign int) devBook {
	b.mem += int64(sign) * o.mem
	b.compute += MilliGPU(sign) * o.compute
	b.sharers += int32(sign) * o.sharers
	b.burst += int64(sign) * o.burst
	if sign > 0 {
		b.slices |= o.slices
	} else {
		b.slices &^= o.slices
	}
	return b
}

// usedOf is the share of a device its bookings take: the larger of its booked memory (as
// a share of the device, rounded up) and its booked compute. A device in MIG mode counts
// as taken: no whole or sliced pod may have it, so it is never free for one (its
// instances are booked by their slices).
func usedOf(dev *GPU, b devBook) MilliGPU {
	if dev.MIG != nil {
		return OneGPU
	}
	return max(ceilShare(b.mem, dev.Memory), b.compute)
}

// ceilShare is bytes of a device's memory as a share of it, rounded up so that a share
// never promises more memory than the device has.
func ceilShare(mem, device int64) MilliGPU {
	if mem <= 0 || device <= 0 {
		return 0
	}
	return MilliGPU((mem*int64(OneGPU) + device - 1) / device)
}

// partOn is the slice a shared request takes of a device of that size: a fraction takes
// its share of memory, and of compute unless it names its compute apart; compute alone takes memory in proportion (rounded
// down, so that slices sized to divide a device fill it exactly); memory alone books no
// compute, as in HAMi: compute is guaranteed only to pods that ask for it (a memory
// slice's SM cap, in proportion, is a limit, not a booking). ok is false when the device
// is too small for the memory asked. On a device whose memory is not known (a DRA driver
// that publishes none; device-plugin nodes without a size take no slices, Node.NoFractions)
// a fraction books its compute only.
func partOn(r PodRequest, dev *GPU) (p part, ok bool) {
	switch {
	case r.GPUFraction > 0:
		p.compute = cmp.Or(r.GPUCompute, r.GPUFraction)
		p.mem = dev.Memory * int64(r.GPUFraction) / int64(OneGPU)
	default:
		if r.GPUMemory > dev.Memory {
			return wholePart, false
		}
		p.mem, p.compute = r.GPUMemory, r.GPUCompute
		if p.mem == 0 {
			p.mem = dev.Memory * int64(r.GPUCompute) / int64(OneGPU)
		}
	}
	// A share below a whole GPU, also for a slice of all of one (compute 100%, memory to the
	// last byte): the share written on the pod tells a slice from whole GPUs (1000).
	p.milli = min(max(ceilShare(p.mem, dev.Memory), p.compute, 1), OneGPU-1)
	if l := max(r.GPUMemoryLimit, dev.Memory*int64(r.GPUFractionLimit)/int64(OneGPU)); l > p.mem {
		p.limit = min(l, dev.Memory)
	}
	return p, true
}

// heldPart is the part a bound pod holds, from its binding: a binding that names a share
// but neither memory nor compute (written before they were booked apart) holds its share
// of both, on the first of its devices.
func heldPart(b *Binding, n *nodeState) part {
	if b.MIG != "" {
		return heldMIG(b, n)
	}
	if b.Share <= 0 {
		return wholePart
	}
	p := part{mem: b.Memory, compute: b.Compute, milli: b.Share, limit: b.MemoryLimit}
	if b.MemoryUsed > b.Memory && b.Memory > 0 && len(b.GPUs) == 1 {
		// Measured past its request: the burst is memory no request may count on.
		p.over = b.MemoryUsed - b.Memory
	}
	if p.mem == 0 && p.compute == 0 {
		p.compute = b.Share
		if len(b.GPUs) > 0 {
			p.mem = n.n.GPUs[b.GPUs[0]].Memory * int64(b.Share) / int64(OneGPU)
		}
	}
	return p
}

// fitsPart reports whether device g of node n, as booked in books, has room for the part:
// its memory beside what is booked and what bursting pods use beyond their bookings.
func fitsPart(n *nodeState, g int, p part, books []devBook) bool {
	b, dev := books[g], &n.n.GPUs[g]
	return b.mem+b.burst+p.mem+p.over <= dev.Memory && b.compute+p.compute <= OneGPU &&
		(n.n.MaxSharers <= 0 || int(b.sharers) < n.n.MaxSharers)
}

// binding is what the plan reports of a pod's place.
func (p *podState) binding() Binding {
	b := Binding{Node: p.node.n.ID, GPUs: p.gpus}
	switch {
	case p.share.mig != nil:
		b.Share, b.MIG, b.MIGStarts = p.share.milli, p.share.mig.Name, p.share.at
	case p.share.shared():
		// No MemoryUsed: a pod placed (or moved) is a new one, measured afresh.
		b.Share, b.Memory, b.Compute, b.MemoryLimit = p.share.milli, p.share.mem, p.share.compute, p.share.limit
	}
	return b
}
