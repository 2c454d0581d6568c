package convert

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// singleStrategyNode is a node with two A100-SXM4-40GB, each laid out as seven 1g.5gb, as
// the device plugin's single strategy and GPU Feature Discovery leave it: nvidia.com/gpu is
// the 14 instances, and GFD's labels are the instances' (the device plugin's
// internal/lm/mig-strategy.go and resource.go write them over the GPUs').
func singleStrategyNode() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "single-1", Labels: map[string]string{
		"nvidia.com/mig.strategy":        "single",
		"nvidia.com/gpu.product":         "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
		"nvidia.com/gpu.count":           "14",
		"nvidia.com/gpu.memory":          "4864",
		"nvidia.com/gpu.replicas":        "1",
		"nvidia.com/gpu.multiprocessors": "14",
		"nvidia.com/gpu.slices.gi":       "1",
		"nvidia.com/gpu.slices.ci":       "1",
		"nvidia.com/gpu.engines.copy":    "1",
		"nvidia.com/gpu.engines.decoder": "0",
		"nvidia.com/gpu.engines.encoder": "0",
		"nvidia.com/gpu.engines.jpeg":    "0",
		"nvidia.com/gpu.engines.ofa":     "0",
	}}}
	n.Status.Capacity = corev1.ResourceList{GPUResource: resource.MustParse("14")}
	n.Status.Allocatable = corev1.ResourceList{GPUResource: resource.MustParse("14")}
	return n
}

// Without the agent, a single-strategy node's nvidia.com/gpu are MIG instances of the
// product label's profile, laid out on as few GPUs of the model as hold them; none is a
// whole GPU, and the GPUs are the model's size (GFD's memory label is an instance's).
func TestSingleStrategyNodeIsMIGInstancesNotWholeGPUs(t *testing.T) {
	out := Node(singleStrategyNode())
	if len(out.GPUs) != 2 {
		t.Fatalf("want 2 A100s in MIG mode, got %d devices: %+v", len(out.GPUs), out.GPUs)
	}
	for g, d := range out.GPUs {
		if d.MIG == nil || d.MIG.Dynamic || d.MIG.Model.Name != "A100-40GB" || len(d.MIG.Instances) != 7 {
			t.Fatalf("GPU %d should be a fixed layout of seven 1g.5gb on an A100-40GB: %+v %+v", g, d, d.MIG)
		}
		for _, in := range d.MIG.Instances {
			if in.Profile != "1g.5gb" {
				t.Errorf("GPU %d has a %s", g, in.Profile)
			}
		}
		if d.Model != "NVIDIA-A100-SXM4-40GB" || d.Memory != 40<<30 || !strings.Contains(d.MIG.AskedBy, "nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") {
			t.Errorf("GPU %d: model %q, memory %d, asked by %q", g, d.Model, d.Memory, d.MIG.AskedBy)
		}
	}
	// The same labels without the strategy label are not GFD's single strategy.
	n := singleStrategyNode()
	delete(n.Labels, LabelMIGStrategy)
	if out := Node(n); len(out.GPUs) != 14 || out.GPUs[0].MIG != nil {
		t.Errorf("without %s: %d devices", LabelMIGStrategy, len(out.GPUs))
	}
}

// With the agent, its inventory (by NVML) gives the instances and their UUIDs; the node is
// still no whole GPU, and a pod is told how to ask for its instances.
func TestSingleStrategyNodeWithTheAgent(t *testing.T) {
	n := singleStrategyNode()
	var inv []v1alpha1.GPUInfo
	for g := range 2 {
		d := v1alpha1.GPUInfo{Index: g, UUID: []string{"GPU-a", "GPU-b"}[g], Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, MIG: true}
		for st := range 7 {
			d.MIGInstances = append(d.MIGInstances, v1alpha1.MIGInstance{Profile: "1g.5gb", Start: st, UUID: d.UUID + "-mig-" + string(rune('0'+st))})
		}
		inv = append(inv, d)
	}
	raw, _ := json.Marshal(inv)
	n.Annotations = map[string]string{v1alpha1.AnnotationGPUInventory: string(raw)}
	out := Node(n)
	if len(out.GPUs) != 2 || out.GPUs[0].UUID != "GPU-a" || out.GPUs[0].MIG == nil || len(out.GPUs[0].MIG.Instances) != 7 ||
		out.GPUs[0].MIG.Instances[3].UUID != "GPU-a-mig-3" || out.GPUs[0].MIG.AskedBy == "" || out.GPUs[0].Model != "NVIDIA-A100-SXM4-40GB" {
		t.Fatalf("want the agent's two GPUs of seven 1g.5gb: %+v", out.GPUs)
	}
	// The inventory lists the two GPUs while nvidia.com/gpu counts their 14 instances: both
	// are right, and neither is reported as a problem.
	if p := NodeProblems(n); len(p) != 0 {
		t.Errorf("problems on a well-formed single-strategy node: %q", p)
	}
}

// GFD's word that the instances are not of one profile (or a model Allot does not know):
// nothing is scheduled there, and the node's problems say why.
func TestInvalidSingleStrategyNode(t *testing.T) {
	n := singleStrategyNode()
	n.Labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
	n.Labels["nvidia.com/gpu.count"] = "0"
	if out := Node(n); len(out.GPUs) != 0 {
		t.Errorf("an invalid single-strategy node has %d devices", len(out.GPUs))
	}
	if p := strings.Join(NodeProblems(n), "; "); !strings.Contains(p, "not all of one profile") {
		t.Errorf("problems: %s", p)
	}
}

func pinnedPod(gpus string, selector map[string]string, terms ...[]string) *corev1.Pod {
	p := podWith(nil, corev1.ResourceList{GPUResource: resource.MustParse(gpus)})
	p.Spec.NodeSelector = selector
	if len(terms) > 0 {
		req := &corev1.NodeSelector{}
		for _, vals := range terms {
			t := corev1.NodeSelectorTerm{}
			if vals != nil {
				t.MatchExpressions = []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: vals}}
			} else {
				t.MatchExpressions = []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}
			}
			req.NodeSelectorTerms = append(req.NodeSelectorTerms, t)
		}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: req}}
	}
	return p
}

// A pod's nvidia.com/gpu is instances of a single-strategy profile only where the pod is
// pinned to that product; else it is whole GPUs, which such a node does not have.
func TestSingleStrategyPodRequests(t *testing.T) {
	const product = "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
	for _, p := range []*corev1.Pod{
		pinnedPod("2", map[string]string{v1alpha1.LabelGPUProduct: product}),
		pinnedPod("2", nil, []string{product}),
		pinnedPod("2", nil, []string{product}, []string{"NVIDIA-A100-PCIE-40GB-MIG-1g.5gb"}),
	} {
		r := PodRequest(p)
		if r.GPUs != 0 || r.MIG != "1g.5gb" || r.Devices != 2 || r.MIGFrom != engine.MIGFixed {
			t.Errorf("pinned %v %v: %+v, want two 1g.5gb of a fixed layout", p.Spec.NodeSelector, p.Spec.Affinity, r)
		}
		if err := MIGProblem(p); err != nil {
			t.Errorf("pinned pod refused: %v", err)
		}
	}
	for _, p := range []*corev1.Pod{
		pinnedPod("1", nil),
		pinnedPod("1", map[string]string{LabelMIGStrategy: "single"}), // on every GPU node of the strategy, MIG or not
		pinnedPod("1", map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-40GB"}),
	} {
		if r := PodRequest(p); r.GPUs != 1 || r.WantsMIG() {
			t.Errorf("unpinned %v: %+v, want one whole GPU", p.Spec.NodeSelector, r)
		}
	}
	sliced := pinnedPod("1", map[string]string{v1alpha1.LabelGPUProduct: product})
	sliced.Annotations = map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}
	both := pinnedPod("1", map[string]string{v1alpha1.LabelGPUProduct: product})
	both.Spec.Containers[0].Resources.Limits["nvidia.com/mig-1g.5gb"] = resource.MustParse("1")
	for name, c := range map[string]struct {
		p    *corev1.Pod
		want string // the phrase that says what is wrong with it
	}{
		"MIG and whole products":  {pinnedPod("1", nil, []string{product, "NVIDIA-A100-SXM4-40GB"}), "and other nodes"},
		"a term left unpinned":    {pinnedPod("1", nil, []string{product}, nil), "and other nodes"},
		"two profiles":            {pinnedPod("1", nil, []string{product, "NVIDIA-A100-SXM4-40GB-MIG-2g.10gb"}), "two profiles"},
		"a slice of an instance":  {sliced, "not shared in slices"},
		"both ways of asking MIG": {both, "asked one way"},
	} {
		err := MIGProblem(c.p)
		if err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming nvidia.com/gpu and saying %q", name, err, c.want)
		}
	}
}
