package convert

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

func gpuNode(ann map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: ann,
		Labels: map[string]string{v1alpha1.LabelGPUMemory: "81920"}}}
	n.Status.Allocatable = corev1.ResourceList{GPUResource: resource.MustParse("4")}
	n.Status.Capacity = n.Status.Allocatable
	return n
}

// An admin's cordon list takes the devices it names, by index or UUID, out of service with
// the reason people read; a cap on sharers reaches the engine; what names no device, and a
// cap that is no count, are reported by name and change nothing.
func TestCordonAndMaxSharers(t *testing.T) {
	uuids := "GPU-a,GPU-b,GPU-c,GPU-d"
	out := Node(gpuNode(map[string]string{v1alpha1.AnnotationGPUUUIDs: uuids, v1alpha1.AnnotationGPUCordon: "1, GPU-d",
		v1alpha1.AnnotationGPUMaxSharers: "3"}))
	var cordoned []int
	for g, gpu := range out.GPUs {
		if gpu.Cordoned != "" {
			cordoned = append(cordoned, g)
			if gpu.Cordoned != "cordoned by an admin (allot.dev/gpu-cordon)" || gpu.OutOfService() != gpu.Cordoned {
				t.Errorf("GPU %d: %q", g, gpu.Cordoned)
			}
		}
	}
	if !reflect.DeepEqual(cordoned, []int{1, 3}) || out.MaxSharers != 3 {
		t.Errorf("cordoned %v, max sharers %d; want [1 3] and 3", cordoned, out.MaxSharers)
	}
	all := Node(gpuNode(map[string]string{v1alpha1.AnnotationGPUCordon: "all"}))
	for g, gpu := range all.GPUs {
		if gpu.Cordoned == "" {
			t.Errorf("all: GPU %d in service", g)
		}
	}
	bad := gpuNode(map[string]string{v1alpha1.AnnotationGPUUUIDs: uuids, v1alpha1.AnnotationGPUCordon: "7,GPU-z,2",
		v1alpha1.AnnotationGPUMaxSharers: "many"})
	problems := strings.Join(NodeProblems(bad), "\n")
	for _, want := range []string{`annotation allot.dev/gpu-cordon: "7,GPU-z,2": 7, GPU-z names no device`, `annotation allot.dev/gpu-max-sharers: "many" is not a whole number`} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems %q, want %q", problems, want)
		}
	}
	if n := Node(bad); n.MaxSharers != 0 || n.GPUs[2].Cordoned == "" || n.GPUs[0].Cordoned != "" {
		t.Errorf("bad values: %+v", n)
	}
}

// A slice of compute alone, of several devices, and the device choice reach the engine.
func TestSliceAndChoiceReachTheEngine(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationGPUCompute: "30", v1alpha1.AnnotationGPUCount: "2"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if r := PodRequest(p); r.GPUCompute != 300 || r.Devices != 2 || r.GPUFraction != 0 || r.GPUMemory != 0 || !r.Shared() {
		t.Errorf("request %+v, want 300 thousandths of compute on each of 2 devices", r)
	}
	p.Annotations = map[string]string{v1alpha1.AnnotationGPUMemory: "8000Mi", v1alpha1.AnnotationGPUCompute: "30"}
	if r := PodRequest(p); r.GPUMemory != 8000<<20 || r.GPUCompute != 300 || r.Devices != 0 {
		t.Errorf("request %+v", r)
	}
	var job engine.Job
	err := JobChoice(&job, map[string]string{v1alpha1.AnnotationGPUUUIDPick: "GPU-a, GPU-b", v1alpha1.AnnotationGPUUUIDExclude: "GPU-c",
		v1alpha1.AnnotationGPUTypeExclude: "T4", v1alpha1.AnnotationGPUIsland: "required", v1alpha1.AnnotationNodePolicy: "spread",
		v1alpha1.AnnotationGPUPolicy: "binpack"})
	want := engine.Job{GPUUUIDs: []string{"GPU-a", "GPU-b"}, ExcludeGPUUUIDs: []string{"GPU-c"}, ExcludeGPUTypes: []string{"T4"},
		SameIsland: true, NodePacking: engine.PackingSpread, GPUPacking: engine.PackingBinPack}
	if err != nil || !reflect.DeepEqual(job, want) {
		t.Errorf("job %+v, %v", job, err)
	}
	if err := JobChoice(&job, map[string]string{v1alpha1.AnnotationGPUPolicy: "topology-aware"}); err == nil ||
		!strings.Contains(err.Error(), `allot.dev/gpu-policy: "topology-aware" is not allowed: binpack or spread`) {
		t.Errorf("policy: %v", err)
	}
}

// Where the agent lists a node's devices, each is booked by its own size less what its
// driver reserves (GPUs of different sizes on one node, which GPU Feature Discovery's one
// label cannot say); a device the inventory does not list, or lists under another UUID,
// keeps the label's size.
func TestSlicesAreBookedOfWhatTheDriverLeaves(t *testing.T) {
	inv := `[{"index":0,"uuid":"GPU-a","model":"H200","memoryMiB":143771,"reservedMiB":616},` +
		`{"index":1,"uuid":"GPU-b","model":"H100","memoryMiB":81559,"reservedMiB":480},` +
		`{"index":2,"uuid":"GPU-x","model":"H100","memoryMiB":81559}]`
	out := Node(gpuNode(map[string]string{v1alpha1.AnnotationGPUUUIDs: "GPU-a,GPU-b,GPU-c,GPU-d", v1alpha1.AnnotationGPUInventory: inv}))
	want := []int64{143771 - 616, 81559 - 480, 81920, 81920}
	for g, mi := range want {
		if got := out.GPUs[g].Memory >> 20; got != mi {
			t.Errorf("GPU %d booked of %d MiB, want %d", g, got, mi)
		}
	}
}

// A node whose GPUs' size nobody published takes no slice: its limit would be of nothing,
// which HAMi-core reads as none.
func TestNoSliceWhereTheGPUsSizeIsNotKnown(t *testing.T) {
	n := gpuNode(nil)
	n.Labels[v1alpha1.LabelGPUDelivery] = v1alpha1.DeliveryEnv
	if got := Node(n).NoFractions; got != "" {
		t.Fatalf("a node of known size: %q", got)
	}
	delete(n.Labels, v1alpha1.LabelGPUMemory)
	if got := Node(n).NoFractions; !strings.Contains(got, "size of the node's GPUs is not known") {
		t.Fatalf("a node of unknown size takes slices: %q", got)
	}
}
