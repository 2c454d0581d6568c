package agent_test

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/simgpu"
	"github.com/allot-dev/allot/mig"
)

// The mock DGX A100's GPUs are A100-SXM4-40GB: eight memory slices of 5 GB, seven compute
// slices. Its GPU instance profiles by NVML id, named as NVIDIA names them.
var a100Profiles = map[uint32]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      "1g.5gb",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "1g.5gb+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g.10gb",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      "2g.10gb",
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      "3g.20gb",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      "4g.20gb",
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      "7g.40gb",
}

// migGPU is one GPU of go-nvml's mock DGX A100 in MIG mode, with simgpu's wiring: the
// mock's compute instances are its MIG devices (simgpu.MIGUUID), running the processes
// SetMIGProcesses gives them, and a GPU instance with compute instances is not destroyed,
// as NVML refuses (the mock alone has neither).
//
// creates counts the calls that create GPU instances, to show a refusal asks NVML nothing.
type migGPU struct {
	lib     *simgpu.Machine
	dev     *server.Device
	creates int
}

func newMIGGPU(t *testing.T, index int) *migGPU {
	t.Helper()
	lib := simgpu.DGXA100()
	d := lib.Devices[index].(*server.Device)
	if r, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", r)
	}
	g := &migGPU{lib: lib, dev: d}
	create := d.CreateGpuInstanceFunc
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		g.creates++
		return create(info)
	}
	createAt := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, p *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		g.creates++
		return createAt(info, p)
	}
	return g
}

func (g *migGPU) migUUID(gi, ci uint32) string { return simgpu.MIGUUID(g.dev, gi, ci) }

// run says which processes run on a MIG device (none: nothing).
func (g *migGPU) run(uuid string, pids ...uint32) { g.lib.SetMIGProcesses(uuid, pids) }

func (g *migGPU) gpuInstances() []*server.GpuInstance { return simgpu.GPUInstances(g.dev) }

func computeInstances(gi *server.GpuInstance) []*server.ComputeInstance {
	return simgpu.ComputeInstances(gi)
}

// nvmlInstance is a GPU instance as the mock holds it: what an admin sees in nvidia-smi.
type nvmlInstance struct {
	Profile string
	Start   int
	Compute []int    // the compute slices of each of its compute instances
	UUIDs   []string // its MIG devices
}

func (i nvmlInstance) String() string {
	return fmt.Sprintf("%s@%d compute %v %v", i.Profile, i.Start, i.Compute, i.UUIDs)
}

// layout is the GPU's instances by start, read from the mock itself.
func (g *migGPU) layout() []nvmlInstance {
	var out []nvmlInstance
	for _, gi := range g.gpuInstances() {
		in := nvmlInstance{Profile: a100Profiles[gi.Info.ProfileId], Start: int(gi.Info.Placement.Start)}
		for _, ci := range computeInstances(gi) {
			info := gi.MIGProfiles.ComputeInstanceProfiles[int(gi.Info.ProfileId)][int(ci.Info.ProfileId)]
			in.Compute = append(in.Compute, int(info.SliceCount))
			in.UUIDs = append(in.UUIDs, g.migUUID(gi.Info.Id, ci.Info.Id))
		}
		out = append(out, in)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Start < out[b].Start })
	return out
}

// make sets an instance up through the mock's NVML, apart from the code under test: a GPU
// instance of the NVML profile at the start and, with compute, one compute instance
// taking all of it. It returns the MIG device's UUID.
func (g *migGPU) make(t *testing.T, profile uint32, start int, compute bool) string {
	t.Helper()
	info := dgxa100.MIGProfiles.GpuInstanceProfiles[int(profile)]
	var placement *nvml.GpuInstancePlacement
	for _, p := range dgxa100.MIGPlacements.GpuInstancePossiblePlacements[int(profile)] {
		if int(p.Start) == start {
			placement = &p
		}
	}
	if placement == nil {
		t.Fatalf("the mock has no placement of %s at %d", a100Profiles[profile], start)
	}
	gi, r := g.dev.CreateGpuInstanceWithPlacement(&info, placement)
	if r != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstanceWithPlacement: %v", r)
	}
	if !compute {
		return ""
	}
	for id, ciInfo := range dgxa100.MIGProfiles.ComputeInstanceProfiles[int(profile)] {
		if ciInfo.SliceCount == info.SliceCount && id != nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 {
			ci, r := gi.CreateComputeInstance(&ciInfo)
			if r != nvml.SUCCESS {
				t.Fatalf("CreateComputeInstance: %v", r)
			}
			giInfo, _ := gi.GetInfo()
			cInfo, _ := ci.GetInfo()
			return g.migUUID(giInfo.Id, cInfo.Id)
		}
	}
	t.Fatalf("the mock has no compute instance profile taking all of %s", a100Profiles[profile])
	return ""
}

func (g *migGPU) model(t *testing.T) *mig.Model {
	t.Helper()
	m, ok := mig.ForProduct(g.dev.Config.Name, int64(g.dev.MemoryInfo.Total))
	if !ok || m.Name != "A100-40GB" {
		t.Fatalf("geometry of %s: %v, want A100-40GB", g.dev.Config.Name, m)
	}
	return m
}

func checkLayout(t *testing.T, g *migGPU, when string, want []nvmlInstance) {
	t.Helper()
	if got := g.layout(); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the GPU holds\n  %v\nwant\n  %v", when, got, want)
	}
}

// The inventory lists each MIG instance of a GPU in MIG mode by the mig package's profile
// name (a media-extension instance by its base's), its start, its MIG device and whether
// processes run on it; GPUs out of MIG mode list none.
func TestMIGInventoryListsInstances(t *testing.T) {
	g := newMIGGPU(t, 3)
	big := g.make(t, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	busy := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 4, true)
	media := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 5, true)
	wide := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 6, true)
	g.run(busy, 4242)

	inv, err := agent.ReadInventory(g.lib)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.MIGInstance{
		{Profile: "3g.20gb", Start: 0, UUID: big},
		{Profile: "1g.5gb", Start: 4, UUID: busy, InUse: true},
		{Profile: "1g.5gb", Start: 5, UUID: media},
		{Profile: "1g.10gb", Start: 6, UUID: wide},
	}
	if got := inv[3].MIGInstances; !reflect.DeepEqual(got, want) {
		t.Errorf("GPU 3's MIG instances\n  %+v\nwant\n  %+v", got, want)
	}
	if got, want := inv[3].MIGDevices, []string{big, busy, media, wide}; !reflect.DeepEqual(got, want) {
		t.Errorf("GPU 3's MIG devices %v, want %v", got, want)
	}
	for i, gpu := range inv {
		if i != 3 && (gpu.MIG || gpu.MIGInstances != nil) {
			t.Errorf("GPU %d: MIG %v, instances %v; only GPU 3 is in MIG mode", i, gpu.MIG, gpu.MIGInstances)
		}
	}
}

// A 3g.20gb at 0, a 2g.10gb at 4 and a 1g.10gb at 6 fill an A100-40GB: each a GPU instance
// at its placement with one compute instance of all its compute slices, and the UUIDs
// returned are those MIG devices'. (A second 2g.10gb cannot go at 6: 2g starts at 0, 2, 4.)
func TestCreateMIGInstancesFillAnA100(t *testing.T) {
	g := newMIGGPU(t, 0)
	model := g.model(t)
	var uuids []string
	for _, p := range []agent.MIGPlacement{{Profile: "3g.20gb", Start: 0}, {Profile: "2g.10gb", Start: 4}, {Profile: "1g.10gb", Start: 6}} {
		uuid, err := agent.CreateMIGInstance(g.dev, model, p.Profile, p.Start)
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		uuids = append(uuids, uuid)
	}
	checkLayout(t, g, "after creating three instances", []nvmlInstance{
		{Profile: "3g.20gb", Start: 0, Compute: []int{3}, UUIDs: uuids[:1]},
		{Profile: "2g.10gb", Start: 4, Compute: []int{2}, UUIDs: uuids[1:2]},
		{Profile: "1g.10gb", Start: 6, Compute: []int{1}, UUIDs: uuids[2:3]},
	})
	if g.creates != 3 {
		t.Errorf("NVML asked to create %d GPU instances, want 3", g.creates)
	}
}

// A start the profile does not have, a placement over an instance, and a profile the GPU
// does not offer are refused before NVML is asked to create anything, each saying why.
func TestCreateMIGInstanceRefusesBadPlacements(t *testing.T) {
	g := newMIGGPU(t, 0)
	model := g.model(t)
	uuid, err := agent.CreateMIGInstance(g.dev, model, "3g.20gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	before := []nvmlInstance{{Profile: "3g.20gb", Start: 0, Compute: []int{3}, UUIDs: []string{uuid}}}
	checkLayout(t, g, "after creating 3g.20gb at 0", before)
	creates := g.creates
	for _, c := range []struct {
		profile string
		start   int
		says    string
	}{
		{"3g.20gb", 2, "allowed starts are [0 4]"},
		{"2g.10gb", 6, "allowed starts are [0 2 4]"},
		{"2g.10gb", 2, "overlaps"},
		{"4g.20gb", 0, "overlaps"},
		{"5g.25gb", 0, "1g.5gb, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"},
		{"1g.5gb+me", 4, "media-extension"},
	} {
		_, err := agent.CreateMIGInstance(g.dev, model, c.profile, c.start)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s at %d: error %v, want one saying %q", c.profile, c.start, err, c.says)
		}
	}
	if g.creates != creates {
		t.Errorf("NVML asked to create %d GPU instances for placements that were refused", g.creates-creates)
	}
	checkLayout(t, g, "after the refusals", before)
}

// An idle instance is destroyed with its compute instance (NVML keeps a GPU instance that
// still has one); the others stay. A start with no instance is an error.
func TestDestroyIdleMIGInstance(t *testing.T) {
	g := newMIGGPU(t, 0)
	keep := g.make(t, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	g.make(t, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 4, true)
	if err := agent.DestroyMIGInstance(g.dev, 4); err != nil {
		t.Fatal(err)
	}
	after := []nvmlInstance{{Profile: "3g.20gb", Start: 0, Compute: []int{3}, UUIDs: []string{keep}}}
	checkLayout(t, g, "after destroying the 2g.10gb at 4", after)
	if err := agent.DestroyMIGInstance(g.dev, 2); err == nil || !strings.Contains(err.Error(), "instances start at [0]") {
		t.Errorf("destroying at 2, where no instance starts: error %v, want one listing the starts [0]", err)
	}
	checkLayout(t, g, "after asking to destroy at 2", after)
}

// An instance with processes on it is not destroyed; the refusal names its MIG device and
// the processes. Once they are gone, it is.
func TestDestroyMIGRefusesAnInstanceWithProcesses(t *testing.T) {
	g := newMIGGPU(t, 0)
	uuid := g.make(t, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 4, true)
	g.run(uuid, 4242, 4343)
	err := agent.DestroyMIGInstance(g.dev, 4)
	if err == nil || !strings.Contains(err.Error(), uuid) || !strings.Contains(err.Error(), "PID 4242, 4343") {
		t.Errorf("destroying a busy instance: error %v, want one naming %s and PIDs 4242, 4343", err, uuid)
	}
	checkLayout(t, g, "after the refusal", []nvmlInstance{{Profile: "2g.10gb", Start: 4, Compute: []int{2}, UUIDs: []string{uuid}}})
	g.run(uuid)
	if err := agent.DestroyMIGInstance(g.dev, 4); err != nil {
		t.Fatalf("destroying it once idle: %v", err)
	}
	checkLayout(t, g, "after destroying it idle", nil)
}

// Asked for a 3g.20gb at 0 and 1g.5gb at 4 and 5, the agent destroys the idle 2g.10gb at 0
// that is in the 3g's way, keeps the 1g.5gb at 4 as it is, gives the bare GPU instance at 5
// its compute instance, and leaves the idle 1g.5gb at 6, in nobody's way, for a later pod.
func TestReconcileMIGKeepsWhatIsInNobodysWay(t *testing.T) {
	g := newMIGGPU(t, 0)
	model := g.model(t)
	g.make(t, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 0, true)
	kept := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 4, true)
	g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 5, false)
	spare := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 6, true)
	creates := g.creates

	want := []agent.MIGPlacement{{Profile: "3g.20gb", Start: 0}, {Profile: "1g.5gb", Start: 4}, {Profile: "1g.5gb", Start: 5}}
	got, err := agent.ReconcileMIG(g.dev, model, want)
	if err != nil {
		t.Fatal(err)
	}
	layout := g.layout()
	if len(layout) != 4 {
		t.Fatalf("the GPU holds %v, want four instances", layout)
	}
	checkLayout(t, g, "after reconciling", []nvmlInstance{
		{Profile: "3g.20gb", Start: 0, Compute: []int{3}, UUIDs: layout[0].UUIDs},
		{Profile: "1g.5gb", Start: 4, Compute: []int{1}, UUIDs: []string{kept}},
		{Profile: "1g.5gb", Start: 5, Compute: []int{1}, UUIDs: layout[2].UUIDs},
		{Profile: "1g.5gb", Start: 6, Compute: []int{1}, UUIDs: []string{spare}},
	})
	wantUUIDs := map[agent.MIGPlacement]string{want[0]: layout[0].UUIDs[0], want[1]: kept, want[2]: layout[2].UUIDs[0]}
	if !reflect.DeepEqual(got, wantUUIDs) {
		t.Errorf("UUIDs %v, want %v", got, wantUUIDs)
	}
	if g.creates-creates != 1 {
		t.Errorf("NVML asked to create %d GPU instances, want 1 (the 3g.20gb)", g.creates-creates)
	}
}

// An instance with processes in the way of what is asked is never destroyed: the error
// names it, its processes and the placement it blocks, and nothing is changed, not even
// the idle instance that is also in the way, nor the instance that had room.
func TestReconcileMIGNeverDestroysABusyInstance(t *testing.T) {
	g := newMIGGPU(t, 0)
	model := g.model(t)
	idle := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)
	busy := g.make(t, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 2, true)
	g.run(busy, 777)
	before := g.layout()
	creates := g.creates

	_, err := agent.ReconcileMIG(g.dev, model, []agent.MIGPlacement{{Profile: "3g.20gb", Start: 0}, {Profile: "2g.10gb", Start: 4}})
	if err == nil {
		t.Fatal("a busy instance in the way was not an error")
	}
	for _, s := range []string{busy, "PID 777", "3g.20gb at memory slice 0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if strings.Contains(err.Error(), idle) {
		t.Errorf("error %q names the idle instance %s, which is not what blocks", err, idle)
	}
	checkLayout(t, g, "after the refusal", before)
	if g.creates != creates {
		t.Errorf("NVML asked to create %d GPU instances after the refusal", g.creates-creates)
	}

	// A layout asked for that overlaps itself is refused as such.
	_, err = agent.ReconcileMIG(g.dev, model, []agent.MIGPlacement{{Profile: "1g.5gb", Start: 6}, {Profile: "1g.10gb", Start: 6}})
	if err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("an overlapping layout asked for: error %v, want one saying it overlaps", err)
	}
	checkLayout(t, g, "after an overlapping layout was asked for", before)
}
