package nriplugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// What each container of a pod is given, by its namespace and annotations: only its own
// key counts, management devices only in Allot's namespace, a malformed name refused.
func TestDevicesByContainerAndNamespace(t *testing.T) {
	gpu := "k8s.device-plugin.nvidia.com/gpu=GPU-a"
	for _, c := range []struct {
		name, ns  string
		ann       map[string]string
		ctr       string
		want      []string
		refusedBy string
	}{
		{"the slice's container", "team-a", map[string]string{"cdi.allot.dev/main": gpu}, "main", []string{gpu}, ""},
		{"its sidecar", "team-a", map[string]string{"cdi.allot.dev/main": gpu}, "side", nil, ""},
		{"two devices", "team-a", map[string]string{"cdi.allot.dev/main": gpu + ",k8s.device-plugin.nvidia.com/gpu=GPU-b"}, "main",
			[]string{gpu, "k8s.device-plugin.nvidia.com/gpu=GPU-b"}, ""},
		{"NVIDIA's key is not Allot's", "team-a", map[string]string{"nvidia.cdi.k8s.io/container.main": gpu, "nvidia.cdi.k8s.io/pod": gpu}, "main", nil, ""},
		{"management in Allot's namespace", "allot-system", map[string]string{"cdi.allot.dev/agent": "management.nvidia.com/gpu=all"}, "agent",
			[]string{"management.nvidia.com/gpu=all"}, ""},
		{"management in a tenant's", "team-a", map[string]string{"cdi.allot.dev/main": gpu + ",management.nvidia.com/gpu=all"}, "main", nil,
			"given only to Allot's own pods"},
		{"every GPU of the plugin's kind in a tenant's", "team-a", map[string]string{"cdi.allot.dev/main": "k8s.device-plugin.nvidia.com/gpu=all"}, "main", nil,
			"names every GPU of the node"},
		{"not a CDI name", "team-a", map[string]string{"cdi.allot.dev/main": "GPU-a"}, "main", nil, "not a qualified CDI device name"},
	} {
		got, err := Devices(c.ns, c.ann, c.ctr, "allot-system")
		if c.refusedBy != "" {
			if err == nil || !strings.Contains(err.Error(), c.refusedBy) {
				t.Errorf("%s: %v, %v; want refused with %q", c.name, got, err, c.refusedBy)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// The adjustment containerd gets: the CDI names, and nothing else; an error for a refused
// container (containerd then does not create it).
func TestCreateContainerAdjustsCDIDevicesOnly(t *testing.T) {
	p := &plugin{opts: Options{Namespace: "allot-system"}}
	pod := &api.PodSandbox{Namespace: "team-a", Name: "nb", Annotations: map[string]string{"cdi.allot.dev/main": "k8s.device-plugin.nvidia.com/gpu=GPU-a"}}
	adj, upd, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "main"})
	if err != nil || len(upd) != 0 || adj == nil || len(adj.CDIDevices) != 1 || adj.CDIDevices[0].Name != "k8s.device-plugin.nvidia.com/gpu=GPU-a" ||
		adj.Linux != nil || len(adj.Env) != 0 || len(adj.Mounts) != 0 {
		t.Errorf("adjustment %v, updates %v, err %v", adj, upd, err)
	}
	pod.Annotations["cdi.allot.dev/main"] = "management.nvidia.com/gpu=all"
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "main"}); err == nil {
		t.Error("a tenant's container given management devices")
	}
}
