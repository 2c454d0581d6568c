package agent

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/simgpu"
	"github.com/allot-dev/allot/mig"
)

// replicaDevices is a device plugin with time-slicing on (each GPU listed as two replicas,
// "GPU-…::0" and "GPU-…::1") that took GPU 1 out, as the kubelet's device manager would
// hand it to the PodResources server.
type replicaDevices struct{ noDevices }

func (replicaDevices) GetDevices(podUID, container string) []*podresourcesv1.ContainerDevices {
	if podUID != "uid-nb" {
		return nil
	}
	return []*podresourcesv1.ContainerDevices{{ResourceName: v1alpha1.GPUResource, DeviceIds: []string{"GPU-c::1"}}}
}

func (replicaDevices) GetAllocatableDevices() []*podresourcesv1.ContainerDevices {
	return []*podresourcesv1.ContainerDevices{{ResourceName: v1alpha1.GPUResource, DeviceIds: []string{"GPU-a::0", "GPU-a::1", "GPU-c::0", "GPU-c::1"}}}
}

type onePod struct{ noPods }

func (onePod) GetActivePods() []*corev1.Pod {
	return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "ml", UID: "uid-nb"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}}
}
func (p onePod) GetPods() []*corev1.Pod { return p.GetActivePods() }

// Replica IDs name their GPU: a pod given "GPU-c::1" holds GPU-c, and a GPU whose replicas
// the plugin no longer lists is the one out. Served by the kubelet's own PodResources v1
// server.
func TestTimeSlicedReplicasMapToTheirGPU(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	servePodResources(t, socket, onePod{}, replicaDevices{})
	client, closeConn, err := DialPodResources(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	inv := []v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}}
	given, err := GivenDevices(context.Background(), client, inv)
	if err != nil {
		t.Fatal(err)
	}
	if got := given[PodKey{"ml", "nb"}]; !slices.Equal(got, []string{"GPU-c"}) {
		t.Errorf("nb given %v, want GPU-c (replica GPU-c::1)", got)
	}
	healthy, ok, err := PluginHealthy(context.Background(), client, inv)
	if err != nil || !ok || !healthy[0] || healthy[1] || !healthy[2] {
		t.Errorf("healthy %v (ok %v, %v), want GPUs 0 and 2, GPU 1 out", healthy, ok, err)
	}
}

// With MIG on, the device plugin names MIG devices by their own UUIDs: the inventory lists
// each GPU's, and a pod given one is recorded on the GPU it is a part of.
func TestMIGDevicesMapToTheirGPU(t *testing.T) {
	m := simgpu.New(simgpu.Spec{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 2, UUIDs: []string{"GPU-a", "GPU-b"}})
	if r, _ := m.Devices[1].SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", r)
	}
	model, _ := mig.ByName("A100-80GB")
	for start := range 7 {
		if _, err := CreateMIGInstance(m.Devices[1], model, "1g.10gb", start); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	if inv[0].MIG || len(inv[0].MIGDevices) != 0 || !inv[1].MIG || len(inv[1].MIGDevices) != 7 {
		t.Fatalf("inventory %+v, want GPU b in MIG mode with 7 MIG devices", inv)
	}
	ids := deviceIDs(inv)
	if got := ids[inv[1].MIGDevices[3]]; got != "GPU-b" {
		t.Errorf("%s maps to %q, want GPU-b", inv[1].MIGDevices[3], got)
	}
}
