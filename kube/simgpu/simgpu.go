// Package simgpu plays a node's GPU hardware for the agent where there is none: NVIDIA's
// own NVML mock (go-nvml's pkg/nvml/mock servers) given what the mock leaves to its user,
// namely how the devices are linked (NVLink through an NVSwitch, or in bridged pairs,
// or not at all), which NUMA node each sits on, how busy each is, and the error events a
// failing device raises. The agent reads it through the nvml.Interface it reads a real
// node's library through.
package simgpu

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Links says how a machine's devices reach each other over NVLink.
type Links int

const (
	NVSwitch Links = iota // every device with every other, as on DGX/HGX boards
	Pairs                 // bridged pairs: 0-1, 2-3, … as on PCIe servers with NVLink bridges
	NoLinks               // PCIe only
)

// Spec describes one simulated machine.
type Spec struct {
	Model     string // the name NVML reports, e.g. "NVIDIA A100-SXM4-80GB"
	MemoryMiB int64
	Count     int
	Links     Links
	// Sockets splits the devices evenly over this many NUMA nodes, in index order (0 or 1:
	// one NUMA node).
	Sockets int
	// UUIDs names the devices; a device without one keeps the mock's random UUID.
	UUIDs []string
	// ReservedMiB is what the driver keeps of each device for itself: counted as used by
	// NVML's first memory query, reported apart by the second (real drivers: 480 MiB of an
	// H100, 616 MiB of an H200).
	ReservedMiB int64
}

// Machine is a simulated node's GPUs behind NVML.
type Machine struct {
	*server.Server

	mu      sync.Mutex
	util    []uint32
	memUsed []uint64
	lost    []bool
	mode    []nvml.ComputeMode
	events  chan nvml.EventData
	// migProcs are the processes running on MIG devices, by UUID.
	migProcs map[string][]uint32
}

// DGXA100 is NVIDIA's DGX A100 mock (eight A100-SXM4-40GB), linked by NVSwitch and split
// over two sockets.
func DGXA100() *Machine {
	return wire(dgxa100.New(), Spec{Links: NVSwitch, Sockets: 2})
}

// New builds a machine from the mock's A100 definition, renamed and resized to spec.
func New(spec Spec) *Machine {
	cfg := gpus.A100_SXM4_80GB
	if spec.Model != "" {
		cfg.Name = spec.Model
	}
	if spec.MemoryMiB > 0 {
		cfg.MemoryMB = uint64(spec.MemoryMiB)
	}
	s, _ := server.New(server.WithGPUs(gpus.Multiple(spec.Count, cfg)...),
		server.WithDriverVersion("550.54.15"), server.WithNVMLVersion("12.550.54.15"), server.WithCUDADriverVersion(12040))
	return wire(s, spec)
}

func wire(s *server.Server, spec Spec) *Machine {
	n := len(s.Devices)
	m := &Machine{Server: s, util: make([]uint32, n), memUsed: make([]uint64, n), lost: make([]bool, n),
		mode: make([]nvml.ComputeMode, n), events: make(chan nvml.EventData, 64)}
	sockets := max(spec.Sockets, 1)
	for i, dev := range s.Devices {
		d := dev.(*server.Device)
		if i < len(spec.UUIDs) && spec.UUIDs[i] != "" {
			d.UUID = spec.UUIDs[i]
		}
		i := i
		numa := i * sockets / n
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return numa, nvml.SUCCESS }
		// MIG devices, which go-nvml's mock server does not enumerate (mig.go).
		m.wireMIG(d)
		// Compute mode, as nvidia-smi -c sets it (the agent makes a GPU shared through
		// MPS exclusive-process).
		d.SetComputeModeFunc = func(mode nvml.ComputeMode) nvml.Return {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.mode[i] = mode
			return nvml.SUCCESS
		}
		d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.mode[i], nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(other nvml.Device, caps nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if caps != nvml.P2P_CAPS_INDEX_NVLINK {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS // PCIe peer access works everywhere here
			}
			j := other.(*server.Device).Index
			linked := spec.Links == NVSwitch || (spec.Links == Pairs && i/2 == j/2)
			if linked && i != j {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.lost[i] {
				return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
			}
			return nvml.Utilization{Gpu: m.util[i], Memory: m.util[i]}, nvml.SUCCESS
		}
		total := d.MemoryInfo.Total
		reserved := min(uint64(max(spec.ReservedMiB, 0))<<20, total)
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.lost[i] {
				return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
			}
			used := min(m.memUsed[i]+reserved, total)
			return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
		}
		// The second query, as a driver of 2026 answers it: the first one's use less what
		// the driver reserves, which it reports apart.
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			v1, r := d.GetMemoryInfoFunc()
			return nvml.Memory_v2{Total: v1.Total, Reserved: reserved, Used: v1.Used - reserved, Free: v1.Free}, r
		}
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		set := &nvmlmock.EventSet{}
		set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		set.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-m.events:
				return e, nvml.SUCCESS
			case <-timeAfterMs(timeoutMs):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		}
		return set, nvml.SUCCESS
	}
	return m
}

// SetLoad sets how busy device i is and how much of its memory is in use.
func (m *Machine) SetLoad(i int, utilization uint32, memoryUsedMiB uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.util[i], m.memUsed[i] = min(utilization, 100), memoryUsedMiB<<20
}

// RaiseXID delivers an XID error event for device i, as the driver does. XID 79 (fallen
// off the bus) also leaves the device unreachable, as it does on real hardware.
func (m *Machine) RaiseXID(i int, xid uint64) {
	if xid == 79 {
		m.mu.Lock()
		m.lost[i] = true
		m.mu.Unlock()
	}
	m.events <- nvml.EventData{Device: m.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

// UUID is device i's UUID.
func (m *Machine) UUID(i int) string { return m.Devices[i].(*server.Device).UUID }

func timeAfterMs(ms uint32) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }
