package stack_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

const ascendResource = corev1.ResourceName("huawei.com/Ascend910")

// ascendPod is a pod asking for n Ascend devices, as allot submit --accelerator ascend -g n
// writes it.
func ascendPod(name, queue string, n int64, ann map[string]string) *corev1.Pod {
	p := kubetest.PodSpec{Name: name, Queue: queue, Annotations: ann}.Pod()
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{ascendResource: *resource.NewQuantity(n, resource.DecimalSI)}
	return p
}

// An Ascend node and an NVIDIA node under one set of queues, with the scheduler's default
// table of kinds:
//
//	ascend-1: [910B3 ×8]        dgx-1: [A100 ×8]
//	mixed: gpu quota 4, ascend quota 4    npu: ascend quota 4    gpus: gpu quota 4
//
// Ascend pods land on the Ascend node only and count against their queue's Ascend quota
// and fair share, never its GPUs'; an Ascend queue and an NVIDIA queue each get their own
// kind's fair share; the Queue's status shows both kinds, keyed by nvidia.com/gpu and by
// the kind's first resource. A pod asking more Ascend devices than any node has waits
// saying so in Ascend devices, and what no node could give (a fraction of an NPU, an NPU
// with a GPU, a queue's quota of a kind the scheduler does not know) is refused at
// admission.
func TestAscendAndNVIDIAUnderOneSetOfQueues(t *testing.T) {
	kinds := convert.DefaultTable()
	ascend, _ := kinds.Kind("ascend")
	e := kubetest.StartNodes(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 8},
		simnode.Spec{Prefix: "ascend", Count: 1, GPUs: 8, GPUType: "910B3", GPUMemoryMi: 64 << 10, Kind: &ascend})
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond, Accelerators: kinds}); err != nil {
		t.Fatal(err)
	}
	quota := func(n int64) map[string]any { return map[string]any{"quota": n} }
	e.Queue(t, "mixed", 4, map[string]any{"accelerators": map[string]any{"ascend": quota(4)}})
	e.Queue(t, "npu", 0, map[string]any{"accelerators": map[string]any{"ascend": quota(4)}})
	e.Queue(t, "gpus", 4, nil)
	create := func(p *corev1.Pod) error {
		_, err := e.Client.CoreV1().Pods(p.Namespace).Create(e.Ctx, p, metav1.CreateOptions{})
		return err
	}
	mustCreate := func(p *corev1.Pod) {
		t.Helper()
		if err := create(p); err != nil {
			t.Fatal(err)
		}
	}

	// Refused at admission, naming both sides.
	both := ascendPod("both", "mixed", 1, nil)
	both.Spec.Containers[0].Resources.Limits[corev1.ResourceName(v1alpha1.GPUResource)] = resource.MustParse("1")
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{ascendPod("half-npu", "mixed", 1, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}), "fractions are NVIDIA GPUs only"},
		{both, "the pod asks for huawei.com/Ascend910 (ascend) and nvidia.com/gpu: a pod asks for devices of one kind"},
	} {
		if err := create(c.pod); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.pod.Name, err, c.want)
		}
	}
	tpu := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "tpus"}, Spec: v1alpha1.QueueSpec{Accelerators: map[string]v1alpha1.GPUQuota{"tpu": {Quota: 4}}}}
	if _, err := e.Allot.AllotV1alpha1().Queues().Create(e.Ctx, tpu, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.accelerators: tpu is not a kind the scheduler schedules: its --accelerators turns on amd, intel, ascend") {
		t.Errorf("a queue of tpus: %v", err)
	}

	// More Ascend devices than any node has: it waits, in Ascend devices (the NVIDIA node's
	// eight GPUs are not Ascend devices).
	mustCreate(ascendPod("huge", "mixed", 16, nil))
	e.WaitFor(t, "huge waits, naming the kind", func() (bool, string) {
		p := e.Pods(t, "default")["huge"]
		r := waitingReason(p)
		return !kubetest.Bound(p) && r == "needs 16 ascend devices on one node; the largest node it may use has 8", r
	})
	if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, "huge", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// mixed: two pods of 2 Ascend devices and one of 2 GPUs; npu: four of 2 Ascend
	// devices; gpus: four of 2 GPUs.
	for i := 1; i <= 2; i++ {
		mustCreate(ascendPod(fmt.Sprintf("mixed-npu-%d", i), "mixed", 2, nil))
	}
	e.MustPod(t, kubetest.PodSpec{Name: "mixed-gpu", Queue: "mixed", GPUs: 2})
	for i := 1; i <= 4; i++ {
		mustCreate(ascendPod(fmt.Sprintf("npu-%d", i), "npu", 2, nil))
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("gpus-%d", i), Queue: "gpus", GPUs: 2})
	}
	// Ascend: 8 devices, quotas 4 and 4 → mixed 4, npu 4. GPUs: 8, mixed wants 2 of its 4,
	// gpus 4 and what is left → 2 and 6.
	running := func() map[string][]string {
		on := map[string][]string{}
		for name, p := range e.Pods(t, "default") {
			if kubetest.Running(p) {
				on[p.Spec.NodeName] = append(on[p.Spec.NodeName], name)
			}
		}
		for _, l := range on {
			sort.Strings(l)
		}
		return on
	}
	e.WaitFor(t, "each kind's fair shares held, each pod on a node of its kind", func() (bool, string) {
		on := running()
		count := func(node, prefix string) int {
			n := 0
			for _, name := range on[node] {
				if strings.HasPrefix(name, prefix) {
					n++
				}
			}
			return n
		}
		ok := len(on) == 2 && len(on["ascend-1"]) == 4 && count("ascend-1", "mixed-npu-") == 2 && count("ascend-1", "npu-") == 2 &&
			len(on["dgx-1"]) == 4 && count("dgx-1", "mixed-gpu") == 1 && count("dgx-1", "gpus-") == 3
		return ok, fmt.Sprint(on)
	})
	e.WaitFor(t, "npu's two waiting pods name its Ascend fair share", func() (bool, string) {
		var waiting []string
		for name, p := range e.Pods(t, "default") {
			if strings.HasPrefix(name, "npu-") && !kubetest.Bound(p) {
				if r := waitingReason(p); !strings.Contains(r, "queue npu is at its fair share 4/4 ascend") {
					return false, name + ": " + r
				}
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 2, fmt.Sprint(waiting)
	})

	// Each queue's status in its own kinds: mixed both, npu Ascend devices alone, gpus
	// GPUs alone (no row of zero Ascend devices).
	want := map[string]map[string]map[corev1.ResourceName]string{
		"mixed": {"fairShare": {"nvidia.com/gpu": "2", ascendResource: "4"}, "allocated": {"nvidia.com/gpu": "2", ascendResource: "4"}},
		"npu":   {"fairShare": {"nvidia.com/gpu": "0", ascendResource: "4"}, "allocated": {"nvidia.com/gpu": "0", ascendResource: "4"}, "requested": {ascendResource: "8"}},
		"gpus":  {"fairShare": {"nvidia.com/gpu": "6"}, "allocated": {"nvidia.com/gpu": "6"}},
	}
	e.WaitFor(t, "queue status per kind", func() (bool, string) {
		for name, fields := range want {
			q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			lists := map[string]corev1.ResourceList{"fairShare": q.Status.FairShare, "allocated": q.Status.Allocated, "requested": q.Status.Requested}
			for field, kv := range fields {
				for r, v := range kv {
					got, ok := lists[field][r]
					if !ok || got.Cmp(resource.MustParse(v)) != 0 {
						return false, fmt.Sprintf("queue %s: %s %s is %v, want %s (%v)", name, field, r, got.String(), v, lists[field])
					}
				}
			}
			if _, shown := q.Status.FairShare[ascendResource]; name == "gpus" && shown {
				return false, "queue gpus shows Ascend devices it has no quota of and holds none of"
			}
		}
		return true, ""
	})
}
