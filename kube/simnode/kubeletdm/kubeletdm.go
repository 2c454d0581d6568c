// Package kubeletdm runs a simulated GPU node's device accounting on the kubelet's own
// code: the kubelet's device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager)
// with a simulated NVIDIA device plugin registered with it over the real device-plugin
// API, and the kubelet's PodResources v1 server reading from that manager. The simulated
// kubelet (package simnode) hands it each pod it starts and each it removes.
//
// What stands in for the rest of a kubelet: the pods it has admitted (the manager's
// active pods) are the ones handed to Allocate and not yet released; no container runs;
// the topology manager is the kubelet's fake (no NUMA hints). The device manager serves
// its registration socket only at the kubelet's fixed path,
// /var/lib/kubelet/device-plugins/kubelet.sock (NewManagerImpl takes no other), so one
// node per process, as root: Start says so when it cannot.
package kubeletdm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/kubeletlock"
)

// pluginSocket is the simulated device plugin's socket name in the device-plugin directory.
const pluginSocket = "allot-simulated-nvidia.sock"

// Node is one node's device manager, device plugin and PodResources server.
type Node struct {
	manager *devicemanager.ManagerImpl
	plugin  *plugin
	socket  string // the PodResources server's

	mu       sync.Mutex
	admitted map[types.UID]*corev1.Pod
	stop     []func()
}

// Start brings the node up: the device manager's registration server, the device plugin
// offering uuids (registered with it, as NVIDIA's plugin registers), and the PodResources
// server on podResourcesSocket. It fails when the kubelet's device-plugin directory is not
// this process's to use (not root, or a kubelet serving there).
func Start(ctx context.Context, uuids []string, podResourcesSocket string) (*Node, error) {
	dir := pluginapi.DevicePluginPath
	if os.Geteuid() != 0 {
		return nil, errors.New("the kubelet's device manager serves only at " + pluginapi.KubeletSocket + ": run as root")
	}
	// A real node's kubelet (kube/realnode) serves there too: one at a time.
	release, err := kubeletlock.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", pluginapi.KubeletSocket, 200*time.Millisecond); err == nil {
		c.Close()
		release()
		return nil, errors.New("a kubelet already serves " + pluginapi.KubeletSocket + " on this machine")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		release()
		return nil, err
	}
	n := &Node{socket: podResourcesSocket, admitted: map[types.UID]*corev1.Pod{}, stop: []func(){release}}
	m, err := devicemanager.NewManagerImpl(nil, topologymanager.NewFakeManager())
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("device manager: %w", err)
	}
	n.manager = m
	logger := klog.FromContext(ctx)
	if err := m.Start(logger, n.activePods, ready{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		n.Close()
		return nil, fmt.Errorf("device manager: %w", err)
	}
	n.stop = append(n.stop, func() { _ = m.Stop(logger); _ = os.Remove(filepath.Join(dir, "kubelet_internal_checkpoint")) })

	p, err := startPlugin(filepath.Join(dir, pluginSocket), uuids)
	if err != nil {
		n.Close()
		return nil, err
	}
	n.plugin = p
	n.stop = append(n.stop, p.close)
	if err := p.register(ctx); err != nil {
		n.Close()
		return nil, err
	}
	// The manager knows the devices once the plugin's first ListAndWatch answer arrives.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if capacity, _, _ := m.GetCapacity(); !capacity.Name(v1alpha1.GPUResource, "").IsZero() {
			break
		}
		if time.Now().After(deadline) {
			n.Close()
			return nil, errors.New("the device manager never listed the simulated plugin's GPUs")
		}
		time.Sleep(20 * time.Millisecond)
	}

	_ = os.Remove(podResourcesSocket)
	l, err := net.Listen("unix", podResourcesSocket)
	if err != nil {
		n.Close()
		return nil, err
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, podresources.NewV1PodResourcesServer(ctx, podresources.PodResourcesProviders{
		Pods: pods{n}, Devices: devices{m}, Cpus: none{}, Memory: none{}, DynamicResources: none{}}))
	go func() { _ = srv.Serve(l) }()
	n.stop = append(n.stop, srv.Stop)
	return n, nil
}

// Close stops the node's servers and removes what it made in the device-plugin directory.
func (n *Node) Close() {
	for i := len(n.stop) - 1; i >= 0; i-- {
		n.stop[i]()
	}
	n.stop = nil
}

// Socket is where the node's PodResources API listens.
func (n *Node) Socket() string { return n.socket }

// Allocate admits a pod's devices as the kubelet does: each init container, sidecar and
// container in turn through the device manager, which asks the device plugin.
func (n *Node) Allocate(p *corev1.Pod) error {
	n.mu.Lock()
	if _, ok := n.admitted[p.UID]; ok {
		n.mu.Unlock()
		return nil
	}
	n.admitted[p.UID] = p
	n.mu.Unlock()
	// Init containers first, as the kubelet's admission does: the device manager hands a
	// plain init container's devices on to the containers after it.
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		if err := n.manager.Allocate(p, &c); err != nil {
			n.Release(p.UID)
			return err
		}
	}
	return nil
}

// Release forgets a pod: the manager frees its devices at its next look at active pods.
func (n *Node) Release(uid types.UID) {
	n.mu.Lock()
	delete(n.admitted, uid)
	n.mu.Unlock()
	n.manager.UpdateAllocatedDevices()
}

// SetHealth has the plugin report device uuid healthy or not, as NVIDIA's plugin does on
// its own checks: the manager takes it out of (or back into) its allocatable devices.
func (n *Node) SetHealth(uuid string, healthy bool) { n.plugin.setHealth(uuid, healthy) }

func (n *Node) activePods() []*corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(n.admitted))
	for _, p := range n.admitted {
		out = append(out, p)
	}
	return out
}

type ready struct{}

func (ready) AddSource(string) {}
func (ready) AllReady() bool   { return true }

// pods answers the PodResources server with the admitted pods.
type pods struct{ n *Node }

func (p pods) GetActivePods() []*corev1.Pod { return p.n.activePods() }
func (p pods) GetPods() []*corev1.Pod       { return p.n.activePods() }
func (p pods) GetPodByName(ns, name string) (*corev1.Pod, bool) {
	for _, x := range p.n.activePods() {
		if x.Namespace == ns && x.Name == name {
			return x, true
		}
	}
	return nil, false
}

// devices answers the PodResources server from the device manager, as the kubelet's
// container manager does.
type devices struct{ m *devicemanager.ManagerImpl }

func (d devices) UpdateAllocatedDevices() { d.m.UpdateAllocatedDevices() }
func (d devices) GetDevices(podUID, container string) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetDevices(podUID, container))
}
func (d devices) GetAllocatableDevices() []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetAllocatableDevices())
}

func containerDevices(r devicemanager.ResourceDeviceInstances) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for resource, devs := range r {
		for id := range devs {
			out = append(out, &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
		}
	}
	return out
}

// none: no CPUs, memory or dynamic resources are managed here.
type none struct{}

func (none) GetCPUs(string, string) []int64                             { return nil }
func (none) GetAllocatableCPUs() []int64                                { return nil }
func (none) GetMemory(string, string) []*podresourcesv1.ContainerMemory { return nil }
func (none) GetAllocatableMemory() []*podresourcesv1.ContainerMemory    { return nil }
func (none) GetDynamicResources(*corev1.Pod, *corev1.Container) []*podresourcesv1.DynamicResource {
	return nil
}
