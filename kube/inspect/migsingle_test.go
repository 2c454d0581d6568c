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

// A node of the device plugin's single MIG strategy (no agent: GFD's labels and the
// plugin's count): its instances are held by the pods pinned to its product, as the
// scheduler books them, and shown with how a pod asks for one. `allot submit --mig` asks
// the mixed strategy's resource, which the node does not have: Fits says so, and how to ask
// instead; a whole GPU is told the same.
func TestSingleStrategyLayoutAndFits(t *testing.T) {
	const product = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "single-1", Labels: map[string]string{
		"nvidia.com/mig.strategy": "single", v1alpha1.LabelGPUProduct: product, v1alpha1.LabelGPUMemory: "9728", "nvidia.com/gpu.count": "7"}}}
	n.Status.Allocatable = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("7")}
	n.Status.Capacity = n.Status.Allocatable
	p := migPodOn("pinned", "single-1", map[string]string{v1alpha1.AnnotationMIGInstances: "mig-gpu-0/1g.10gb@3"},
		corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("1")})
	p.Spec.NodeSelector = map[string]string{v1alpha1.LabelGPUProduct: product}
	nodes := BuildNodes([]*corev1.Node{n}, []*corev1.Pod{p})
	if len(nodes) != 1 || len(nodes[0].GPUs) != 1 || nodes[0].GPUs[0].MIG == nil {
		t.Fatalf("want one A100 in MIG mode: %+v", nodes)
	}
	g := nodes[0].GPUs[0]
	if got := layoutOf(g.MIG); got != "1g.10gb@0=idle 1g.10gb@1=idle 1g.10gb@2=idle 1g.10gb@3=ml/pinned 1g.10gb@4=idle 1g.10gb@5=idle 1g.10gb@6=idle" {
		t.Errorf("layout %s", got)
	}
	if g.Used != 0.142 || !strings.Contains(g.MIG.AskedBy, "nodeSelector nvidia.com/gpu.product: "+product) {
		t.Errorf("used %v, asked by %q", g.Used, g.MIG.AskedBy)
	}
	for _, c := range []struct {
		r    submit.Request
		want string
	}{
		{submit.Request{Pods: 1, MIG: "1g.10gb", MIGCount: 1}, "--mig 1g.10gb: no GPU of the cluster's nodes is in MIG mode; MIG instances of the device plugin's single strategy are on single-1 (given as nvidia.com/gpu"},
		{submit.Request{Pods: 1, GPUs: 1}, "single-1's instances are given as nvidia.com/gpu by the device plugin's single MIG strategy: a pod asks for them with nvidia.com/gpu and nodeSelector nvidia.com/gpu.product: " + product},
	} {
		if err := Fits(nodes, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v,\nwant %q", c.r, err, c.want)
		}
	}
}
