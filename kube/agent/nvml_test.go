package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/simgpu"
	"github.com/allot-dev/allot/kube/simnode"
)

// A DGX A100 (NVIDIA's mock): eight A100-SXM4-40GB on one NVSwitch, four per socket.
// All eight share NVLink; multi-GPU pods prefer one socket's four.
func TestInventoryOfADGXA100(t *testing.T) {
	inv, err := agent.ReadInventory(simgpu.DGXA100())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) != 8 {
		t.Fatalf("%d GPUs, want 8", len(inv))
	}
	uuids := map[string]bool{}
	for i, g := range inv {
		if g.Index != i || g.Model != "Mock NVIDIA A100-SXM4-40GB" || g.MemoryMiB != 40960 || g.MIG {
			t.Errorf("GPU %d: %+v, want index %d, Mock NVIDIA A100-SXM4-40GB (the mock's name), 40960 MiB, no MIG", i, g, i)
		}
		if g.NVLink != 0 {
			t.Errorf("GPU %d in NVLink group %d: an NVSwitch links all eight", i, g.NVLink)
		}
		uuids[g.UUID] = true
	}
	if len(uuids) != 8 {
		t.Errorf("%d distinct UUIDs, want 8", len(uuids))
	}
	numa := []int{}
	for _, g := range inv {
		numa = append(numa, g.NUMA)
	}
	if want := []int{0, 0, 0, 0, 1, 1, 1, 1}; !slices.Equal(numa, want) {
		t.Errorf("NUMA nodes %v, want %v", numa, want)
	}
	if got, want := v1alpha1.Islands(inv, 8), []int{0, 0, 0, 0, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("islands %v, want %v", got, want)
	}
}

// What the driver keeps of a device for itself is read apart (NVML's second memory query),
// so that slices are booked only of what processes can have.
func TestInventoryReadsTheDriversReserve(t *testing.T) {
	inv, err := agent.ReadInventory(simgpu.New(simgpu.Spec{Model: "NVIDIA H200", MemoryMiB: 143771, Count: 1, ReservedMiB: 616}))
	if err != nil {
		t.Fatal(err)
	}
	if inv[0].MemoryMiB != 143771 || inv[0].ReservedMiB != 616 {
		t.Fatalf("inventory %+v: want 143771 MiB of which the driver reserves 616, as an H200 reports", inv[0])
	}
}

// A PCIe server with NVLink bridges between pairs, on one socket: each pair is a group.
func TestInventoryOfBridgedPairs(t *testing.T) {
	inv, err := agent.ReadInventory(simgpu.New(simgpu.Spec{Model: "NVIDIA L40S", MemoryMiB: 46068, Count: 4, Links: simgpu.Pairs}))
	if err != nil {
		t.Fatal(err)
	}
	var groups []int
	for _, g := range inv {
		groups = append(groups, g.NVLink)
	}
	if want := []int{0, 0, 1, 1}; !slices.Equal(groups, want) {
		t.Errorf("NVLink groups %v, want %v", groups, want)
	}
	if got, want := v1alpha1.Islands(inv, 4), []int{0, 0, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("islands %v, want %v", got, want)
	}
	if inv[0].Model != "NVIDIA L40S" || inv[0].MemoryMiB != 46068 {
		t.Errorf("GPU 0: %+v", inv[0])
	}
}

func TestSampleReadsLoadAndLostDevices(t *testing.T) {
	m := simgpu.DGXA100()
	m.SetLoad(2, 80, 30000)
	s := agent.ReadSample(m, 8)
	if s.Utilization[2] != 80 || s.MemoryUsed[2] != 30000 || s.Utilization[0] != 0 {
		t.Errorf("utilisation %v, memory %v: want GPU 2 at 80%% and 30000 MiB, the rest idle", s.Utilization, s.MemoryUsed)
	}
	if len(s.Lost) != 0 {
		t.Errorf("lost %v before any failure", s.Lost)
	}
	go m.RaiseXID(5, 79) // the event is not read here: the device stops answering anyway
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s = agent.ReadSample(m, 8); slices.Equal(s.Lost, []int{5}) {
			if s.Utilization[5] != agent.UtilizationUnknown {
				t.Errorf("lost GPU 5 reads %d%%, want unknown (%d), not a live idle report", s.Utilization[5], agent.UtilizationUnknown)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("lost %v after GPU 5 fell off the bus, want [5]", s.Lost)
}

// unanswering is a device library whose device 3 does not give its handle.
type unanswering struct{ nvml.Interface }

func (u unanswering) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i == 3 {
		return nil, nvml.ERROR_UNKNOWN
	}
	return u.Interface.DeviceGetHandleByIndex(i)
}

// A device NVML does not answer for has no utilisation, which the written annotation says
// as "-1": read as 0 it would be a GPU reported idle.
func TestSampleOfAnUnansweringDeviceIsUnknown(t *testing.T) {
	m := simgpu.DGXA100()
	s := agent.ReadSample(unanswering{m}, 8)
	if s.Utilization[3] != agent.UtilizationUnknown || s.Utilization[2] != 0 {
		t.Errorf("utilisation %v: want GPU 3 unknown (%d), GPU 2 at 0%%", s.Utilization, agent.UtilizationUnknown)
	}
}

// An application's own fault (XID 13) leaves the device healthy; a double-bit ECC error
// (XID 48) fails it, with a reason a person can read.
func TestXIDEventMakesAGPUUnhealthy(t *testing.T) {
	m := simgpu.DGXA100()
	inv, err := agent.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failures := make(chan agent.Failure, 8)
	go func() { _ = agent.WatchHealth(ctx, m, inv, func(f agent.Failure) { failures <- f }) }()
	m.RaiseXID(3, 13)
	m.RaiseXID(6, 48)
	select {
	case f := <-failures:
		if f.Index != 6 || f.Reason != "XID 48 (double-bit ECC error)" || f.XID != 48 {
			t.Errorf("failure %+v, want GPU 6 with XID 48 (double-bit ECC error)", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure reported for XID 48")
	}
	select {
	case f := <-failures:
		t.Errorf("a second failure %+v: XID 13 is the application's, not the device's", f)
	case <-time.After(700 * time.Millisecond):
	}
}

// The kubelet's PodResources API, served on a unix socket by the simulated kubelet's
// device plugin (which hands out the highest free devices first), is what the agent reads
// a pod's devices from.
func TestDevicesFromPodResources(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	devices := simnode.NewDevices(t.TempDir())
	if err := devices.AddNodes(ctx, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 8, GPUType: "A100-SXM4-80GB", GPUMemoryMi: 81920}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, containers ...int64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: "dgx-1"}}
		for i, n := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c" + string(rune('0'+i)),
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}}})
		}
		return p
	}
	for _, p := range []*corev1.Pod{pod("train", 1, 1), pod("notebook", 1), pod("cpu", 0)} {
		if _, err := devices.Allocate(p); err != nil {
			t.Fatal(err)
		}
	}
	client, closeConn, err := agent.DialPodResources(devices.Socket("dgx-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	inv, err := agent.ReadInventory(devices.Machine("dgx-1"))
	if err != nil {
		t.Fatal(err)
	}
	given, err := agent.GivenDevices(ctx, client, inv)
	if err != nil {
		t.Fatal(err)
	}
	uuid := func(g int) string { return inv[g].UUID }
	want := map[agent.PodKey][]string{
		{Namespace: "team-a", Name: "train"}:    {uuid(7), uuid(6)}, // two containers, one device each
		{Namespace: "team-a", Name: "notebook"}: {uuid(5)},
	}
	if len(given) != len(want) {
		t.Errorf("devices of %d pods, want %d: %v", len(given), len(want), given)
	}
	for k, w := range want {
		if !slices.Equal(given[k], w) {
			t.Errorf("%s/%s given %v, want %v", k.Namespace, k.Name, given[k], w)
		}
	}
	// A pod that asks for more than is free fails admission, as on a kubelet.
	if _, err := devices.Allocate(pod("big", 8)); err == nil {
		t.Error("8 devices handed out with 5 free")
	}
}
