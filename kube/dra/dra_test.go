package dra

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// slice is a node's slice as NVIDIA's DRA driver publishes it: gpu-N with type gpu, plus a
// device of another type that no GPU class selects.
func slice(node string, gen int64, gpus int, memGi int64) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com",
		NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}}}
	for g := 0; g < gpus; g++ {
		name := "gpu-" + string(rune('0'+g%10))
		if g >= 10 {
			name = "gpu-1" + string(rune('0'+g-10))
		}
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")},
				"uuid": {StringValue: ptr.To("GPU-" + node + "-" + name)}, "productName": {StringValue: ptr.To("H100")}},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *resource.NewQuantity(memGi<<30, resource.BinarySI)}}})
	}
	s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: "nic-0",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("nic")}}})
	return s
}

func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`}}}}}
}

func claim(name string, count int64, selectors ...string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	for _, s := range selectors {
		req.Selectors = append(req.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func inventory(slices ...*resourceapi.ResourceSlice) *Inventory {
	return NewInventory(slices, []*resourceapi.DeviceClass{gpuClass()}, DefaultClassNames, cel.NewCache(10, cel.Features{}))
}

// A node's GPUs are its GPU-class devices in natural order (gpu-2 before gpu-10), only of
// its pool's newest generation; devices of other types are not GPUs.
func TestInventoryOrdersAndSelectsGPUs(t *testing.T) {
	inv := inventory(slice("n1", 2, 12, 80), slice("n2", 1, 2, 80), func() *resourceapi.ResourceSlice {
		old := slice("n1", 1, 4, 40) // an older generation of n1's pool
		old.Name = "n1-old"
		return old
	}())
	got := inv.NodeGPUs("n1")
	if len(got) != 12 {
		t.Fatalf("n1 has %d GPUs, want 12 (the old generation's and the NIC left out)", len(got))
	}
	if got[2].ID.Device.String() != "gpu-2" || got[10].ID.Device.String() != "gpu-10" || got[0].Memory != 80<<30 || got[0].Product != "H100" {
		t.Fatalf("order or attributes wrong: %v %v %+v", got[2].ID, got[10].ID, got[0])
	}
	if p, ok := inv.Where(structured.MakeDeviceID("gpu.nvidia.com", "n2", "gpu-1")); !ok || p != (Place{"n2", 1}) {
		t.Fatalf("n2/gpu-1 is at %+v %v", p, ok)
	}
	if _, ok := inv.Where(structured.MakeDeviceID("gpu.nvidia.com", "n1", "nic-0")); ok {
		t.Fatal("the NIC counts as a GPU")
	}
}

func TestClaimGPUs(t *testing.T) {
	inv := inventory(slice("n1", 1, 4, 80))
	if n, p := inv.Count(claim("c", 3)); n.GPUs != 3 || p != "" {
		t.Fatalf("a claim of 3: %d %q", n, p)
	}
	all := claim("all", 0)
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	if _, p := inv.Count(all); !strings.Contains(p, "allocationMode: ExactCount") {
		t.Fatalf("allocationMode All: %q", p)
	}
	other := claim("nic", 2)
	other.Spec.Devices.Requests[0].Exactly.DeviceClassName = "nic.example.com"
	if n, _ := inv.Count(other); n != (Claimed{}) {
		t.Fatalf("a claim of another class counts %d GPUs", n)
	}
	// Allocated, a claim counts the GPUs it holds.
	held := claim("held", 1)
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-3"}, {Request: "nic", Driver: "gpu.nvidia.com", Pool: "n1", Device: "nic-0"}}}}
	if n, _ := inv.Count(held); n.GPUs != 1 {
		t.Fatalf("an allocated claim counts %d GPUs, want 1", n)
	}
}

// The allocator is kube-scheduler's: it never gives a device held by another claim, gives
// the engine's choice when it can, and says when a node's devices cannot do.
func TestAllocateHonoursHeldAndPreferred(t *testing.T) {
	ctx := context.Background()
	inv := inventory(slice("n1", 1, 4, 80))
	classes := Classes{"gpu.nvidia.com": gpuClass()}
	held := NewState(nil)
	held.Devices.Insert(structured.MakeDeviceID("gpu.nvidia.com", "n1", "gpu-0"))
	prefer := []structured.DeviceID{structured.MakeDeviceID("gpu.nvidia.com", "n1", "gpu-2"), structured.MakeDeviceID("gpu.nvidia.com", "n1", "gpu-3")}
	out, err := inv.Allocate(ctx, DefaultFeatures, classes, held, node("n1"), []*resourceapi.ResourceClaim{claim("c", 2)}, prefer)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range out[0].Devices.Results {
		got = append(got, r.Device)
	}
	if strings.Join(got, ",") != "gpu-2,gpu-3" {
		t.Fatalf("allocated %v, want the preferred gpu-2,gpu-3", got)
	}
	// Preferring a held device: the allocator falls back to free ones, never the held.
	out, err = inv.Allocate(ctx, DefaultFeatures, classes, held, node("n1"), []*resourceapi.ResourceClaim{claim("c", 1)},
		[]structured.DeviceID{structured.MakeDeviceID("gpu.nvidia.com", "n1", "gpu-0")})
	if err != nil || out[0].Devices.Results[0].Device == "gpu-0" {
		t.Fatalf("allocated %v (%v): the held gpu-0 given again", out, err)
	}
	if _, err := inv.Allocate(ctx, DefaultFeatures, classes, held, node("n1"), []*resourceapi.ResourceClaim{claim("c", 4)}, nil); err == nil {
		t.Fatal("4 GPUs allocated where 3 are free")
	}
	if ok, err := inv.Fits(ctx, DefaultFeatures, classes, node("n1"), []*resourceapi.ResourceClaim{claim("c", 4)}); !ok || err != nil {
		t.Fatalf("4 GPUs do not fit an empty n1: %v %v", ok, err)
	}
	big := claim("big", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0`)
	if ok, _ := inv.Fits(ctx, DefaultFeatures, classes, node("n1"), []*resourceapi.ResourceClaim{big}); ok {
		t.Fatal("a claim for 100Gi fits 80Gi GPUs")
	}
	m, err := inv.Matching("gpu.nvidia.com", gpuClass().Spec.Selectors, nil)
	if err != nil || m["n1"] != 4 {
		t.Fatalf("matching %v %v", m, err)
	}
}

func TestParseFeatures(t *testing.T) {
	page := []byte(`# HELP kubernetes_feature_enabled …
kubernetes_feature_enabled{name="DRAPrioritizedList",stage="BETA"} 1
kubernetes_feature_enabled{name="DRAPartitionableDevices",stage="BETA"} 0
kubernetes_feature_enabled{name="DRADeviceTaints",stage="ALPHA"} 1
kubernetes_feature_enabled{name="DRAConsumableCapacity",stage="ALPHA"} 1
`)
	f, ok := ParseFeatures(page)
	if !ok || !f.PrioritizedList || f.PartitionableDevices || !f.DeviceTaints || !f.ConsumableCapacity || f.AdminAccess {
		t.Fatalf("%+v %v", f, ok)
	}
	if _, ok := ParseFeatures([]byte("apiserver_request_total 3\n")); ok {
		t.Fatal("a page without gates was read as listing them")
	}
}

func TestPodClaimsSaysWhatItWaitsFor(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "p-uid"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one")}}}}
	none := func(string, string) *resourceapi.ResourceClaim { return nil }
	if _, why := PodClaims(p, none); !strings.Contains(why, "waiting for the resource claim controller to make its ResourceClaim from template one") {
		t.Fatalf("%q", why)
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gone")}}
	if _, why := PodClaims(p, none); !strings.Contains(why, "ResourceClaim default/gone does not exist") {
		t.Fatalf("%q", why)
	}
	c := claim("mine", 1)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one")}}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("mine")}}
	if _, why := PodClaims(p, func(string, string) *resourceapi.ResourceClaim { return c }); !strings.Contains(why, "not created for pod") {
		t.Fatalf("a claim the pod does not own was taken: %q", why)
	}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "p-uid", Controller: ptr.To(true)}}
	if got, why := PodClaims(p, func(string, string) *resourceapi.ResourceClaim { return c }); why != "" || len(got) != 1 {
		t.Fatalf("%v %q", got, why)
	}
}

// A prioritized list is booked by its largest choice (any may be allocated); a result
// given for monitoring only (adminAccess) holds nothing.
func TestCountLargestChoiceAndNotAdminAccess(t *testing.T) {
	inv := inventory(slice("n1", 1, 4, 80))
	c := claim("choices", 1)
	r := &c.Spec.Devices.Requests[0]
	r.FirstAvailable = []resourceapi.DeviceSubRequest{
		{Name: "one", DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		{Name: "four", DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4}}
	r.Exactly = nil
	if n, p := inv.Count(c); n.GPUs != 4 || p != "" {
		t.Fatalf("choices of 1 or 4 GPUs booked as %+v %q, want 4", n, p)
	}
	admin := claim("watch", 1)
	admin.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0", AdminAccess: ptr.To(true)}}}}
	if n, _ := inv.Count(admin); n != (Claimed{}) || NewState([]*resourceapi.ResourceClaim{admin}).Devices.Len() != 0 {
		t.Fatalf("an admin-access claim counts %+v and holds devices", n)
	}
}

// A GPU in MIG mode takes its place in index order by its parts' names, wherever it is.
func TestMIGModeGPUKeepsItsPlace(t *testing.T) {
	s := NVIDIASlice(NVIDIANode{Name: "n1", Product: "H100", GPUs: 3, MemoryMi: 81920, UUID: func(g int) string { return fmt.Sprintf("GPU-%d", g) }})
	mig := NVIDIASlice(NVIDIANode{Name: "n1", Product: "H100", GPUs: 2, MIGGPUs: 2, MemoryMi: 81920, UUID: func(g int) string { return fmt.Sprintf("GPU-%d", g) }})
	// gpu-1 in MIG mode: its seven parts instead of it.
	var devs []resourceapi.Device
	for _, d := range s.Spec.Devices {
		if d.Name != "gpu-1" {
			devs = append(devs, d)
		}
	}
	for _, d := range mig.Spec.Devices {
		if strings.HasPrefix(d.Name, "gpu-1-") {
			devs = append(devs, d)
		}
	}
	s.Spec.Devices = devs
	inv := NewInventory([]*resourceapi.ResourceSlice{s}, NVIDIAClasses(), DefaultClassNames, cel.NewCache(10, cel.Features{}))
	gpus := inv.NodeGPUs("n1")
	if len(gpus) != 3 || gpus[1].UUID != "GPU-1" || !inv.PartsOnly("n1", 1) || inv.PartsOnly("n1", 2) || len(inv.Parts("n1")) != 7 || inv.Parts("n1")[0].Index != 1 {
		t.Fatalf("GPUs %+v, parts %+v", gpus, inv.Parts("n1"))
	}
}

// Claims whose requests together cannot be met but each can (nine requests of two GPUs on
// sixteen) make the allocator try every combination: it gives up at its deadline, saying
// so, rather than holding the caller for hours.
func TestAllocatorGivesUpAtItsDeadline(t *testing.T) {
	defer func(d time.Duration) { AllocateTimeout = d }(AllocateTimeout)
	AllocateTimeout = 50 * time.Millisecond
	inv := inventory(slice("n1", 1, 16, 80))
	c := claim("c", 2)
	r := c.Spec.Devices.Requests[0]
	c.Spec.Devices.Requests = nil
	for i := range 9 {
		r.Name = "r" + strconv.Itoa(i)
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, *r.DeepCopy())
	}
	ok, err := inv.Fits(context.Background(), DefaultFeatures, Classes{"gpu.nvidia.com": gpuClass()}, node("n1"), []*resourceapi.ResourceClaim{c})
	if ok || !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "node n1") {
		t.Fatalf("fits %v, %v; want the allocator to give up on n1", ok, err)
	}
	// A caller's own cancellation is the caller's, not the allocator giving up.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := inv.Fits(ctx, DefaultFeatures, Classes{"gpu.nvidia.com": gpuClass()}, node("n1"), []*resourceapi.ResourceClaim{c}); errors.Is(err, ErrGaveUp) {
		t.Fatalf("a cancelled caller: %v", err)
	}
}
