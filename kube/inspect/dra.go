package inspect

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/allot-dev/allot/kube/dra"
)

// DRA is what the faces read of Dynamic Resource Allocation: the slices that publish
// nodes' GPUs, the classes that say which devices are GPUs, and the claims that hold them.
type DRA struct {
	Slices  []*resourceapi.ResourceSlice
	Classes []*resourceapi.DeviceClass
	Claims  []*resourceapi.ResourceClaim
}

// ListDRA reads them; where the API server serves no resource.k8s.io/v1, or the user may
// not list them, it returns what it could (nodes with GPUs through DRA then do not show).
func ListDRA(ctx context.Context, client kubernetes.Interface) DRA {
	var d DRA
	api := client.ResourceV1()
	if l, err := api.ResourceSlices().List(ctx, metav1.ListOptions{}); err == nil {
		d.Slices = ptrs(l.Items)
	} else {
		return d
	}
	if l, err := api.DeviceClasses().List(ctx, metav1.ListOptions{}); err == nil {
		d.Classes = ptrs(l.Items)
	}
	if l, err := api.ResourceClaims("").List(ctx, metav1.ListOptions{}); err == nil {
		d.Claims = ptrs(l.Items)
	}
	return d
}

// WithDRA adds the nodes whose GPUs are published in ResourceSlices, each device with the
// pods its claim is reserved for. A node the device plugin already gave GPUs is left as it
// is. Without pods (EmptyNodes), every device shows free.
func WithDRA(out []Node, nodes []*corev1.Node, pods []*corev1.Pod, d DRA) []Node {
	if len(d.Slices) == 0 {
		return out
	}
	inv := dra.NewInventory(d.Slices, d.Classes, dra.DefaultClassNames, cel.NewCache(100, cel.Features{}))
	have := map[string]bool{}
	for _, n := range out {
		have[n.Name] = true
	}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	alive := map[string]bool{} // namespace/name of pods still running or waiting
	for _, p := range pods {
		if live(p) {
			alive[p.Namespace+"/"+p.Name] = true
		}
	}
	holders := map[string]map[int][]Holder{}
	for _, c := range d.Claims {
		for _, h := range inv.Holds(c) {
			pl, share := h.Place, 1.0
			if h.Share > 0 {
				share = float64(h.Share) / 1000 // a MIG device, or memory of a shared GPU
			}
			if holders[pl.Node] == nil {
				holders[pl.Node] = map[int][]Holder{}
			}
			for _, r := range c.Status.ReservedFor {
				if r.Resource == "pods" && alive[c.Namespace+"/"+r.Name] {
					holders[pl.Node][pl.Index] = append(holders[pl.Node][pl.Index], Holder{Pod: c.Namespace + "/" + r.Name, Share: share})
				}
			}
		}
	}
	for _, name := range inv.Nodes() {
		n := byName[name]
		if have[name] || n == nil {
			continue
		}
		devs := inv.NodeGPUs(name)
		node := Node{Name: name, Pool: n.Labels["allot.dev/node-pool"], Model: devs[0].Product, DRA: true}
		for _, dv := range devs {
			if dv.Memory > 0 { // a GPU in MIG mode publishes no memory of its own
				node.MemoryMi = dv.Memory >> 20
				break
			}
		}
		for g, dv := range devs {
			h := holders[name][g]
			sort.Slice(h, func(a, b int) bool { return h[a].Pod < h[b].Pod })
			gpu := GPU{Index: g, UUID: dv.UUID, Holders: h, FreeMi: dv.Memory >> 20, Device: dv.ID.Device.String()}
			if inv.PartsOnly(name, g) {
				gpu.Device = "MIG"
			}
			for _, x := range h {
				gpu.Used += x.Share
			}
			gpu.Used = min(gpu.Used, 1)
			gpu.FreeMi = int64(float64(gpu.FreeMi) * (1 - gpu.Used))
			node.Allocated += gpu.Used
			node.GPUs = append(node.GPUs, gpu)
		}
		out = append(out, node)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}
