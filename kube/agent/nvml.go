// Package agent is Allot's per-node component (allot agent): it reads the node's GPUs
// through NVIDIA's NVML (go-nvml), learns from the kubelet's PodResources API which
// devices each pod was really given, watches the devices' health, and writes all of it to
// the Node and its pods, where the scheduler, the CLI and the dashboard read it. On
// simulated nodes the same code runs against go-nvml's mock and a PodResources server
// the simulated kubelet serves.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// nvmlError names an NVML call that failed.
func nvmlError(call string, r nvml.Return) error {
	return fmt.Errorf("nvml %s: %s", call, r.Error())
}

// ReadInventory lists the node's devices: index, UUID, model, memory, MIG mode, NUMA node
// and NVLink group. NVLink groups come from NVML's peer-to-peer status over NVLink between
// each pair (true for direct links and for an NVSwitch fabric alike), joined transitively.
func ReadInventory(lib nvml.Interface) ([]v1alpha1.GPUInfo, error) {
	count, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, nvmlError("DeviceGetCount", r)
	}
	devices := make([]nvml.Device, count)
	out := make([]v1alpha1.GPUInfo, count)
	for i := range count {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), r)
		}
		devices[i] = d
		g := v1alpha1.GPUInfo{Index: i, NUMA: -1}
		if g.UUID, r = d.GetUUID(); r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GPU %d GetUUID", i), r)
		}
		if g.Model, r = d.GetName(); r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GPU %d GetName", i), r)
		}
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GPU %d GetMemoryInfo", i), r)
		}
		g.MemoryMiB = int64(mem.Total >> 20)
		if m2, r := d.GetMemoryInfo_v2(); r == nvml.SUCCESS && m2.Reserved < m2.Total {
			g.ReservedMiB = int64(m2.Reserved >> 20)
		}
		// Devices without MIG say so with NOT_SUPPORTED: that is "off", not an error.
		if current, _, r := d.GetMigMode(); r == nvml.SUCCESS {
			g.MIG = current == nvml.DEVICE_MIG_ENABLE
		}
		if g.MIG {
			g.MIGDevices = migDevices(d)
			// Not fatal: the driver may keep the instances from an agent without the MIG
			// monitor capability (fixed-layout pools). The GPU is then reported in MIG mode
			// with no instance listed, and the scheduler takes the device plugin's counts.
			instances, err := migInventory(d, g.Model, mem.Total)
			if err != nil {
				slog.Warn("allot agent: MIG instances not read", "gpu", i, "err", err)
			}
			g.MIGInstances = instances
		}
		if numa, r := d.GetNumaNodeId(); r == nvml.SUCCESS {
			g.NUMA = numa
		}
		out[i] = g
	}
	// Union of NVLink pairs; a device without NVLink is a group of its own.
	group := make([]int, count)
	for i := range group {
		group[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for group[i] != i {
			i = group[i]
		}
		return i
	}
	for i := range count {
		for j := i + 1; j < count; j++ {
			st, r := devices[i].GetP2PStatus(devices[j], nvml.P2P_CAPS_INDEX_NVLINK)
			if r == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
				a, b := find(i), find(j)
				group[max(a, b)] = min(a, b)
			}
		}
	}
	ids := map[int]int{}
	for i := range count {
		root := find(i)
		if _, ok := ids[root]; !ok {
			ids[root] = len(ids)
		}
		out[i].NVLink = ids[root]
	}
	return out, nil
}

// Sample is one reading of the devices' load.
type Sample struct {
	// Utilization is percent, by index; UtilizationUnknown where the device did not answer.
	Utilization []int
	MemoryUsed  []int64 // MiB, by index
	// Lost are the devices NVML can no longer reach (ERROR_GPU_IS_LOST: off the bus).
	Lost []int
}

// UtilizationUnknown is the utilisation of a device that could not be read, in a Sample and
// in the allot.dev/gpu-utilization the agent writes from it ("-1"): out of every reader's
// range of percentages, so that each takes it for no reading. Read as 0 it would be a live
// report of an idle GPU, and the idle controller would stop the work on a device that only
// failed to answer. It is convert.UtilizationUnread, the value its readers know.
const UtilizationUnknown = -1

// ReadSample reads every device's utilisation and used memory. A device NVML cannot
// reach any more is listed as lost; one whose utilisation cannot be read has
// UtilizationUnknown, and one that cannot report its memory reads 0 MiB used.
func ReadSample(lib nvml.Interface, count int) Sample {
	s := Sample{Utilization: make([]int, count), MemoryUsed: make([]int64, count)}
	for i := range count {
		s.Utilization[i] = UtilizationUnknown
		d, r := lib.DeviceGetHandleByIndex(i)
		if r == nvml.ERROR_GPU_IS_LOST {
			s.Lost = append(s.Lost, i)
			continue
		}
		if r != nvml.SUCCESS {
			continue
		}
		u, r := d.GetUtilizationRates()
		if r == nvml.ERROR_GPU_IS_LOST {
			s.Lost = append(s.Lost, i)
			continue
		}
		if r == nvml.SUCCESS {
			s.Utilization[i] = int(min(u.Gpu, 100))
		}
		if used, r := memoryUsed(d); r == nvml.SUCCESS {
			s.MemoryUsed[i] = int64(used >> 20)
		}
	}
	return s
}

// memoryUsed is the memory processes hold on a device, as nvidia-smi shows it: NVML's
// second memory query, which leaves out what the driver reserves for itself; the first
// counts that as used (480 MiB on an idle H100, seen in docs/gpu-nodes.md). The first is the
// answer only where the driver has no second.
func memoryUsed(d nvml.Device) (uint64, nvml.Return) {
	if m, r := d.GetMemoryInfo_v2(); r == nvml.SUCCESS {
		return m.Used, r
	}
	m, r := d.GetMemoryInfo()
	return m.Used, r
}

// applicationXIDs are errors NVIDIA's XID catalogue puts down to the application (its
// own faults, page faults, timeouts it caused) rather than the device: the GPU stays
// healthy, as the NVIDIA device plugin also treats them.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// xidNames says what the XIDs that fail a device mean, for the reason people read.
var xidNames = map[uint64]string{
	48:  "double-bit ECC error",
	63:  "ECC page retirement or row remapping",
	64:  "ECC page retirement or row remapping failed",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// healthEvents are the NVML events that can fail a device.
const healthEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError

// xidReason is the reason a device failed with an XID.
func xidReason(xid uint64) string {
	if name, ok := xidNames[xid]; ok {
		return fmt.Sprintf("XID %d (%s)", xid, name)
	}
	return fmt.Sprintf("XID %d", xid)
}

// Failure is a device found failed.
type Failure struct {
	Index  int
	Reason string
	XID    uint64 // 0 when no XID was raised
}

// WatchHealth registers the devices for NVML's critical error events and reports each
// device that fails until ctx ends. It waits in short steps so that it stops promptly.
// Devices that cannot deliver events are not watched (the sampling still notices one that
// falls off the bus).
func WatchHealth(ctx context.Context, lib nvml.Interface, inv []v1alpha1.GPUInfo, report func(Failure)) error {
	set, r := lib.EventSetCreate()
	if r != nvml.SUCCESS {
		return nvmlError("EventSetCreate", r)
	}
	defer set.Free()
	byUUID := map[string]int{}
	watched := 0
	for _, g := range inv {
		byUUID[g.UUID] = g.Index
		d, r := lib.DeviceGetHandleByIndex(g.Index)
		if r != nvml.SUCCESS {
			continue
		}
		supported, r := d.GetSupportedEventTypes()
		if r != nvml.SUCCESS || supported&healthEvents == 0 {
			continue
		}
		if r := d.RegisterEvents(supported&healthEvents, set); r == nvml.SUCCESS {
			watched++
		}
	}
	if watched == 0 && len(inv) > 0 {
		return errors.New("nvml: no device delivers error events; health comes from sampling alone")
	}
	for ctx.Err() == nil {
		e, r := set.Wait(500)
		switch r {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			// Which device is not said: sampling finds the ones NVML cannot reach.
			continue
		default:
			// Nothing to wait on (no events registered by the driver): do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if e.EventType&healthEvents == 0 {
			continue
		}
		reason, xid := "double-bit ECC error", uint64(0)
		if e.EventType&nvml.EventTypeXidCriticalError != 0 {
			xid = e.EventData
			if applicationXIDs[e.EventData] {
				continue
			}
			reason = xidReason(e.EventData)
		}
		var indices []int
		if e.Device != nil {
			if uuid, r := e.Device.GetUUID(); r == nvml.SUCCESS {
				if i, ok := byUUID[uuid]; ok {
					indices = []int{i}
				}
			}
		}
		if indices == nil {
			// An event for no particular device (or one NVML no longer names) fails all.
			for _, g := range inv {
				indices = append(indices, g.Index)
			}
		}
		for _, i := range indices {
			report(Failure{Index: i, Reason: reason, XID: xid})
		}
	}
	return nil
}

// formatInts joins numbers for a node annotation.
func formatInts[T int | int64](v []T) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

// sortedUnhealthy orders failed devices by index for a stable annotation.
func sortedUnhealthy(m map[int]v1alpha1.UnhealthyGPU) []v1alpha1.UnhealthyGPU {
	out := make([]v1alpha1.UnhealthyGPU, 0, len(m))
	for _, u := range m {
		out = append(out, u)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

// migDevices lists the UUIDs of a MIG-enabled device's MIG devices, as the device plugin
// names them to the kubelet.
func migDevices(d nvml.Device) []string {
	n, r := d.GetMaxMigDeviceCount()
	if r != nvml.SUCCESS {
		return nil
	}
	var out []string
	for i := range n {
		mig, r := d.GetMigDeviceHandleByIndex(i)
		if r != nvml.SUCCESS {
			continue // no MIG device in this slot
		}
		if u, r := mig.GetUUID(); r == nvml.SUCCESS {
			out = append(out, u)
		}
	}
	return out
}
