package simnode

// Simulated nodes whose GPUs are published through DRA, as NVIDIA's DRA driver publishes
// them: one ResourceSlice per node of driver gpu.nvidia.com, pool named after the node, a
// device gpu-N per GPU with the attributes the driver writes (type, uuid, productName,
// index) and its memory as capacity, and the DeviceClass gpu.nvidia.com that selects
// them. Such a node has no nvidia.com/gpu capacity: its kubelet has no device plugin.
// The simulated kubelet then starts a pod only once each of its claims is allocated on
// its node and reserved for it, and refuses one whose claim holds a device another claim
// still holds, as a driver refuses to prepare a device twice.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/allot-dev/allot/kube/dra"
)

// DRADriver, DRAClass and MIGClass are the names NVIDIA's DRA driver uses for its devices
// and its classes of whole GPUs and of MIG devices.
const (
	DRADriver = dra.NVIDIADriver
	DRAClass  = dra.NVIDIAGPUClass
	MIGClass  = dra.NVIDIAMIGClass
)

// EnsureDeviceClass creates the DeviceClasses of whole GPUs and of MIG devices, as the
// driver's chart does.
func EnsureDeviceClass(ctx context.Context, client kubernetes.Interface) error {
	for _, class := range dra.NVIDIAClasses() {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// PublishSlices writes each node's ResourceSlice for spec's nodes, naming the GPUs as the
// go-nvml mock of the device-plugin nodes does.
func PublishSlices(ctx context.Context, client kubernetes.Interface, spec Spec) error {
	for i := 1; i <= spec.Count; i++ {
		node := fmt.Sprintf("%s-%d", spec.Prefix, i)
		slice := dra.NVIDIASlice(dra.NVIDIANode{Name: node, Product: spec.GPUType, GPUs: spec.GPUs, MemoryMi: spec.GPUMemoryMi,
			MIGGPUs: spec.MIGGPUs, Shared: spec.DRAShared, UUID: func(g int) string { return simulatedUUID(node, g) }})
		_, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resource slice of %s: %w", node, err)
		}
	}
	return nil
}

// claimsReady tells whether the pod's claims are allocated on its node and reserved for it
// (the kubelet prepares nothing else); refused says why the pod must fail instead.
func (k *Kubelet) claimsReady(ctx context.Context, p *corev1.Pod) (ready bool, refused string) {
	for i := range p.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
		if err != nil {
			return false, ""
		}
		if name == nil {
			continue
		}
		c, err := k.client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *name, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || !resourceclaim.IsReservedForPod(p, c) {
			return false, ""
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Pool != p.Spec.NodeName {
				return false, fmt.Sprintf("ResourceClaim %s holds device %s of pool %s, not of node %s", c.Name, r.Device, r.Pool, p.Spec.NodeName)
			}
			if r.ShareID != nil {
				// A share of a device several claims may hold (consumable capacity): the
				// driver prepares each share; only a claim holding the whole conflicts.
				if other := k.holdsWhole(ctx, r.Pool, r.Device, c); other != "" {
					return false, fmt.Sprintf("device %s/%s, shared by ResourceClaim %s, is prepared whole for ResourceClaim %s", r.Pool, r.Device, c.Name, other)
				}
				continue
			}
			if other := k.prepared(ctx, r.Pool, r.Device, c); other != "" {
				return false, fmt.Sprintf("device %s/%s of ResourceClaim %s is already prepared for ResourceClaim %s", r.Pool, r.Device, c.Name, other)
			}
		}
	}
	return true, ""
}

// prepared records a device as prepared for claim c, and names another claim that still
// holds it, if any ("" when the device is c's).
func (k *Kubelet) prepared(ctx context.Context, pool, device string, c *resourceapi.ResourceClaim) string {
	key := pool + "/" + device
	k.mu.Lock()
	prev, ok := k.preparedFor[key]
	k.mu.Unlock()
	if ok && prev.uid != c.UID {
		held, err := k.client.ResourceV1().ResourceClaims(prev.namespace).Get(ctx, prev.name, metav1.GetOptions{})
		if err == nil && held.UID == prev.uid && held.Status.Allocation != nil {
			for _, r := range held.Status.Allocation.Devices.Results {
				if r.Pool == pool && r.Device == device {
					return prev.namespace + "/" + prev.name
				}
			}
		}
	}
	k.mu.Lock()
	k.preparedFor[key] = claimRef{c.Namespace, c.Name, c.UID}
	k.mu.Unlock()
	return ""
}

// holdsWhole names another claim a device was prepared whole for and that still holds it.
func (k *Kubelet) holdsWhole(ctx context.Context, pool, device string, c *resourceapi.ResourceClaim) string {
	k.mu.Lock()
	prev, ok := k.preparedFor[pool+"/"+device]
	k.mu.Unlock()
	if !ok || prev.uid == c.UID {
		return ""
	}
	held, err := k.client.ResourceV1().ResourceClaims(prev.namespace).Get(ctx, prev.name, metav1.GetOptions{})
	if err != nil || held.UID != prev.uid || held.Status.Allocation == nil {
		return ""
	}
	for _, r := range held.Status.Allocation.Devices.Results {
		if r.Pool == pool && r.Device == device && r.ShareID == nil {
			return prev.namespace + "/" + prev.name
		}
	}
	return ""
}

type claimRef struct {
	namespace, name string
	uid             types.UID
}
