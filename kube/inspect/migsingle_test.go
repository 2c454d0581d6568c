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

// Where --mig's profile is, by strategy: a mixed node and single-strategy nodes of two
// models have 1g.10gb instances. FixedMIGOffer names them apart, with the single nodes'
// products for the pin (only the A100's under --gpu-type of the GPUs' model); Fits of the
// single strategy's request counts only the pinned products' instances.
func TestFixedMIGOfferAndSingleFits(t *testing.T) {
	node := func(name string, labels map[string]string, res corev1.ResourceList) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		n.Status.Allocatable, n.Status.Capacity = res, res
		return n
	}
	const a100, h100 = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
	seven := corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("7")}
	nodes := BuildNodes([]*corev1.Node{
		node("mixed-1", map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"},
			corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2"), "nvidia.com/mig-3g.40gb": resource.MustParse("1")}),
		node("single-a", map[string]string{"nvidia.com/mig.strategy": "single", v1alpha1.LabelGPUProduct: a100}, seven),
		node("single-h", map[string]string{"nvidia.com/mig.strategy": "single", v1alpha1.LabelGPUProduct: h100}, seven),
	}, nil)
	off := FixedMIGOffer(nodes, submit.Request{MIG: "1g.10gb"})
	if strings.Join(off.Mixed, ",") != "mixed-1" || strings.Join(off.Single, ",") != "single-a,single-h" || strings.Join(off.Products, ",") != a100+","+h100 {
		t.Errorf("1g.10gb offered %+v", off)
	}
	off = FixedMIGOffer(nodes, submit.Request{MIG: "1g.10gb", Models: []string{"NVIDIA-A100-SXM4-80GB"}})
	if strings.Join(off.Mixed, ",") != "mixed-1" || strings.Join(off.Products, ",") != a100 {
		t.Errorf("1g.10gb of the A100s offered %+v", off)
	}
	if off := FixedMIGOffer(nodes, submit.Request{MIG: "3g.40gb"}); strings.Join(off.Mixed, ",") != "mixed-1" || len(off.Single) != 0 {
		t.Errorf("3g.40gb offered %+v", off)
	}
	single := func(count, pods int, products ...string) submit.Request {
		return submit.Request{Pods: pods, MIG: "1g.10gb", MIGCount: count, MIGSingle: true, MIGProducts: products}
	}
	for _, c := range []struct {
		r    submit.Request
		want string // empty: fits
	}{
		{single(7, 1, a100), ""},
		{single(2, 6, a100, h100), ""},
		{single(8, 1, a100, h100), "--mig 1g.10gb --mig-strategy single --gpu-count 8: no node can hold it: the most 1g.10gb instances on one node of the cluster's nodes is 7 (single-a)"},
		{single(2, 4, a100), "a gang of 4 pods of 2 1g.10gb instance(s) each starts whole or not at all, and the cluster's nodes hold 3 such pods at most"},
		{single(1, 1, "NVIDIA-A30-MIG-1g.6gb"), "--mig 1g.10gb --mig-strategy single: no node of the cluster's nodes gives 1g.10gb instances as the device plugin's single strategy (nvidia.com/gpu, nvidia.com/gpu.product <model>-MIG-1g.10gb); mixed-1 has them as the mixed strategy's nvidia.com/mig-1g.10gb: ask with --mig-strategy mixed"},
	} {
		err := Fits(nodes, c.r)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v,\nwant %q", c.r, err, c.want)
		}
	}
}

// A MIG pod's GPUs are its instances' part of a GPU, as its queue counts them: booked or
// asked, of either strategy (a 1g.10gb is 1/7, 0.142); not 1 for a pinned nvidia.com/gpu,
// nor 0 for the mixed strategy's resource.
func TestMIGPodGPUs(t *testing.T) {
	one := resource.MustParse("1")
	pinned := func(name, node string, ann map[string]string, n string) *corev1.Pod {
		p := migPodOn(name, node, ann, corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse(n)})
		p.Spec.NodeSelector = map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
		return p
	}
	for _, c := range []struct {
		p    *corev1.Pod
		want float64
	}{
		{pinned("bound", "single-1", map[string]string{v1alpha1.AnnotationMIGInstances: "mig-gpu-0/1g.10gb@3"}, "1"), 0.142},
		{pinned("waiting", "", nil, "2"), 0.284},
		{migPodOn("mixed-waiting", "", nil, corev1.ResourceList{"nvidia.com/mig-3g.40gb": one}), 0.428},
		{migPodOn("mixed-bound", "mig-1", map[string]string{v1alpha1.AnnotationMIGInstances: "#0/3g.40gb@4"}, corev1.ResourceList{"nvidia.com/mig-3g.40gb": one}), 0.428},
		{migPodOn("made", "dyn-1", map[string]string{v1alpha1.AnnotationMIG: "smallest", v1alpha1.AnnotationGPUFraction: "0.4", v1alpha1.AnnotationMIGInstances: "GPU-1/3g.40gb@4"}, nil), 0.428},
		{migPodOn("sizing", "", map[string]string{v1alpha1.AnnotationMIG: "smallest", v1alpha1.AnnotationGPUFraction: "0.4"}, nil), 0.4},
		{migPodOn("whole", "", nil, corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("2")}), 2},
	} {
		if got := PodGPUs(c.p); got != c.want {
			t.Errorf("%s: %v GPUs, want %v", c.p.Name, got, c.want)
		}
	}
}
