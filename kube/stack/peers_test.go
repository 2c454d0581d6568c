package stack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/admission"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// peerPod is a pod as written for another scheduler, in alice's namespace.
func peerPod(name, schedulerName string, limits map[string]string, ann, labels map[string]string) *corev1.Pod {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	lim := corev1.ResourceList{}
	for k, v := range limits {
		lim[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Annotations: ann, Labels: labels},
		Spec: corev1.PodSpec{SchedulerName: schedulerName, Containers: []corev1.Container{{Name: "main", Image: "cuda",
			Resources: corev1.ResourceRequirements{Requests: res, Limits: lim}}}}}
}

// A pod written for HAMi (nvidia.com/gpu: 1 with gpumem 8000 and gpucores 30) and one
// written for KAI-Scheduler (gpu-fraction 0.5, queue label kai.scheduler/queue), both
// created by a tenant with the edit role and both with their own scheduler's name, which
// the admin had Allot take over, run on the cluster's one GPU, each held to what it asked:
// 8000Mi and 30% of the SMs, half the device. What was read from which name is on the
// pod. Then the tenant tries to change what the scheduler booked or where its pod may go,
// and names Allot cannot honour or that disagree are refused by name.
func TestPeerPodsShareOneGPUWithTheirLimits(t *testing.T) {
	e := kubetest.Start(t, 1, 1)
	if _, err := stack.LocalPeers(e.Ctx, e.Cluster.Config, e.Cluster.Config, e.Dir, "", scheduler.Options{Interval: 200 * time.Millisecond},
		admission.Peers{AdoptSchedulers: []string{"hami-scheduler", "kai-scheduler"}}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 1, nil)
	alice := tenant(t, e)
	create := func(p *corev1.Pod) error {
		_, err := alice.CoreV1().Pods("ml").Create(e.Ctx, p, metav1.CreateOptions{})
		return err
	}
	hami := peerPod("hami", "hami-scheduler", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"},
		nil, map[string]string{v1alpha1.LabelQueue: "team-a"})
	kai := peerPod("kai", "kai-scheduler", nil, map[string]string{"gpu-fraction": "0.5"}, map[string]string{"kai.scheduler/queue": "team-a"})
	for _, p := range []*corev1.Pod{hami, kai} {
		if err := create(p); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	e.WaitFor(t, "both running", func() (bool, string) {
		pods := e.Pods(t, "ml")
		return kubetest.Running(pods["hami"]) && kubetest.Running(pods["kai"]), fmt.Sprint(pods["hami"].Status.Phase, pods["kai"].Status.Phase)
	})
	pods := e.Pods(t, "ml")
	h, k := pods["hami"], pods["kai"]
	if h.Spec.NodeName != k.Spec.NodeName || h.Annotations[v1alpha1.AnnotationGPUs] != "0" || k.Annotations[v1alpha1.AnnotationGPUs] != "0" {
		t.Fatalf("hami on %s GPU %s, kai on %s GPU %s: want one GPU", h.Spec.NodeName, h.Annotations[v1alpha1.AnnotationGPUs], k.Spec.NodeName, k.Annotations[v1alpha1.AnnotationGPUs])
	}
	node, err := e.Client.CoreV1().Nodes().Get(e.Ctx, h.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	device := strings.Split(node.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")[0]
	for _, c := range []struct {
		p                                  *corev1.Pod
		memory, mps, percent, booked, comp string
		translated                         []string
	}{
		{h, "8000m", "0=8000M", "30", fmt.Sprint(8000 << 20), "300", []string{"spec.schedulerName=hami-scheduler → allot",
			"nvidia.com/gpumem=8000 → allot.dev/gpu-memory=8000Mi", "nvidia.com/gpucores=30 → allot.dev/gpu-compute=30"}},
		{k, "40960m", "0=40960M", "50", fmt.Sprint(int64(40960) << 20), "500", []string{"spec.schedulerName=kai-scheduler → allot",
			"gpu-fraction=0.5 → allot.dev/gpu-fraction=0.5", "kai.scheduler/queue=team-a → allot.dev/queue=team-a"}},
	} {
		env := e.ContainerEnv(t, c.p, "main")
		if env["NVIDIA_VISIBLE_DEVICES"] != device || env["CUDA_DEVICE_MEMORY_LIMIT"] != c.memory || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != c.mps ||
			env["CUDA_DEVICE_SM_LIMIT"] != c.percent || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != c.percent {
			t.Errorf("%s starts with %v, want device %s held to %s and %s%%", c.p.Name, env, device, c.memory, c.percent)
		}
		if c.p.Annotations[v1alpha1.AnnotationGPUShareMemory] != c.booked || c.p.Annotations[v1alpha1.AnnotationGPUShareCompute] != c.comp {
			t.Errorf("%s booked %s bytes and %s thousandths, want %s and %s", c.p.Name, c.p.Annotations[v1alpha1.AnnotationGPUShareMemory],
				c.p.Annotations[v1alpha1.AnnotationGPUShareCompute], c.booked, c.comp)
		}
		for _, w := range c.translated {
			if !strings.Contains(c.p.Annotations[v1alpha1.AnnotationTranslated], w) {
				t.Errorf("%s: %s %q lacks %q", c.p.Name, v1alpha1.AnnotationTranslated, c.p.Annotations[v1alpha1.AnnotationTranslated], w)
			}
		}
		if _, whole := c.p.Spec.Containers[0].Resources.Limits[v1alpha1.GPUResource]; whole || c.p.Spec.SchedulerName != v1alpha1.SchedulerName {
			t.Errorf("%s: limits %v, scheduler %s: want no nvidia.com/gpu (the kubelet would give whole GPUs), and allot", c.p.Name,
				c.p.Spec.Containers[0].Resources.Limits, c.p.Spec.SchedulerName)
		}
	}

	// The tenant may not change what was booked, what was asked or where it may go.
	fieldsPolicyInForce(t, e, alice, "ml", "hami")
	for _, c := range []struct{ what, patch, want string }{
		{"its booked memory", `{"metadata":{"annotations":{"allot.dev/gpu-share-memory":"85899345920"}}}`, "allot.dev/gpu-share-memory"},
		{"its booked compute", `{"metadata":{"annotations":{"allot.dev/gpu-share-compute":null}}}`, "allot.dev/gpu-share-compute"},
		{"its count", `{"metadata":{"annotations":{"allot.dev/gpu-count":"4"}}}`, "allot.dev/gpu-count"},
		{"the container given the slice", `{"metadata":{"annotations":{"allot.dev/gpu-container":"other"}}}`, "allot.dev/gpu-container"},
		{"its devices", `{"metadata":{"annotations":{"allot.dev/gpu-uuid":"GPU-x"}}}`, "allot.dev/gpu-uuid"},
		{"its excluded devices", `{"metadata":{"annotations":{"allot.dev/gpu-uuid-exclude":"GPU-x"}}}`, "allot.dev/gpu-uuid-exclude"},
		{"its excluded models", `{"metadata":{"annotations":{"allot.dev/gpu-type-exclude":"T4"}}}`, "allot.dev/gpu-type-exclude"},
		{"its island", `{"metadata":{"annotations":{"allot.dev/gpu-island":"required"}}}`, "allot.dev/gpu-island"},
		{"its policies", `{"metadata":{"annotations":{"allot.dev/node-policy":"spread","allot.dev/gpu-policy":"spread"}}}`, "allot.dev/node-policy, allot.dev/gpu-policy"},
		{"the record", `{"metadata":{"annotations":{"allot.dev/translated":"nothing"}}}`, "allot.dev/translated"},
		{"its compute", `{"metadata":{"annotations":{"allot.dev/gpu-compute":"100"}}}`, "allot.dev/gpu-compute"},
	} {
		_, err := alice.CoreV1().Pods("ml").Patch(e.Ctx, "hami", types.MergePatchType, []byte(c.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "fixed once the pod is admitted") {
			t.Errorf("rewriting %s: %v, want a refusal naming %s", c.what, err, c.want)
		}
	}
	// The peer's own names mean nothing to Allot after admission: changing them is hers.
	if _, err := alice.CoreV1().Pods("ml").Patch(e.Ctx, "kai", types.MergePatchType, []byte(`{"metadata":{"annotations":{"gpu-fraction":"0.9"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the peer's own annotation: %v", err)
	}
	if env := e.ContainerEnv(t, e.Pods(t, "ml")["kai"], "main"); env["CUDA_DEVICE_MEMORY_LIMIT"] != "40960m" {
		t.Errorf("kai after its gpu-fraction changed: %v, want still half", env)
	}

	// A pod under a taken-over name that asks only what Allot's own pods ask (its queue
	// label, whole GPUs) is still rewritten: left as it was, no scheduler would take it.
	plain := peerPod("plain", "hami-scheduler", map[string]string{"nvidia.com/gpu": "1"}, nil, map[string]string{v1alpha1.LabelQueue: "team-a"})
	if err := create(plain); err != nil {
		t.Fatalf("plain: %v", err)
	}
	if got := e.Pods(t, "ml")["plain"].Spec.SchedulerName; got != v1alpha1.SchedulerName {
		t.Errorf("a whole-GPU pod under hami-scheduler kept scheduler %q, want %q", got, v1alpha1.SchedulerName)
	}

	// Refused at creation, each naming what and why.
	for _, c := range []struct {
		name string
		p    *corev1.Pod
		want string
	}{
		{"booked by its owner", peerPod("x1", "allot", nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.1", v1alpha1.AnnotationGPUShareMemory: "1"},
			map[string]string{v1alpha1.LabelQueue: "team-a"}), "allot.dev/gpu-share-memory is written by Allot"},
		{"a forged record", peerPod("x2", "allot", nil, map[string]string{v1alpha1.AnnotationTranslated: "x"}, map[string]string{v1alpha1.LabelQueue: "team-a"}),
			"allot.dev/translated is written by Allot's webhook"},
		{"an Ascend", peerPod("x3", "hami-scheduler", map[string]string{"huawei.com/Ascend910": "1"}, nil, map[string]string{v1alpha1.LabelQueue: "team-a"}),
			"huawei.com/Ascend910 is not honoured: Allot schedules NVIDIA GPUs and whole devices of the kinds the scheduler's --accelerators turns on (none: NVIDIA GPUs only)"},
		{"HAMi MIG", peerPod("x4", "hami-scheduler", map[string]string{"nvidia.com/gpu": "1"}, map[string]string{"nvidia.com/vgpu-mode": "mig"},
			map[string]string{v1alpha1.LabelQueue: "team-a"}), "nvidia.com/vgpu-mode=mig is not honoured"},
		{"two queues", peerPod("x5", "kai-scheduler", nil, map[string]string{"gpu-fraction": "0.5"},
			map[string]string{"kai.scheduler/queue": "team-a", "runai/queue": "team-b"}), "ask for allot.dev/queue differently"},
		{"two memories", peerPod("x6", "hami-scheduler", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"},
			map[string]string{v1alpha1.AnnotationGPUMemory: "4Gi"}, map[string]string{v1alpha1.LabelQueue: "team-a"}),
			"allot.dev/gpu-memory=4Gi and nvidia.com/gpumem=8000 ask for allot.dev/gpu-memory differently"},
	} {
		if err := create(c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
}
