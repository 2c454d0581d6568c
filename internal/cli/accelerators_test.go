package cli

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// allot queues shows, below the GPU table and only where some queue has them, each queue's
// devices of other vendors' kinds: quota, fair share and allocation, read from the keys the
// scheduler writes (the kind's first resource); allot top nodes names each node's kind and
// totals each kind apart from NVIDIA's GPUs.
func TestQueuesAndNodesShowOtherKinds(t *testing.T) {
	list := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i+1 < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	limit := int32(12)
	mixed := v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "mixed"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 4},
		Accelerators: map[string]v1alpha1.GPUQuota{"ascend": {Quota: 8, Limit: &limit}}},
		Status: v1alpha1.QueueStatus{FairShare: list("nvidia.com/gpu", "4", "huawei.com/Ascend910", "8"),
			Allocated: list("nvidia.com/gpu", "2", "huawei.com/Ascend910", "6"), Requested: list("nvidia.com/gpu", "2", "huawei.com/Ascend910", "10")}}
	gpuOnly := v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 4}},
		Status: v1alpha1.QueueStatus{FairShare: list("nvidia.com/gpu", "4")}}
	var out bytes.Buffer
	if err := printQueues(&out, []v1alpha1.Queue{gpuOnly, mixed}, 8); err != nil {
		t.Fatal(err)
	}
	text := regexpSpaces(out.String())
	for _, want := range []string{"OTHER ACCELERATORS", "QUEUE KIND QUOTA LIMIT FAIR SHARE ALLOCATED REQUESTED", "mixed ascend 8 12 8 6 10"} {
		if !strings.Contains(text, want) {
			t.Errorf("allot queues lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(text, "gpus ascend") {
		t.Errorf("a queue with no ascend device shows a row of them:\n%s", out.String())
	}
	out.Reset()
	if err := printQueues(&out, []v1alpha1.Queue{gpuOnly}, 8); err != nil || strings.Contains(out.String(), "OTHER ACCELERATORS") {
		t.Errorf("a cluster of NVIDIA's GPUs only shows the kinds' table (%v):\n%s", err, out.String())
	}

	out.Reset()
	nodes := []inspect.Node{
		{Name: "ascend-1", Model: "910B3", Accelerator: "ascend", Allocated: 6, GPUs: make([]inspect.GPU, 8)},
		{Name: "dgx-1", Model: "H100", Allocated: 2, GPUs: make([]inspect.GPU, 8)},
	}
	if err := printNodes(&out, nodes); err != nil {
		t.Fatal(err)
	}
	text = regexpSpaces(out.String())
	for _, want := range []string{"ascend-1 910B3 [ascend] 6/8", "dgx-1 H100 2/8", "Allocated/Total GPUs: 2/8 (25%)", "Allocated/Total ascend devices: 6/8"} {
		if !strings.Contains(text, want) {
			t.Errorf("allot top nodes lacks %q:\n%s", want, out.String())
		}
	}
}

// regexpSpaces folds the runs of spaces a tabwriter pads with into one.
func regexpSpaces(s string) string { return strings.Join(strings.Fields(s), " ") }

// allot up --accelerator ascend:2x8 makes two simulated nodes of eight Ascend devices,
// named for their kind, of the kind's resource and labels; what is not KIND:NODESxDEVICES
// of a kind on is refused naming the form.
func TestUpAcceleratorNodes(t *testing.T) {
	specs, err := parseAcceleratorNodes([]string{"ascend:2x8", "amd:1x4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Prefix != "ascend" || specs[0].Count != 2 || specs[0].GPUs != 8 || specs[0].Kind.Resources[0] != "huawei.com/Ascend910" ||
		specs[1].Kind.Name != "amd" || specs[1].GPUType == "" {
		t.Errorf("specs %+v", specs)
	}
	for _, v := range []string{"ascend", "ascend:2", "ascend:0x8", "ascend:1x65", "tpu:1x8", "neuroncore:1x8"} {
		if _, err := parseAcceleratorNodes([]string{v}); err == nil || !strings.Contains(err.Error(), "KIND:NODESxDEVICES such as ascend:2x8, with KIND one of amd, intel, ascend, cambricon, hygon, neuron") {
			t.Errorf("%s: %v", v, err)
		}
	}
	if _, err := parseAcceleratorNodes([]string{"ascend:1x8", "ascend:1x4"}); err == nil || !strings.Contains(err.Error(), "kind ascend is given twice") {
		t.Errorf("twice: %v", err)
	}
}
