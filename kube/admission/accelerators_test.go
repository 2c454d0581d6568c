package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// With the scheduler's table, a pod of a kind it schedules is admitted at both webhooks;
// what no node could give it is refused at admission, naming both sides: a slice beside
// another vendor's device ("fractions are NVIDIA GPUs only"), two kinds, a kind with
// nvidia.com/gpu, a kind that is off, another vendor's slice resource.
func TestAcceleratorPodsAtAdmission(t *testing.T) {
	kinds, err := convert.ParseAccelerators([]string{"ascend,amd"})
	if err != nil {
		t.Fatal(err)
	}
	asking := func(ann map[string]string, res ...string) *corev1.Pod {
		p := pod("team-a", 0, nil, ann)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
		for i := 0; i+1 < len(res); i += 2 {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(res[i])] = resource.MustParse(res[i+1])
		}
		return p
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" = admitted
	}{
		{"ascend", asking(nil, "huawei.com/Ascend910", "2"), ""},
		{"amd", asking(nil, "amd.com/gpu", "1"), ""},
		{"a fraction of an NPU", asking(map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}, "huawei.com/Ascend910", "1"),
			"fractions are NVIDIA GPUs only: allot.dev/gpu-fraction, allot.dev/gpu-memory or allot.dev/gpu-compute with huawei.com/Ascend910 (ascend) is not allowed"},
		{"GPU memory on an AMD GPU", asking(map[string]string{v1alpha1.AnnotationGPUMemory: "8Gi"}, "amd.com/gpu", "1"), "fractions are NVIDIA GPUs only"},
		{"with nvidia.com/gpu", asking(nil, "huawei.com/Ascend910", "1", "nvidia.com/gpu", "1"),
			"the pod asks for huawei.com/Ascend910 (ascend) and nvidia.com/gpu: a pod asks for devices of one kind"},
		{"two kinds", asking(nil, "huawei.com/Ascend910", "1", "amd.com/gpu", "1"), "amd.com/gpu (amd) and huawei.com/Ascend910 (ascend)"},
		{"a kind that is off", asking(nil, "cambricon.com/mlu", "1"),
			"cambricon.com/mlu is not honoured: Allot schedules NVIDIA GPUs and whole devices of the kinds the scheduler's --accelerators turns on (ascend, amd)"},
		{"HAMi's NPU memory", asking(nil, "huawei.com/Ascend910", "1", "huawei.com/Ascend910-memory", "4096"), "huawei.com/Ascend910-memory is not honoured"},
	} {
		err := (Peers{Accelerators: kinds}).Translate(c.pod.DeepCopy())
		if err == nil {
			err = ValidatePod(c.pod, view{}, kinds)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v,\nwant %q", c.name, err, c.want)
		}
	}
	// Without the table (NVIDIA's GPUs only), every other vendor's device is refused.
	if err := (Peers{}).Translate(asking(nil, "huawei.com/Ascend910", "1")); err == nil || !strings.Contains(err.Error(), "turns on (none: NVIDIA GPUs only)") {
		t.Errorf("no table: %v", err)
	}
}

// A Queue's quota of a kind the scheduler does not schedule is refused when it is created.
func TestQueueOfAnUnknownKindIsRefused(t *testing.T) {
	kinds, err := convert.ParseAccelerators([]string{"ascend"})
	if err != nil {
		t.Fatal(err)
	}
	v := &QueueValidator{View: view{}, Accelerators: kinds}
	ok := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "npu"}, Spec: v1alpha1.QueueSpec{Accelerators: map[string]v1alpha1.GPUQuota{"ascend": {Quota: 16}}}}
	if err := v.checkKinds(ok); err != nil {
		t.Errorf("ascend refused: %v", err)
	}
	bad := ok.DeepCopy()
	bad.Spec.Accelerators["tpu"] = v1alpha1.GPUQuota{Quota: 4}
	want := "spec.accelerators: tpu is not a kind the scheduler schedules: its --accelerators turns on ascend"
	if err := v.checkKinds(bad); err == nil || err.Error() != want {
		t.Errorf("tpu: %v,\nwant %q", err, want)
	}
}
