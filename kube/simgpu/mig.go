package simgpu

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// MIG on the mock. go-nvml's mock server keeps real GPU and compute instances (created at
// NVML's placements, from the GPU's own profile tables), but hands out no MIG device
// handles, and destroys a GPU instance that still has compute instances where NVML
// refuses (ERROR_IN_USE). wireMIG fills both in: every compute instance is a MIG device,
// as on a real GPU, named MIG-<GPU UUID without its prefix>-<GPU instance id>-<compute
// instance id>, running the processes SetMIGProcesses gives it.

func (m *Machine) wireMIG(d *server.Device) {
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(slot int) (nvml.Device, nvml.Return) {
		if mode, _, _ := d.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE || slot < 0 || slot >= 7 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		devices := m.migDevices(d)
		if slot >= len(devices) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return devices[slot], nvml.SUCCESS
	}
	refuseInUse := func(gi nvml.GpuInstance) {
		mgi, ok := gi.(*server.GpuInstance)
		if !ok {
			return
		}
		destroy := mgi.DestroyFunc
		mgi.DestroyFunc = func() nvml.Return {
			mgi.RLock()
			left := len(mgi.ComputeInstances)
			mgi.RUnlock()
			if left > 0 {
				return nvml.ERROR_IN_USE
			}
			return destroy()
		}
	}
	create := d.CreateGpuInstanceFunc
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		gi, r := create(info)
		if r == nvml.SUCCESS {
			refuseInUse(gi)
		}
		return gi, r
	}
	createAt := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, p *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		gi, r := createAt(info, p)
		if r == nvml.SUCCESS {
			refuseInUse(gi)
		}
		return gi, r
	}
}

// MIGUUID is the UUID of the MIG device of a compute instance of a GPU instance of d.
func MIGUUID(d *server.Device, gi, ci uint32) string {
	return fmt.Sprintf("MIG-%s-%d-%d", strings.TrimPrefix(d.UUID, "GPU-"), gi, ci)
}

// SetMIGProcesses says which processes run on a MIG device (by UUID): NVML lists them,
// and an instance with processes is not destroyed.
func (m *Machine) SetMIGProcesses(uuid string, pids []uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.migProcs == nil {
		m.migProcs = map[string][]uint32{}
	}
	m.migProcs[uuid] = pids
}

// migDevices are d's compute instances as MIG device handles, by GPU then compute
// instance id.
func (m *Machine) migDevices(d *server.Device) []nvml.Device {
	var out []nvml.Device
	for _, gi := range GPUInstances(d) {
		for _, ci := range ComputeInstances(gi) {
			giID, ciID := gi.Info.Id, ci.Info.Id
			uuid := MIGUUID(d, giID, ciID)
			out = append(out, &nvmlmock.Device{
				GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return int(giID), nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return int(ciID), nvml.SUCCESS },
				GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
					m.mu.Lock()
					defer m.mu.Unlock()
					var ps []nvml.ProcessInfo
					for _, pid := range m.migProcs[uuid] {
						ps = append(ps, nvml.ProcessInfo{Pid: pid, GpuInstanceId: giID, ComputeInstanceId: ciID})
					}
					return ps, nvml.SUCCESS
				},
			})
		}
	}
	return out
}

// GPUInstances are d's GPU instances, by id.
func GPUInstances(d *server.Device) []*server.GpuInstance {
	d.RLock()
	defer d.RUnlock()
	var out []*server.GpuInstance
	for gi := range d.GpuInstances {
		out = append(out, gi)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Info.Id < out[b].Info.Id })
	return out
}

// ComputeInstances are gi's compute instances, by id.
func ComputeInstances(gi *server.GpuInstance) []*server.ComputeInstance {
	gi.RLock()
	defer gi.RUnlock()
	var out []*server.ComputeInstance
	for ci := range gi.ComputeInstances {
		out = append(out, ci)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Info.Id < out[b].Info.Id })
	return out
}
