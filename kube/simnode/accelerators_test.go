package simnode

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/kube/convert"
)

// A simulated node of another vendor's kind carries what the scheduler reads of a real
// one: the kind's resource, and its model and memory under the kind's labels in their
// units.
func TestSimulatedKindLabels(t *testing.T) {
	kinds, err := convert.ParseAccelerators(convert.DefaultAcceleratorNames())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"amd", "intel", "ascend"} {
		k, _ := kinds.Kind(name)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Labels: kindLabels(k, Spec{GPUs: 8, GPUType: "M", GPUMemoryMi: 64 << 10}, name+"-1")}}
		n.Status.Allocatable = corev1.ResourceList{k.Resources[0]: resource.MustParse("8")}
		out := kinds.Node(n)
		wantMem := int64(64 << 30)
		if k.MemoryLabel == "" {
			wantMem = 0
		}
		if out.Accelerator != name || len(out.GPUs) != 8 || out.GPUs[0].Model != "M" || out.GPUs[0].Memory != wantMem {
			t.Errorf("%s: %s with %d devices %+v", name, out.Accelerator, len(out.GPUs), out.GPUs[0])
		}
	}
}

// The simulated kubelet admits a pod asking for another vendor's devices while its node
// has enough left, and refuses one more as a kubelet does (OutOf<resource>); a stopped
// pod's devices are free again. NVIDIA's GPUs are left to the device plugin.
func TestKubeletAdmitsExtended(t *testing.T) {
	k := NewKubelet(nil)
	k.nodes, k.pods = cache.NewStore(cache.MetaNamespaceKeyFunc), cache.NewStore(cache.MetaNamespaceKeyFunc)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ascend-1"}}
	node.Status.Allocatable = corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("8")}
	_ = k.nodes.Add(node)
	pod := func(uid, res, n string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: k8stypes.UID("uid-" + uid)},
			Spec: corev1.PodSpec{NodeName: "ascend-1", Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse(n)}}}}}}
	}
	six, three, two := pod("six", "huawei.com/Ascend910", "6"), pod("three", "huawei.com/Ascend910", "3"), pod("two", "huawei.com/Ascend910", "2")
	if _, err := k.AdmitExtended(six); err != nil {
		t.Fatalf("six of 8: %v", err)
	}
	reason, err := k.AdmitExtended(three)
	want := "Node didn't have enough resource: huawei.com/Ascend910, requested: 3, used: 6, capacity: 8"
	if err == nil || reason != "OutOfhuawei.com/Ascend910" || err.Error() != want {
		t.Fatalf("three beside six: %q %v,\nwant %q", reason, err, want)
	}
	if _, err := k.AdmitExtended(two); err != nil {
		t.Fatalf("two beside six: %v", err)
	}
	k.releaseExtended(six.UID)
	if _, err := k.AdmitExtended(three); err != nil {
		t.Fatalf("three once six stopped: %v", err)
	}
	if _, err := k.AdmitExtended(pod("gpus", "nvidia.com/gpu", "64")); err != nil {
		t.Fatalf("NVIDIA's GPUs judged here: %v", err)
	}
	if _, err := k.AdmitExtended(pod("other", "amd.com/gpu", "1")); err == nil || !strings.Contains(err.Error(), "amd.com/gpu, requested: 1, used: 0, capacity: 0") {
		t.Fatalf("a resource the node lacks: %v", err)
	}
}
