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
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "passthrough:///"))
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	return podresourcesv1.NewPodResourcesListerClient(conn), conn.Close, nil
}

// PodKey names a pod on the node.
type PodKey struct{ Namespace, Name string }

// GivenDevices asks the kubelet which GPUs it gave each pod's containers, as device UUIDs
// in the order the containers list them. The NVIDIA device plugin names devices by UUID,
// or by index when deployed with DEVICE_ID_STRATEGY=index; both are read, through the
// node's inventory. IDs that are neither (a MIG device) are left out.
func GivenDevices(ctx context.Context, client podresourcesv1.PodResourcesListerClient, inv []v1alpha1.GPUInfo) (map[PodKey][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources: %w", err)
	}
	known := map[string]string{}
	for _, g := range inv {
		known[g.UUID] = g.UUID
		known[strconv.Itoa(g.Index)] = g.UUID
	}
	out := map[PodKey][]string{}
	for _, p := range resp.GetPodResources() {
		var uuids []string
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != v1alpha1.GPUResource {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					if u, ok := known[id]; ok {
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
