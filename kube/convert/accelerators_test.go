package convert

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

func mustTable(t *testing.T, values ...string) *Accelerators {
	t.Helper()
	a, err := ParseAccelerators(values)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func accelNode(labels map[string]string, allocatable map[corev1.ResourceName]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")}
	for r, v := range allocatable {
		n.Status.Allocatable[r] = resource.MustParse(v)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

func accelPod(annotations map[string]string, limits ...map[corev1.ResourceName]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: annotations}}
	for i, l := range limits {
		c := corev1.Container{Name: string(rune('a' + i)), Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		for r, v := range l {
			c.Resources.Limits[r] = resource.MustParse(v)
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// The default table turns on six kinds, in the engine's order; --accelerators chooses
// which, and a definition adds a kind or replaces a default's names.
func TestAcceleratorsTable(t *testing.T) {
	def := DefaultTable()
	if got := def.Names(); !slices.Equal(got, []string{"amd", "intel", "ascend", "cambricon", "hygon", "neuron"}) {
		t.Errorf("default kinds %v", got)
	}
	if got := mustTable(t, "ascend,amd").Names(); !slices.Equal(got, []string{"ascend", "amd"}) {
		t.Errorf("ascend,amd turns on %v", got)
	}
	if got := mustTable(t, "none").Names(); len(got) != 0 {
		t.Errorf("none turns on %v", got)
	}
	custom := mustTable(t, "ascend", "tpu=google.com/tpu;model-label=cloud.google.com/gke-tpu-accelerator;memory-label=example.com/hbm;memory-unit=GiB")
	tpu, ok := custom.Kind("tpu")
	if !ok || !slices.Equal(tpu.Resources, []corev1.ResourceName{"google.com/tpu"}) || tpu.ModelLabels[0] != "cloud.google.com/gke-tpu-accelerator" ||
		tpu.MemoryLabel != "example.com/hbm" || tpu.MemoryUnit != MemoryGiB {
		t.Errorf("tpu defined as %+v", tpu)
	}
	// Redefining a default kind replaces its names.
	amd, _ := mustTable(t, "amd=amd.com/gpu,amd.com/mi300x").Kind("amd")
	if len(amd.Resources) != 2 || amd.MemoryLabel != "" {
		t.Errorf("amd redefined as %+v", amd)
	}

	for _, c := range []struct {
		values []string
		want   string
	}{
		{[]string{"tpu"}, `--accelerators "tpu": "tpu" is not a kind the scheduler knows; allowed: a kind's name (amd, intel, ascend`},
		{[]string{"amd,intel,ascend,cambricon,hygon,neuron,neuroncore"}, "7 kinds are on (amd, intel, ascend, cambricon, hygon, neuron, neuroncore), at most 6"},
		{[]string{"ascend", "ascend=huawei.com/x"}, "kind ascend is named twice"},
		{[]string{"npu=npu"}, `resource "npu" is not an extended resource name such as vendor.com/device`},
		{[]string{"x=nvidia.com/gpu"}, "resource nvidia.com/gpu is NVIDIA's GPUs, scheduled without this table"},
		{[]string{"Big=x.com/y"}, `kind name "Big" is not allowed: lower-case letters, digits and '-'`},
		{[]string{"x=x.com/y;memory-unit=MB"}, `memory-unit "MB" is not allowed: MiB, GiB, bytes or node-bytes`},
		{[]string{"x=x.com/y;color=red"}, `"color" is not a setting of a kind: model-label, memory-label or memory-unit`},
		{[]string{"x=amd.com/gpu", "amd"}, "kinds x and amd both ask for amd.com/gpu"},
	} {
		_, err := ParseAccelerators(c.values)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v,\nwant %q", c.values, err, c.want)
		}
	}
}

// A node without NVIDIA GPUs that has a kind's resource allocatable is a node of that kind:
// one device per unit, of the model and memory its vendor's labels give.
func TestAcceleratorNodes(t *testing.T) {
	a := mustTable(t, DefaultAcceleratorNames()...)
	for _, c := range []struct {
		name       string
		node       *corev1.Node
		kind       string
		count      int
		model      string
		memory     int64
		problemHas string
	}{
		{"Ascend 910B", accelNode(map[string]string{"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": "910B3"},
			map[corev1.ResourceName]string{"huawei.com/Ascend910": "8"}), "ascend", 8, "910B3", 0, ""},
		{"Ascend, older labels", accelNode(map[string]string{"accelerator": "huawei-Ascend910"},
			map[corev1.ResourceName]string{"huawei.com/Ascend910": "8"}), "ascend", 8, "huawei-Ascend910", 0, ""},
		{"AMD, VRAM in GiB", accelNode(map[string]string{"amd.com/gpu.product-name": "AMD_Instinct_MI300X", "amd.com/gpu.vram": "192G"},
			map[corev1.ResourceName]string{"amd.com/gpu": "8"}), "amd", 8, "AMD_Instinct_MI300X", 192 << 30, ""},
		{"Intel, memory of the node", accelNode(map[string]string{"gpu.intel.com/product": "Max_1550", "gpu.intel.com/memory.max": "274877906944"},
			map[corev1.ResourceName]string{"gpu.intel.com/i915": "2"}), "intel", 2, "Max_1550", 128 << 30, ""},
		{"Intel xe", accelNode(nil, map[corev1.ResourceName]string{"gpu.intel.com/xe": "4"}), "intel", 4, "", 0, ""},
		{"Neuron devices", accelNode(map[string]string{"node.kubernetes.io/instance-type": "trn1.32xlarge"},
			map[corev1.ResourceName]string{"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "32"}), "neuron", 16, "trn1.32xlarge", 0, ""},
		{"VRAM label garbled", accelNode(map[string]string{"amd.com/gpu.vram": "lots"}, map[corev1.ResourceName]string{"amd.com/gpu": "1"}),
			"amd", 1, "", 0, `label amd.com/gpu.vram: "lots" is not a number of GiB: amd device memory unknown`},
		{"NVIDIA wins", accelNode(nil, map[corev1.ResourceName]string{GPUResource: "4", "amd.com/gpu": "8"}), "", 4, "", 0,
			"allocatable has nvidia.com/gpu and amd (amd.com/gpu): counted as NVIDIA GPUs only"},
		{"two kinds", accelNode(nil, map[corev1.ResourceName]string{"amd.com/gpu": "2", "cambricon.com/mlu": "4"}), "amd", 2, "", 0,
			"allocatable has devices of 2 kinds, amd (amd.com/gpu) and cambricon (cambricon.com/mlu): counted as amd (amd.com/gpu) only"},
		{"past 64", accelNode(nil, map[corev1.ResourceName]string{"hygon.com/dcunum": "100"}), "hygon", 64, "", 0,
			"allocatable hygon.com/dcunum is 100: counted as 64"},
		{"negative", accelNode(nil, map[corev1.ResourceName]string{"hygon.com/dcunum": "-3"}), "", 0, "", 0,
			"allocatable hygon.com/dcunum is -3: counted as none"},
		{"kind not on", accelNode(nil, map[corev1.ResourceName]string{"aws.amazon.com/neuroncore": "32"}), "", 0, "", 0, ""},
	} {
		out := a.Node(c.node)
		if out.Accelerator != c.kind || len(out.GPUs) != c.count {
			t.Errorf("%s: kind %q with %d devices, want %q with %d", c.name, out.Accelerator, len(out.GPUs), c.kind, c.count)
			continue
		}
		for _, g := range out.GPUs {
			if c.kind != "" && (g.Model != c.model || g.Memory != c.memory) {
				t.Errorf("%s: device %+v, want model %q and %d bytes", c.name, g, c.model, c.memory)
			}
		}
		problems := strings.Join(a.AcceleratorProblems(c.node), "\n")
		if (c.problemHas == "") != (problems == "") || !strings.Contains(problems, c.problemHas) {
			t.Errorf("%s: problems %q, want %q", c.name, problems, c.problemHas)
		}
	}
	// Without the table the same node has no devices: NVIDIA's GPUs only.
	if out := (*Accelerators)(nil).Node(accelNode(nil, map[corev1.ResourceName]string{"amd.com/gpu": "8"})); len(out.GPUs) != 0 || out.Accelerator != "" {
		t.Errorf("no table: %+v", out)
	}
	// An admin cordons a device by index, as on NVIDIA's nodes.
	n := accelNode(nil, map[corev1.ResourceName]string{"cambricon.com/mlu": "4"})
	n.Annotations = map[string]string{v1alpha1.AnnotationGPUCordon: "1,3"}
	out := a.Node(n)
	for g, dev := range out.GPUs {
		if (dev.Cordoned != "") != (g == 1 || g == 3) {
			t.Errorf("device %d cordoned %q", g, dev.Cordoned)
		}
	}
}

// A pod asking for a kind's resource asks for that many whole devices of the kind; what no
// node could give it (two kinds, a kind with nvidia.com/gpu, a slice of a device that is not
// NVIDIA's, a kind that is not on) is a problem naming both sides.
func TestAcceleratorPods(t *testing.T) {
	a := mustTable(t, DefaultAcceleratorNames()...)
	one := func(r corev1.ResourceName, n string) map[corev1.ResourceName]string {
		return map[corev1.ResourceName]string{r: n}
	}
	for _, c := range []struct {
		name    string
		pod     *corev1.Pod
		kind    string
		gpus    int
		problem string
	}{
		{"ascend", accelPod(nil, one("huawei.com/Ascend910", "2")), "ascend", 2, ""},
		{"two containers", accelPod(nil, one("amd.com/gpu", "1"), one("amd.com/gpu", "3")), "amd", 4, ""},
		{"NVIDIA", accelPod(nil, one(GPUResource, "2")), "", 2, ""},
		{"nothing", accelPod(nil, one(corev1.ResourceCPU, "2")), "", 0, ""},
		{"with nvidia.com/gpu", accelPod(nil, one("huawei.com/Ascend910", "2"), one(GPUResource, "1")), "", 0,
			"the pod asks for huawei.com/Ascend910 (ascend) and nvidia.com/gpu: a pod asks for devices of one kind"},
		{"two kinds", accelPod(nil, one("huawei.com/Ascend910", "1"), one("amd.com/gpu", "1")), "", 0,
			"the pod asks for amd.com/gpu (amd) and huawei.com/Ascend910 (ascend): a pod asks for devices of one kind and one name"},
		{"a fraction of an NPU", accelPod(map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}, one("huawei.com/Ascend910", "1")), "", 0,
			"fractions are NVIDIA GPUs only: allot.dev/gpu-fraction, allot.dev/gpu-memory or allot.dev/gpu-compute with huawei.com/Ascend910 (ascend) is not allowed; ask for whole devices of ascend"},
		{"kind not on", accelPod(nil, one("aws.amazon.com/neuroncore", "2")), "", 0,
			"aws.amazon.com/neuroncore asks for kind neuroncore, which the scheduler does not schedule (its --accelerators turns on: amd, intel, ascend, cambricon, hygon, neuron)"},
	} {
		r, k := a.PodRequest(c.pod)
		if k.Name != c.kind || k.Problem != c.problem || (c.problem == "" && r.GPUs != c.gpus) {
			t.Errorf("%s: %d devices of %q (problem %q),\nwant %d of %q (problem %q)", c.name, r.GPUs, k.Name, k.Problem, c.gpus, c.kind, c.problem)
		}
		if c.kind != "" && r.Shared() {
			t.Errorf("%s: a request of another kind shares a device: %+v", c.name, r)
		}
	}
	// Without the table, a pod of another vendor asks for nothing Allot counts.
	if r, k := (*Accelerators)(nil).PodRequest(accelPod(nil, one("amd.com/gpu", "2"))); r.GPUs != 0 || k != (PodKind{}) {
		t.Errorf("no table: %+v %+v", r, k)
	}
}

// A Queue's spec.accelerators are its quotas of each kind, as the engine's resource of
// that kind; a kind the scheduler does not schedule counts for nothing and is named.
func TestAcceleratorQueues(t *testing.T) {
	a := mustTable(t, "amd,ascend")
	w, l := int32(2), int32(24)
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8},
		Accelerators: map[string]v1alpha1.GPUQuota{"ascend": {Quota: 16, OverQuotaWeight: &w, Limit: &l}, "tpu": {Quota: 4}, "gaudi": {Quota: 1}}}}
	out, unknown := a.Queue(q)
	asc := out.Resources[engine.AcceleratorResource(1)]
	if out.Resources[engine.ResourceGPU].Quota != 8000 || asc.Quota != 16000 || asc.Weight() != 2000 || *asc.Limit != 24000 ||
		out.Resources[engine.AcceleratorResource(0)].Quota != 0 {
		t.Errorf("queue resources %+v", out.Resources)
	}
	if !slices.Equal(unknown, []string{"gaudi", "tpu"}) {
		t.Errorf("unknown kinds %v", unknown)
	}
	want := "spec.accelerators: gaudi, tpu are not a kind the scheduler schedules: its --accelerators turns on amd, ascend"
	if got := a.UnknownKinds(unknown); got != want {
		t.Errorf("%q,\nwant %q", got, want)
	}
}
