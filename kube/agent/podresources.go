package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// DefaultPodResourcesSocket is where the kubelet serves its PodResources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DialPodResources connects to a kubelet's PodResources API on a unix socket.
func DialPodResources(socket string) (podresourcesv1.PodResourcesListerClient, func() error, error) {
	conn, err := DialUnix(socket)
	if err != nil {
		return nil, nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	return podresourcesv1.NewPodResourcesListerClient(conn), conn.Close, nil
}

// DialUnix makes a gRPC connection to a kubelet-side unix socket (the kubelet's APIs and
// device plugins speak gRPC over them, without TLS).
func DialUnix(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "passthrough:///"))
		}))
}

// PodKey names a pod on the node.
type PodKey struct{ Namespace, Name string }

// GivenDevices asks the kubelet which GPUs it gave each pod's containers, as device UUIDs
// in the order the containers list them. The NVIDIA device plugin names devices by UUID,
// or by index when deployed with DEVICE_ID_STRATEGY=index, and MIG devices by their own
// UUIDs; all are read, through the node's inventory, as the GPU they are (a part of).
func GivenDevices(ctx context.Context, client podresourcesv1.PodResourcesListerClient, inv []v1alpha1.GPUInfo) (map[PodKey][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources: %w", err)
	}
	known := deviceIDs(inv)
	out := map[PodKey][]string{}
	for _, p := range resp.GetPodResources() {
		var uuids []string
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != v1alpha1.GPUResource {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					if u, ok := known[baseID(id)]; ok {
						uuids = append(uuids, u)
					}
				}
			}
		}
		if len(uuids) > 0 {
			out[PodKey{p.GetNamespace(), p.GetName()}] = dedupe(uuids)
		}
	}
	return out, nil
}

// deviceIDs maps the IDs the device plugin may name a GPU by (its UUID, or its index with
// DEVICE_ID_STRATEGY=index, or the UUID of one of its MIG devices) to its UUID.
func deviceIDs(inv []v1alpha1.GPUInfo) map[string]string {
	known := make(map[string]string, 2*len(inv))
	for _, g := range inv {
		known[g.UUID] = g.UUID
		known[strconv.Itoa(g.Index)] = g.UUID
		for _, m := range g.MIGDevices {
			known[m] = g.UUID // a MIG device is a part of its GPU
		}
	}
	return known
}

// baseID is the GPU a device ID names: with time-slicing the device plugin lists each GPU
// as several replicas, "GPU-<uuid>::0", "GPU-<uuid>::1", …, all of which are that GPU.
func baseID(id string) string {
	if i := strings.Index(id, "::"); i > 0 {
		return id[:i]
	}
	return id
}

// PluginHealthy asks the kubelet which GPUs the device plugin offers (the kubelet's
// allocatable devices are the healthy ones it registered) and returns their inventory
// indices. ok is false when it lists no GPU at all (no plugin registered, or an old
// kubelet): then nothing can be told about any device's health from it.
func PluginHealthy(ctx context.Context, client podresourcesv1.PodResourcesListerClient, inv []v1alpha1.GPUInfo) (healthy map[int]bool, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, false, fmt.Errorf("pod resources (allocatable): %w", err)
	}
	known := deviceIDs(inv)
	index := make(map[string]int, len(inv))
	for _, g := range inv {
		index[g.UUID] = g.Index
	}
	healthy = map[int]bool{}
	for _, d := range resp.GetDevices() {
		if d.GetResourceName() != v1alpha1.GPUResource {
			continue
		}
		ok = true
		for _, id := range d.GetDeviceIds() {
			if u, found := known[baseID(id)]; found {
				healthy[index[u]] = true
			}
		}
	}
	// A GPU in MIG mode is offered as its MIG devices, under nvidia.com/mig-* resources
	// with the plugin's mixed strategy: its absence from nvidia.com/gpu says nothing of
	// its health.
	for _, g := range inv {
		if g.MIG {
			healthy[g.Index] = true
		}
	}
	return healthy, ok, nil
}

// dedupe keeps the first of each device (containers of one pod may list the same one).
func dedupe(v []string) []string {
	seen := map[string]bool{}
	out := v[:0]
	for _, x := range v {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
