package inspect

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/submit"
)

// A node of another vendor's kind is read as the scheduler's default table reads it: its
// kind, model and devices, each with the pod the bind gave it; a request of that kind fits
// only nodes of it.
func TestNodesOfOtherKinds(t *testing.T) {
	asc := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ascend-1", Labels: map[string]string{"node.kubernetes.io/npu.chip.name": "910B3"}}}
	asc.Status.Allocatable = corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("8")}
	dgx := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Labels: map[string]string{v1alpha1.LabelGPUProduct: "H100"}}}
	dgx.Status.Allocatable = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("4")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "npu", Namespace: "ml", Annotations: map[string]string{v1alpha1.AnnotationGPUs: "0,1"}},
		Spec: corev1.PodSpec{NodeName: "ascend-1", Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("2")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	nodes := BuildNodes([]*corev1.Node{asc, dgx}, []*corev1.Pod{pod})
	if len(nodes) != 2 {
		t.Fatalf("nodes %+v", nodes)
	}
	n := nodes[0]
	if n.Name != "ascend-1" || n.Accelerator != "ascend" || n.Model != "910B3" || len(n.GPUs) != 8 || n.Allocated != 2 ||
		len(n.GPUs[1].Holders) != 1 || n.GPUs[1].Holders[0].Pod != "ml/npu" {
		t.Errorf("ascend node %+v", n)
	}
	if nodes[1].Accelerator != "" || len(nodes[1].GPUs) != 4 {
		t.Errorf("NVIDIA node %+v", nodes[1])
	}
	if err := Fits(nodes, submit.Request{Pods: 1, GPUs: 8, Accelerator: "ascend"}); err != nil {
		t.Errorf("8 ascend devices on the 8 of ascend-1: %v", err)
	}
	for _, c := range []struct {
		r    submit.Request
		want string
	}{
		{submit.Request{Pods: 1, GPUs: 16, Accelerator: "ascend"}, "-g 16: no node can hold it: the most ascend devices on one node of the cluster's nodes is 8 (ascend-1)"},
		{submit.Request{Pods: 1, GPUs: 8}, "-g 8: no node can hold it: the most GPUs on one node of the cluster's nodes is 4 (dgx-1)"},
		{submit.Request{Pods: 1, GPUs: 1, Accelerator: "amd"}, "the cluster's nodes have no amd devices"},
	} {
		if err := Fits(nodes, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
}
