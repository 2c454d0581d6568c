package convert_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// The device plugin took GPU 1 of four out: the kubelet's allocatable says 3. With the
// agent's device list, the node keeps four devices by index and GPU 1 is the failed one,
// not GPU 3; without it, the count is all there is to go by.
func TestPluginUnhealthyDeviceKeepsItsIndex(t *testing.T) {
	node := func(uuids, unhealthy string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Annotations: map[string]string{}},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{convert.GPUResource: resource.MustParse("4")},
				Allocatable: corev1.ResourceList{convert.GPUResource: resource.MustParse("3")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if uuids != "" {
			n.Annotations[v1alpha1.AnnotationGPUUUIDs] = uuids
		}
		if unhealthy != "" {
			n.Annotations[v1alpha1.AnnotationGPUUnhealthy] = unhealthy
		}
		return n
	}
	got := convert.Node(node("GPU-a,GPU-b,GPU-c,GPU-d", `[{"index":1,"uuid":"GPU-b","reason":"the NVIDIA device plugin reports it unhealthy"}]`))
	if len(got.GPUs) != 4 {
		t.Fatalf("%d GPUs, want 4 (one of them failed)", len(got.GPUs))
	}
	for i, g := range got.GPUs {
		if (g.Unhealthy != "") != (i == 1) || g.UUID != []string{"GPU-a", "GPU-b", "GPU-c", "GPU-d"}[i] {
			t.Errorf("GPU %d: %+v, want only GPU 1 (GPU-b) failed", i, g)
		}
	}
	if got := convert.Node(node("", "")); len(got.GPUs) != 3 {
		t.Errorf("without the agent's list: %d GPUs, want the kubelet's 3", len(got.GPUs))
	}
	// A list longer than the capacity is not believed.
	if got := convert.Node(node("GPU-a,GPU-b,GPU-c,GPU-d,GPU-e", "")); len(got.GPUs) != 3 {
		t.Errorf("a list of 5 on a node of capacity 4: %d GPUs, want 3", len(got.GPUs))
	}
}
