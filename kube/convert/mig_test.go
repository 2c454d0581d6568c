package convert

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// A mixed node: GPU 0 whole, GPU 1 in MIG mode with a 3g and a 2g. The whole GPU keeps
// index 0 and its own UUID (the device plugin's nvidia.com/gpu counts it alone); the MIG
// GPU follows with its layout, fixed, or Allot's to change where the node is marked.
func TestMixedNodeListsWholeGPUsThenMIGLayouts(t *testing.T) {
	inv := []v1alpha1.GPUInfo{
		{Index: 0, UUID: "GPU-mig", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true, NVLink: 0,
			MIGInstances: []v1alpha1.MIGInstance{{Profile: "3g.40gb", Start: 4, UUID: "MIG-a"}, {Profile: "2g.20gb", Start: 0, UUID: "MIG-b"}}},
		{Index: 1, UUID: "GPU-whole", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NVLink: 0},
	}
	raw, _ := json.Marshal(inv)
	n := gpuNode(map[string]string{v1alpha1.AnnotationGPUUUIDs: "GPU-mig,GPU-whole", v1alpha1.AnnotationGPUInventory: string(raw)})
	n.Labels[v1alpha1.LabelGPUProduct] = "NVIDIA-A100-SXM4-80GB"
	n.Status.Allocatable[GPUResource] = resource.MustParse("1")
	n.Status.Capacity[GPUResource] = resource.MustParse("1")
	out := Node(n)
	if len(out.GPUs) != 2 || out.GPUs[0].UUID != "GPU-whole" || out.GPUs[0].MIG != nil {
		t.Fatalf("GPU 0 should be the whole GPU-whole: %+v", out.GPUs)
	}
	m := out.GPUs[1].MIG
	if out.GPUs[1].UUID != "GPU-mig" || m == nil || m.Dynamic || m.Model.Name != "A100-80GB" || len(m.Instances) != 2 || m.Instances[0].UUID != "MIG-a" {
		t.Fatalf("GPU 1 should be GPU-mig with its fixed layout: %+v %+v", out.GPUs[1], m)
	}
	n.Labels[v1alpha1.LabelMIGDynamic] = "true"
	if out := Node(n); !out.GPUs[1].MIG.Dynamic {
		t.Error("a node marked allot.dev/mig-dynamic=true is Allot's to lay out")
	}
}

// Without the agent, the device plugin's advertised instances are laid out on as few GPUs
// of the node's model as hold them: two 3g and seven 1g need two A100s.
func TestAdvertisedInstancesWithoutTheAgent(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mixed", Labels: map[string]string{
		v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"}}}
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("2"), "nvidia.com/mig-1g.10gb": resource.MustParse("7")}
	out := Node(n)
	if len(out.GPUs) != 2 {
		t.Fatalf("want 2 GPUs in MIG mode, got %+v", out.GPUs)
	}
	count := map[string]int{}
	for _, g := range out.GPUs {
		for _, in := range g.MIG.Instances {
			count[in.Profile]++
		}
	}
	if count["3g.40gb"] != 2 || count["1g.10gb"] != 7 {
		t.Errorf("instances %v, want 2 × 3g.40gb and 7 × 1g.10gb", count)
	}
}

func podWith(ann map[string]string, res corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: res}}}}}
}

func TestMIGRequests(t *testing.T) {
	r := PodRequest(podWith(nil, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2")}))
	if r.MIG != "1g.10gb" || r.Devices != 2 || r.MIGFrom != engine.MIGFixed {
		t.Errorf("device plugin resource: %+v", r)
	}
	r = PodRequest(podWith(map[string]string{v1alpha1.AnnotationMIG: "smallest", v1alpha1.AnnotationGPUFraction: "0.5"}, nil))
	if r.MIGShare != 500 || r.Shared() || r.MIGFrom != engine.MIGDynamic {
		t.Errorf("smallest holding half: %+v", r)
	}
	r = PodRequest(podWith(map[string]string{v1alpha1.AnnotationMIG: "3g.40gb"}, nil))
	if r.MIG != "3g.40gb" || r.MIGFrom != engine.MIGDynamic {
		t.Errorf("a profile laid out by Allot: %+v", r)
	}
	for _, bad := range []*corev1.Pod{
		podWith(map[string]string{v1alpha1.AnnotationMIG: "3g.40gb"}, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}),
		podWith(nil, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1"), "nvidia.com/mig-2g.20gb": resource.MustParse("1")}),
		podWith(map[string]string{v1alpha1.AnnotationMIG: "smallest"}, nil),
		podWith(map[string]string{v1alpha1.AnnotationMIG: "big"}, nil),
	} {
		if err := MIGRequest(bad, &engine.PodRequest{}); err == nil {
			t.Errorf("pod %v %v: no error", bad.Annotations, bad.Spec.Containers[0].Resources.Limits)
		} else if !strings.Contains(err.Error(), "mig") {
			t.Errorf("error does not name what is wrong: %v", err)
		}
	}
}

// A bound pod's instances: where the kubelet gave them (the agent's record, by MIG device
// UUID) over where the scheduler booked them.
func TestMIGBindingFollowsTheKubelet(t *testing.T) {
	node := &engine.Node{GPUs: []engine.GPU{{UUID: "GPU-0"}, {UUID: "GPU-1", MIG: &engine.MIGDevice{Instances: []engine.MIGInstance{
		{Profile: "1g.10gb", Start: 0, UUID: "MIG-x"}, {Profile: "1g.10gb", Start: 6, UUID: "MIG-y"}}}}}}
	p := podWith(map[string]string{v1alpha1.AnnotationMIGInstances: "GPU-1/1g.10gb@0"}, nil)
	if g, st, prof, ok := MIGBinding(p, node); !ok || !slices.Equal(g, []int{1}) || !slices.Equal(st, []int{0}) || prof != "1g.10gb" {
		t.Errorf("booked: %v %v %q %v", g, st, prof, ok)
	}
	p.Annotations[v1alpha1.AnnotationGPUDevices] = "MIG-y"
	if _, st, _, ok := MIGBinding(p, node); !ok || !slices.Equal(st, []int{6}) {
		t.Errorf("the kubelet gave MIG-y at 6: %v %v", st, ok)
	}
	if _, st, _, ok := MIGBinding(podWith(map[string]string{v1alpha1.AnnotationMIGInstances: "#1/1g.10gb@6"}, nil), node); !ok || st[0] != 6 {
		t.Errorf("by index: %v %v", st, ok)
	}
}

// A request by size is judged with its size: "smallest" beside a fraction is no problem.
func TestMIGProblemReadsTheSize(t *testing.T) {
	if err := MIGProblem(podWith(map[string]string{v1alpha1.AnnotationMIG: "smallest", v1alpha1.AnnotationGPUFraction: "0.5"}, nil)); err != nil {
		t.Errorf("smallest holding half: %v", err)
	}
	if err := MIGProblem(podWith(map[string]string{v1alpha1.AnnotationMIG: "smallest"}, nil)); err == nil {
		t.Error("smallest without a size passed")
	}
}

// An agent that could not read a GPU's instances (no MIG monitor capability) reports it in
// MIG mode with none: the device plugin's counts stand for its layout.
func TestUnreadInstancesFallBackToTheDevicePlugin(t *testing.T) {
	inv, _ := json.Marshal([]v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true}})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fixed", Annotations: map[string]string{v1alpha1.AnnotationGPUInventory: string(inv)},
		Labels: map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"}}}
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("7")}
	out := Node(n)
	if len(out.GPUs) != 1 || out.GPUs[0].MIG == nil || len(out.GPUs[0].MIG.Instances) != 7 {
		t.Fatalf("GPUs %+v: want one in MIG mode with the plugin's seven 1g", out.GPUs)
	}
}

// A node asking Allot to lay out its MIG GPUs is refused, naming the label that turns the
// culprit off, where the GPU Operator's MIG manager acts on it or NVIDIA's device plugin
// runs there (by the operator's switch, or without the operator where it advertises
// GPUs or instances); with both switched off it is Allot's to lay out.
func TestMIGLayoutConflict(t *testing.T) {
	node := func(labels map[string]string, capacity corev1.ResourceList) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{v1alpha1.LabelMIGDynamic: "true"}}}
		for k, v := range labels {
			n.Labels[k] = v
		}
		n.Status.Capacity = capacity
		return n
	}
	one := resource.MustParse("1")
	for _, c := range []struct {
		name string
		n    *corev1.Node
		want []string // in the reason; none: no conflict
	}{
		{"the operator's defaults", node(map[string]string{LabelMIGConfig: "all-disabled", LabelDeployMIGManager: "true", LabelDeployDevicePlugin: "true", LabelMIGStrategy: "single"}, nil),
			[]string{"MIG manager applies nvidia.com/mig.config=all-disabled", "nvidia.com/gpu.deploy.mig-manager=false", "single MIG strategy it fails", "nvidia.com/gpu.deploy.device-plugin=false"}},
		{"the MIG manager alone", node(map[string]string{LabelMIGConfig: "all-balanced", LabelDeployDevicePlugin: "false"}, nil), []string{"all-balanced"}},
		{"a device plugin without the operator, none strategy", func() *corev1.Node {
			n := node(nil, corev1.ResourceList{"nvidia.com/gpu": one})
			raw, _ := json.Marshal([]v1alpha1.GPUInfo{{UUID: "GPU-mig", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true}})
			n.Annotations = map[string]string{v1alpha1.AnnotationGPUInventory: string(raw)}
			return n
		}(), []string{"none MIG strategy it offers the GPUs in MIG mode whole"}},
		{"a device plugin without the operator, mixed", node(map[string]string{LabelMIGStrategy: "mixed"}, corev1.ResourceList{"nvidia.com/mig-1g.10gb": one}), []string{"mixed MIG strategy"}},
		{"both switched off", node(map[string]string{LabelMIGConfig: "all-disabled", LabelDeployMIGManager: "false", LabelDeployDevicePlugin: "false", LabelMIGStrategy: "mixed"}, nil), nil},
		{"no operator, nothing advertised", node(map[string]string{LabelMIGStrategy: "mixed"}, nil), nil},
	} {
		got := MIGLayoutConflict(c.n)
		if (got == "") != (len(c.want) == 0) {
			t.Errorf("%s: %q, want a conflict: %v", c.name, got, len(c.want) > 0)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
		if en := Node(c.n); en.MIGNotLaidOut != got {
			t.Errorf("%s: the engine's node says %q, want %q", c.name, en.MIGNotLaidOut, got)
		}
		// Said on the Node too (the scheduler's Event of its problems).
		if said := strings.Join(NodeProblems(c.n), "\n"); (got != "") != strings.Contains(said, "not laid out by Allot") {
			t.Errorf("%s: the node's problems %q, want the conflict said: %v", c.name, said, got != "")
		}
	}
}
