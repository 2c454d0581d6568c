package dra

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/engine"
)

// What NVIDIA's DRA driver publishes, for the simulated nodes of allot up and of scenario
// files: one ResourceSlice per node (driver gpu.nvidia.com, a pool named after the node), a
// device gpu-N per whole GPU with the attributes the driver writes (type, uuid,
// productName, index) and its memory as capacity, seven 1g.10gb MIG devices (type mig,
// parentUUID, profile) for a GPU in MIG mode instead of the GPU itself, and the
// DeviceClasses that select each kind.

// NVIDIA's names.
const (
	NVIDIADriver   = "gpu.nvidia.com"
	NVIDIAGPUClass = "gpu.nvidia.com"
	NVIDIAMIGClass = "mig.nvidia.com"
	// SimulatedMIGProfile is what a simulated GPU in MIG mode is split into, seven times.
	SimulatedMIGProfile = "1g.10gb"
)

// NVIDIANode describes a node's GPUs as the driver would find them.
type NVIDIANode struct {
	Name     string
	Product  string
	GPUs     int
	MemoryMi int64
	// MIGGPUs are how many of its GPUs (the first ones) are in MIG mode.
	MIGGPUs int
	// UUID names GPU g of the node.
	UUID func(g int) string
	// Shared GPUs may be allocated to several claims, each consuming part of the GPU's
	// memory (consumable capacity, DRAConsumableCapacity); a claim that names no memory
	// takes all of it.
	Shared bool
}

// NVIDIASlice is the node's ResourceSlice.
func NVIDIASlice(n NVIDIANode) *resourceapi.ResourceSlice {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-" + NVIDIADriver},
		Spec: resourceapi.ResourceSliceSpec{Driver: NVIDIADriver, NodeName: ptr.To(n.Name),
			Pool: resourceapi.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: 1}}}
	for g := 0; g < n.GPUs; g++ {
		uuid := n.UUID(g)
		if g < n.MIGGPUs {
			for m := 0; m < 7; m++ {
				slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{
					Name: fmt.Sprintf("gpu-%d-mig-1g10gb-%d", g, m), // no dots in a device's name
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						"type":        {StringValue: ptr.To("mig")},
						"uuid":        {StringValue: ptr.To(fmt.Sprintf("MIG-%s-%d", uuid, m))},
						"parentUUID":  {StringValue: ptr.To(uuid)},
						"profile":     {StringValue: ptr.To(SimulatedMIGProfile)},
						"productName": {StringValue: ptr.To(n.Product)},
					},
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("10Gi")}},
				})
			}
			continue
		}
		dev := resourceapi.Device{Name: "gpu-" + strconv.Itoa(g),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":        {StringValue: ptr.To("gpu")},
				"uuid":        {StringValue: ptr.To(uuid)},
				"productName": {StringValue: ptr.To(n.Product)},
				"index":       {IntValue: ptr.To(int64(g))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(n.MemoryMi<<20, resource.BinarySI)},
			}}
		if n.Shared {
			dev.AllowMultipleAllocations = ptr.To(true)
		}
		slice.Spec.Devices = append(slice.Spec.Devices, dev)
	}
	return slice
}

// NVIDIAClasses are the driver's DeviceClasses of whole GPUs and of MIG devices.
func NVIDIAClasses() []*resourceapi.DeviceClass {
	var out []*resourceapi.DeviceClass
	for _, c := range []struct{ name, typ string }{{NVIDIAGPUClass, "gpu"}, {NVIDIAMIGClass, "mig"}} {
		out = append(out, &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", NVIDIADriver, NVIDIADriver, c.typ)}}}}})
	}
	return out
}

// EngineGPUs are a node's GPUs as the engine books them (model from the device, else the
// given one), and the holders that keep each GPU in MIG mode, whose whole is not
// published, from being given whole: a sliver of it held by work of no queue, which leaves
// room for its parts.
func (inv *Inventory) EngineGPUs(node, model string) (gpus []engine.GPU, partsOnly []engine.Job) {
	devs := inv.NodeGPUs(node)
	for k, dv := range devs {
		m := dv.Product
		if m == "" {
			m = model
		}
		gpus = append(gpus, engine.GPU{Model: m, Memory: dv.Memory, UUID: dv.UUID, Island: k * 2 / len(devs)})
		if inv.PartsOnly(node, k) {
			partsOnly = append(partsOnly, engine.Job{ID: engine.JobID(fmt.Sprintf("external/mig-mode/%s/%d", node, k)), MinMember: 1,
				Pods: []engine.Pod{{ID: engine.PodID(fmt.Sprintf("mig-mode:%s/%d", node, k)), Request: engine.PodRequest{GPUFraction: 1},
					Binding: &engine.Binding{Node: engine.NodeID(node), GPUs: []int{k}, Share: 1}}}})
		}
	}
	return gpus, partsOnly
}
