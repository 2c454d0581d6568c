package agent

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/mig"
)

// MIG instances as the agent makes them: a GPU instance at a placement the scheduler chose,
// and one compute instance taking the whole of it, which NVML then names as a MIG device
// (the unit the device plugin hands to a pod). What may be placed where is the mig
// package's geometry; NVML is asked only to do what that geometry allows, so that a
// refusal says which starts a profile has rather than NVML's bare "invalid argument".

// MIGPlacement is one MIG instance asked for on a GPU: a profile of the GPU's model as the
// mig package names it ("3g.40gb") and the memory slice it starts at.
type MIGPlacement struct {
	Profile string
	Start   int
}

func (p MIGPlacement) String() string {
	return fmt.Sprintf("%s at memory slice %d", p.Profile, p.Start)
}

// migDevice is a MIG device: one compute instance of one GPU instance, as NVML's device
// handles for MIG name it.
type migDevice struct {
	handle nvml.Device
	gi, ci int // NVML's GPU and compute instance ids
	uuid   string
}

// gpuInstance is a GPU instance NVML reports on a device.
type gpuInstance struct {
	gi      nvml.GpuInstance
	id      int
	profile *mig.Profile
	start   int
	// devices are its compute instances' MIG devices, lowest compute instance first.
	devices []migDevice
}

func (g *gpuInstance) placed() mig.Placed { return mig.Placed{Profile: g.profile, Start: g.start} }

// uuid is the instance's MIG device: the first compute instance's where someone split it
// into several (the agent never does), none before it has a compute instance.
func (g *gpuInstance) uuid() string {
	if len(g.devices) == 0 {
		return ""
	}
	return g.devices[0].uuid
}

func (g *gpuInstance) String() string {
	s := fmt.Sprintf("%s at memory slice %d", g.profile.Name, g.start)
	if u := g.uuid(); u != "" {
		s += " (" + u + ")"
	}
	return s
}

// pids lists the compute processes NVML sees on the instance's MIG devices. NVML answers
// per MIG device only through the MIG device's own handle; the GPU's handle gives an
// aggregate, and that only to a privileged caller.
func (g *gpuInstance) pids() ([]uint32, error) {
	var out []uint32
	for _, d := range g.devices {
		procs, r := d.handle.GetComputeRunningProcesses()
		if r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetComputeRunningProcesses of %s", d.uuid), r)
		}
		for _, p := range procs {
			out = append(out, p.Pid)
		}
	}
	return out, nil
}

// memorySlices is how many of the model's memory slices an NVML GPU instance profile
// takes. NVML's profile info gives the memory, not the slices; the memory is a little
// under the slices' share of the total (4864 MiB for one of a 40 GB A100's eight), so the
// nearest whole number of slices is the profile's.
func memorySlices(info nvml.GpuInstanceProfileInfo, totalMiB uint64, model *mig.Model) int {
	if totalMiB == 0 {
		return 0
	}
	n := uint64(model.MemorySlices)
	return int((2*info.MemorySizeMB*n + totalMiB) / (2 * totalMiB))
}

// profileOf names an NVML GPU instance profile in the model's terms: the model's profile
// of the same compute and memory slices. An instance of a geometry the model lacks (or of
// a GPU the mig package does not know) is still listed, so its slices count as taken,
// under a name made of NVML's own numbers that matches none of the model's profiles.
func profileOf(model *mig.Model, info nvml.GpuInstanceProfileInfo, totalMiB uint64, placement nvml.GpuInstancePlacement) *mig.Profile {
	compute := int(info.SliceCount)
	slices := int(placement.Size)
	if model != nil {
		slices = memorySlices(info, totalMiB, model)
		for i := range model.Profiles {
			if p := &model.Profiles[i]; p.Compute == compute && p.Slices == slices {
				return p
			}
		}
	}
	return &mig.Profile{Name: fmt.Sprintf("%dg.%dgb", compute, (info.MemorySizeMB+512)/1024), Compute: compute, Slices: slices}
}

// totalMiB is the device's memory, which NVML's profile memory is a part of.
func totalMiB(dev nvml.Device) (uint64, error) {
	mem, r := dev.GetMemoryInfo()
	if r != nvml.SUCCESS {
		return 0, nvmlError("GetMemoryInfo", r)
	}
	return mem.Total >> 20, nil
}

// skipProfile says an NVML profile id is one this device does not have: NVML answers
// NOT_SUPPORTED for those, INVALID_ARGUMENT for ids an older driver does not know.
func skipProfile(r nvml.Return) bool {
	return r == nvml.ERROR_NOT_SUPPORTED || r == nvml.ERROR_INVALID_ARGUMENT || r == nvml.ERROR_NOT_FOUND
}

// readInstances lists a MIG-enabled device's GPU instances, by start, with their MIG
// devices.
func readInstances(dev nvml.Device, model *mig.Model) ([]gpuInstance, error) {
	total, err := totalMiB(dev)
	if err != nil {
		return nil, err
	}
	var out []gpuInstance
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, r := dev.GetGpuInstanceProfileInfo(id)
		if skipProfile(r) {
			continue
		}
		if r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", id), r)
		}
		gis, r := dev.GetGpuInstances(&info)
		if skipProfile(r) {
			continue
		}
		if r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetGpuInstances of profile %d", id), r)
		}
		for _, gi := range gis {
			gInfo, r := gi.GetInfo()
			if r != nvml.SUCCESS {
				return nil, nvmlError(fmt.Sprintf("GetInfo of a GPU instance of profile %d", id), r)
			}
			out = append(out, gpuInstance{gi: gi, id: int(gInfo.Id), profile: profileOf(model, info, total, gInfo.Placement), start: int(gInfo.Placement.Start)})
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	devices, err := readMIGDevices(dev)
	if err != nil {
		return nil, err
	}
	for i := range out {
		for _, d := range devices {
			if d.gi == out[i].id {
				out[i].devices = append(out[i].devices, d)
			}
		}
		sort.Slice(out[i].devices, func(a, b int) bool { return out[i].devices[a].ci < out[i].devices[b].ci })
	}
	sort.Slice(out, func(a, b int) bool { return out[a].start < out[b].start })
	return out, nil
}

// readMIGDevices lists a device's MIG devices with the GPU and compute instance each is.
// NVML numbers them in slots of its own, some empty; the ids tie them to the instances.
func readMIGDevices(dev nvml.Device) ([]migDevice, error) {
	n, r := dev.GetMaxMigDeviceCount()
	if r != nvml.SUCCESS {
		return nil, nvmlError("GetMaxMigDeviceCount", r)
	}
	var out []migDevice
	for slot := range n {
		h, r := dev.GetMigDeviceHandleByIndex(slot)
		if r == nvml.ERROR_NOT_FOUND || r == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetMigDeviceHandleByIndex(%d)", slot), r)
		}
		d := migDevice{handle: h}
		if d.gi, r = h.GetGpuInstanceId(); r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetGpuInstanceId of MIG device %d", slot), r)
		}
		if d.ci, r = h.GetComputeInstanceId(); r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetComputeInstanceId of MIG device %d", slot), r)
		}
		if d.uuid, r = h.GetUUID(); r != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GetUUID of MIG device %d", slot), r)
		}
		out = append(out, d)
	}
	return out, nil
}

// migInventory lists a MIG-enabled device's instances for the node's inventory. The
// profile names are those of the mig package's model of the product (by name and memory).
func migInventory(dev nvml.Device, product string, memory uint64) ([]v1alpha1.MIGInstance, error) {
	model, _ := mig.ForProduct(product, int64(memory))
	instances, err := readInstances(dev, model)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.MIGInstance
	for i := range instances {
		g := &instances[i]
		pids, err := g.pids()
		// An instance whose processes NVML cannot list is counted as in use: offered as
		// free, a pod could be sent to it and then find it taken.
		out = append(out, v1alpha1.MIGInstance{Profile: g.profile.Name, Start: g.start, UUID: g.uuid(), InUse: err != nil || len(pids) > 0})
	}
	return out, nil
}

// lookupProfile finds a profile the agent can create on the model.
func lookupProfile(model *mig.Model, name string) (*mig.Profile, error) {
	if model == nil {
		return nil, errors.New("no MIG geometry for this GPU: the mig package knows " + strings.Join(mig.Families(), ", "))
	}
	// The media-extension profiles share their base's geometry, and NVML's profile of that
	// geometry is the base one: creating it would give the pod no media engines.
	if strings.HasSuffix(name, "+me") || strings.HasSuffix(name, ".me") {
		return nil, fmt.Errorf("MIG profile %q: media-extension profiles are not created by the agent; %s offers %s", name, model.Name, strings.Join(model.Names(), ", "))
	}
	p, ok := model.Profile(name)
	if !ok {
		return nil, fmt.Errorf("MIG profile %q is not one of %s's: %s", name, model.Name, strings.Join(model.Names(), ", "))
	}
	return p, nil
}

// nvmlProfile finds the NVML GPU instance profile of a profile's geometry. Of several (a
// base and its media-extension variants), the lowest id is the base one.
func nvmlProfile(dev nvml.Device, model *mig.Model, p *mig.Profile) (nvml.GpuInstanceProfileInfo, error) {
	total, err := totalMiB(dev)
	if err != nil {
		return nvml.GpuInstanceProfileInfo{}, err
	}
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, r := dev.GetGpuInstanceProfileInfo(id)
		if skipProfile(r) {
			continue
		}
		if r != nvml.SUCCESS {
			return nvml.GpuInstanceProfileInfo{}, nvmlError(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", id), r)
		}
		if int(info.SliceCount) == p.Compute && memorySlices(info, total, model) == p.Slices {
			return info, nil
		}
	}
	return nvml.GpuInstanceProfileInfo{}, fmt.Errorf("MIG profile %s: NVML offers no GPU instance profile of %d compute and %d memory slices on this GPU (is it a %s?)", p.Name, p.Compute, p.Slices, model.Name)
}

// eachComputeProfile calls f with each compute instance profile NVML offers in a GPU
// instance, lowest id first, until f says stop.
func eachComputeProfile(gi nvml.GpuInstance, f func(nvml.ComputeInstanceProfileInfo) (stop bool, err error)) error {
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, r := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if skipProfile(r) {
			continue
		}
		if r != nvml.SUCCESS {
			return nvmlError(fmt.Sprintf("GetComputeInstanceProfileInfo(%d)", id), r)
		}
		if stop, err := f(info); stop || err != nil {
			return err
		}
	}
	return nil
}

// createComputeInstance makes the compute instance that takes all of a GPU instance's
// compute slices, and returns its id.
func createComputeInstance(gi nvml.GpuInstance, compute int) (int, error) {
	var ci nvml.ComputeInstance
	err := eachComputeProfile(gi, func(info nvml.ComputeInstanceProfileInfo) (bool, error) {
		if int(info.SliceCount) != compute {
			return false, nil
		}
		var r nvml.Return
		if ci, r = gi.CreateComputeInstance(&info); r != nvml.SUCCESS {
			return true, nvmlError(fmt.Sprintf("CreateComputeInstance of profile %d", info.Id), r)
		}
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	if ci == nil {
		return 0, fmt.Errorf("NVML offers no compute instance profile of %d compute slices in the GPU instance", compute)
	}
	info, r := ci.GetInfo()
	if r != nvml.SUCCESS {
		return 0, nvmlError("GetInfo of the new compute instance", r)
	}
	return int(info.Id), nil
}

// destroyInstance destroys a GPU instance's compute instances, then the GPU instance:
// NVML refuses to destroy a GPU instance that still has compute instances.
func destroyInstance(g *gpuInstance) error {
	err := eachComputeProfile(g.gi, func(info nvml.ComputeInstanceProfileInfo) (bool, error) {
		cis, r := g.gi.GetComputeInstances(&info)
		if skipProfile(r) {
			return false, nil
		}
		if r != nvml.SUCCESS {
			return true, nvmlError(fmt.Sprintf("GetComputeInstances of profile %d", info.Id), r)
		}
		for _, ci := range cis {
			if r := ci.Destroy(); r != nvml.SUCCESS {
				return true, nvmlError("Destroy of a compute instance of "+g.String(), r)
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if r := g.gi.Destroy(); r != nvml.SUCCESS {
		return nvmlError("Destroy of the GPU instance "+g.String(), r)
	}
	return nil
}

// migUUID finds the MIG device of a GPU and compute instance.
func migUUID(dev nvml.Device, gi, ci int) (string, error) {
	devices, err := readMIGDevices(dev)
	if err != nil {
		return "", err
	}
	for _, d := range devices {
		if d.gi == gi && d.ci == ci {
			return d.uuid, nil
		}
	}
	return "", fmt.Errorf("NVML lists no MIG device for GPU instance %d, compute instance %d", gi, ci)
}

// requireMIG refuses a device whose MIG mode is off (or only pending, before a GPU reset):
// NVML's own answer there is a bare "not supported".
func requireMIG(dev nvml.Device) error {
	current, _, r := dev.GetMigMode()
	if r != nvml.SUCCESS {
		return nvmlError("GetMigMode", r)
	}
	if current != nvml.DEVICE_MIG_ENABLE {
		return errors.New("MIG mode is off on this GPU: MIG instances exist only on a GPU in MIG mode (nvidia-smi -mig 1, then a GPU reset)")
	}
	return nil
}

func layoutOf(instances []gpuInstance) mig.Layout {
	l := make(mig.Layout, len(instances))
	for i := range instances {
		l[i] = instances[i].placed()
	}
	return l
}

// CreateMIGInstance creates an instance of the profile at the start on a MIG-enabled
// device: the GPU instance at that placement and a compute instance taking all of it. It
// refuses, without asking NVML to create anything, a profile the model lacks, a start the
// profile does not allow, and a placement overlapping an instance already there. It
// returns the new MIG device's UUID; on a failure after the GPU instance was made, the GPU
// instance is destroyed again, so the layout is as it was.
func CreateMIGInstance(dev nvml.Device, model *mig.Model, profile string, start int) (string, error) {
	p, err := lookupProfile(model, profile)
	if err != nil {
		return "", err
	}
	if err := requireMIG(dev); err != nil {
		return "", err
	}
	instances, err := readInstances(dev, model)
	if err != nil {
		return "", err
	}
	if err := model.Valid(layoutOf(instances), p, start); err != nil {
		if len(instances) > 0 {
			return "", fmt.Errorf("%w; on it: %s", err, describe(instances))
		}
		return "", err
	}
	info, err := nvmlProfile(dev, model, p)
	if err != nil {
		return "", err
	}
	placement := nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.Slices)}
	gi, r := dev.CreateGpuInstanceWithPlacement(&info, &placement)
	if r != nvml.SUCCESS {
		return "", nvmlError(fmt.Sprintf("CreateGpuInstanceWithPlacement of %s at memory slice %d", p.Name, start), r)
	}
	uuid, err := finishInstance(dev, gi, p.Compute)
	if err != nil {
		if err2 := destroyInstance(&gpuInstance{gi: gi, profile: p, start: start}); err2 != nil {
			return "", fmt.Errorf("%s at memory slice %d: %w; the GPU instance made for it is left: %w", p.Name, start, err, err2)
		}
		return "", fmt.Errorf("%s at memory slice %d: %w", p.Name, start, err)
	}
	return uuid, nil
}

// finishInstance gives a new GPU instance its compute instance and names its MIG device.
func finishInstance(dev nvml.Device, gi nvml.GpuInstance, compute int) (string, error) {
	gInfo, r := gi.GetInfo()
	if r != nvml.SUCCESS {
		return "", nvmlError("GetInfo of the new GPU instance", r)
	}
	ci, err := createComputeInstance(gi, compute)
	if err != nil {
		return "", err
	}
	return migUUID(dev, int(gInfo.Id), ci)
}

func describe(instances []gpuInstance) string {
	parts := make([]string, len(instances))
	for i := range instances {
		parts[i] = instances[i].String()
	}
	return strings.Join(parts, ", ")
}

// DestroyMIGInstance destroys the instance starting at the memory slice, compute instances
// first. It refuses while NVML lists compute processes on the instance, naming the MIG
// device and the processes, and when it cannot tell whether any run.
func DestroyMIGInstance(dev nvml.Device, start int) error {
	if err := requireMIG(dev); err != nil {
		return err
	}
	// The model only names the instances in messages; a GPU the mig package does not know
	// still has its instances destroyed.
	var model *mig.Model
	if name, r := dev.GetName(); r == nvml.SUCCESS {
		if mem, r := dev.GetMemoryInfo(); r == nvml.SUCCESS {
			model, _ = mig.ForProduct(name, int64(mem.Total))
		}
	}
	instances, err := readInstances(dev, model)
	if err != nil {
		return err
	}
	for i := range instances {
		g := &instances[i]
		if g.start != start {
			continue
		}
		if err := idle(g); err != nil {
			return err
		}
		return destroyInstance(g)
	}
	starts := make([]int, len(instances))
	for i := range instances {
		starts[i] = instances[i].start
	}
	return fmt.Errorf("no MIG instance starts at memory slice %d: instances start at %v", start, starts)
}

// idle says why an instance may not be destroyed: processes on it, or none known.
func idle(g *gpuInstance) error {
	pids, err := g.pids()
	if err != nil {
		return fmt.Errorf("%s: cannot tell whether processes run on it, so it is kept: %w", g, err)
	}
	if len(pids) > 0 {
		return fmt.Errorf("%s runs processes %s: it is not destroyed while they run", g, formatPIDs(pids))
	}
	return nil
}

func formatPIDs(pids []uint32) string {
	parts := make([]string, len(pids))
	for i, p := range pids {
		parts[i] = fmt.Sprint(p)
	}
	return "(PID " + strings.Join(parts, ", ") + ")"
}

// ReconcileMIG brings one MIG-enabled GPU to the instances the scheduler asked for.
// Instances asked for and there are kept; those missing are created; those there and not
// asked for are destroyed only when they are idle and overlap an instance asked for. An
// idle instance in nobody's way stays, so that a later pod of its profile has it without
// the GPU being cut anew. An instance with processes is never destroyed: one in the way is
// an error naming it and what it is in the way of, found before anything is changed. It
// returns each asked-for placement's MIG device UUID.
func ReconcileMIG(dev nvml.Device, model *mig.Model, want []MIGPlacement) (map[MIGPlacement]string, error) {
	// What is asked must be a layout of its own: known profiles at allowed starts, apart.
	profiles := make([]*mig.Profile, len(want))
	var wanted mig.Layout
	for i, w := range want {
		p, err := lookupProfile(model, w.Profile)
		if err != nil {
			return nil, err
		}
		if err := model.Valid(wanted, p, w.Start); err != nil {
			return nil, fmt.Errorf("the layout asked for is not one %s allows: %w", model.Name, err)
		}
		profiles[i] = p
		wanted = append(wanted, mig.Placed{Profile: p, Start: w.Start})
	}
	if err := requireMIG(dev); err != nil {
		return nil, err
	}
	instances, err := readInstances(dev, model)
	if err != nil {
		return nil, err
	}
	kept := make([]*gpuInstance, len(want))
	var remove []*gpuInstance
	var blocked []error
	for i := range instances {
		g := &instances[i]
		if j := wantedIndex(want, profiles, g); j >= 0 {
			kept[j] = g
			continue
		}
		mask := g.profile.Mask(g.start)
		if mask&wanted.Mask() == 0 {
			continue
		}
		if err := idle(g); err != nil {
			blocked = append(blocked, fmt.Errorf("%w; it is in the way of %s", err, overlapping(want, profiles, mask)))
			continue
		}
		remove = append(remove, g)
	}
	if len(blocked) > 0 {
		return nil, errors.Join(blocked...)
	}
	for _, g := range remove {
		if err := destroyInstance(g); err != nil {
			return nil, err
		}
	}
	out := make(map[MIGPlacement]string, len(want))
	for i, w := range want {
		g := kept[i]
		if g == nil {
			uuid, err := CreateMIGInstance(dev, model, w.Profile, w.Start)
			if err != nil {
				return nil, err
			}
			out[w] = uuid
			continue
		}
		uuid := g.uuid()
		if uuid == "" {
			// A GPU instance someone left without a compute instance is no MIG device yet.
			ci, err := createComputeInstance(g.gi, g.profile.Compute)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g, err)
			}
			if uuid, err = migUUID(dev, g.id, ci); err != nil {
				return nil, fmt.Errorf("%s: %w", g, err)
			}
		}
		out[w] = uuid
	}
	return out, nil
}

// wantedIndex finds the placement asked for that an instance is: the same profile at the
// same start; -1 for none.
func wantedIndex(want []MIGPlacement, profiles []*mig.Profile, g *gpuInstance) int {
	for i, w := range want {
		if profiles[i].Name == g.profile.Name && w.Start == g.start {
			return i
		}
	}
	return -1
}

// overlapping names the placements asked for that take any of the slices.
func overlapping(want []MIGPlacement, profiles []*mig.Profile, mask mig.Mask) string {
	var parts []string
	for i, w := range want {
		if profiles[i].Mask(w.Start)&mask != 0 {
			parts = append(parts, MIGPlacement{Profile: profiles[i].Name, Start: w.Start}.String())
		}
	}
	return strings.Join(parts, ", ")
}
