package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

func peerPod(scheduler string, limits map[string]string, ann, labels map[string]string) *corev1.Pod {
	res := corev1.ResourceList{}
	for k, v := range limits {
		res[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml", Annotations: ann, Labels: labels},
		Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: res}}}}}
}

// HAMi's slice (nvidia.com/gpu: N with gpumem and gpucores), its annotations, and
// KAI-Scheduler's fraction and queue become Allot's names, recorded in allot.dev/translated,
// and HAMi's resources leave the container, nvidia.com/gpu with them (else the kubelet's
// plugin would hand it whole GPUs).
func TestPeerNamesAreTranslated(t *testing.T) {
	p := peerPod("hami-scheduler", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"},
		map[string]string{"nvidia.com/use-gpuuuid": "GPU-a,GPU-b", "nvidia.com/nouse-gputype": "T4", "nvidia.com/numa-bind": "true",
			"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack", "nvidia.com/vgpu-mode": "hami-core"}, nil)
	if err := (Peers{AdoptSchedulers: []string{"hami-scheduler"}}).Translate(p); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{v1alpha1.AnnotationGPUMemory: "8000Mi", v1alpha1.AnnotationGPUCompute: "30", v1alpha1.AnnotationGPUCount: "2",
		v1alpha1.AnnotationGPUUUIDPick: "GPU-a,GPU-b", v1alpha1.AnnotationGPUTypeExclude: "T4", v1alpha1.AnnotationGPUIsland: "required",
		v1alpha1.AnnotationNodePolicy: "spread", v1alpha1.AnnotationGPUPolicy: "binpack"}
	for k, v := range want {
		if p.Annotations[k] != v {
			t.Errorf("%s=%q, want %q", k, p.Annotations[k], v)
		}
	}
	if p.Spec.SchedulerName != "allot" || p.Spec.NodeSelector[v1alpha1.LabelGPUSharing] != "hami-core" || len(p.Spec.Containers[0].Resources.Limits) != 0 {
		t.Errorf("scheduler %s, selector %v, limits %v", p.Spec.SchedulerName, p.Spec.NodeSelector, p.Spec.Containers[0].Resources.Limits)
	}
	rec := p.Annotations[v1alpha1.AnnotationTranslated]
	for _, w := range []string{"spec.schedulerName=hami-scheduler → allot", "nvidia.com/gpumem=8000 → allot.dev/gpu-memory=8000Mi",
		"nvidia.com/gpucores=30 → allot.dev/gpu-compute=30", "nvidia.com/gpu=2 → allot.dev/gpu-count=2", "nvidia.com/numa-bind=true → allot.dev/gpu-island=required"} {
		if !strings.Contains(rec, w) {
			t.Errorf("record %q lacks %q", rec, w)
		}
	}
	// Run again on its own output (the validator does), it finds nothing left to translate.
	if notes, err := untranslated(p, nil); notes != "" || err != nil {
		t.Errorf("again: %q, %v", notes, err)
	}

	kai := peerPod("kai-scheduler", nil, map[string]string{"gpu-fraction": "0.5"}, map[string]string{"kai.scheduler/queue": "team-a"})
	if err := (Peers{}).Translate(kai); err != nil {
		t.Fatal(err)
	}
	if kai.Spec.SchedulerName != "kai-scheduler" || kai.Annotations[v1alpha1.AnnotationGPUFraction] != "0.5" || kai.Labels[v1alpha1.LabelQueue] != "team-a" ||
		kai.Annotations[v1alpha1.AnnotationTranslated] != "gpu-fraction=0.5 → allot.dev/gpu-fraction=0.5; kai.scheduler/queue=team-a → allot.dev/queue=team-a" {
		t.Errorf("kai: scheduler %s (not adopted: unchanged), annotations %v, labels %v", kai.Spec.SchedulerName, kai.Annotations, kai.Labels)
	}
	mem := peerPod("allot", nil, map[string]string{"gpu-memory": "4000", "gpu-fraction-num-devices": "2"}, map[string]string{"runai/queue": "b"})
	if err := (Peers{}).Translate(mem); err != nil || mem.Annotations[v1alpha1.AnnotationGPUMemory] != "4000Mi" || mem.Annotations[v1alpha1.AnnotationGPUCount] != "2" ||
		mem.Labels[v1alpha1.LabelQueue] != "b" {
		t.Errorf("KAI memory in MiB: %v %v %v", err, mem.Annotations, mem.Labels)
	}
	// Run:ai's dynamic fractions: the limit a request may grow to, as Allot's.
	burst := peerPod("allot", nil, map[string]string{"gpu-fraction": "0.25", "gpu-fraction-limit": "0.8"}, nil)
	if err := (Peers{}).Translate(burst); err != nil || burst.Annotations[v1alpha1.AnnotationGPUFractionLimit] != "0.8" {
		t.Errorf("Run:ai fraction limit: %v %v", err, burst.Annotations)
	}
	memBurst := peerPod("allot", nil, map[string]string{"gpu-memory": "10000", "gpu-memory-limit": "40000"}, nil)
	if err := (Peers{}).Translate(memBurst); err != nil || memBurst.Annotations[v1alpha1.AnnotationGPUMemoryLimit] != "40000Mi" {
		t.Errorf("Run:ai memory limit in MiB: %v %v", err, memBurst.Annotations)
	}
	if _, err := v1alpha1.ParseGPUShare(memBurst.Annotations); err != nil {
		t.Errorf("the translated limit does not parse: %v", err)
	}
}

// HAMi's default device memory reaches only pods that came through HAMi's names: a pod of
// Allot's asking nvidia.com/gpu: 2 keeps two whole GPUs.
func TestDefaultGPUMemoryOnlyForHAMiPods(t *testing.T) {
	peers := Peers{AdoptSchedulers: []string{"hami-scheduler"}, DefaultGPUMemory: 10 << 30}
	hami := peerPod("hami-scheduler", map[string]string{"nvidia.com/gpu": "2"}, nil, nil)
	if err := peers.Translate(hami); err != nil {
		t.Fatal(err)
	}
	if hami.Annotations[v1alpha1.AnnotationGPUMemory] != "10Gi" || hami.Annotations[v1alpha1.AnnotationGPUCount] != "2" || v1alpha1.WholeGPUs(hami) != 0 {
		t.Errorf("hami pod: %v, %d whole", hami.Annotations, v1alpha1.WholeGPUs(hami))
	}
	ours := peerPod("allot", map[string]string{"nvidia.com/gpu": "2"}, nil, nil)
	if err := peers.Translate(ours); err != nil || v1alpha1.WholeGPUs(ours) != 2 || ours.Annotations[v1alpha1.AnnotationGPUMemory] != "" {
		t.Errorf("allot pod: %v, %v, %d whole", err, ours.Annotations, v1alpha1.WholeGPUs(ours))
	}
	cores := peerPod("hami-scheduler", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20"}, nil, nil)
	if err := peers.Translate(cores); err != nil || cores.Annotations[v1alpha1.AnnotationGPUMemory] != "10Gi" || cores.Annotations[v1alpha1.AnnotationGPUCompute] != "20" {
		t.Errorf("cores alone: %v %v", err, cores.Annotations)
	}
}

// What cannot be honoured is refused with the reason, and two names for one thing that
// disagree are refused naming both.
func TestPeerNamesRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		p    *corev1.Pod
		want string
	}{
		{"another vendor", peerPod("allot", map[string]string{"cambricon.com/mlu": "1"}, nil, nil),
			"containers[main].resources: cambricon.com/mlu is not honoured: Allot schedules NVIDIA GPUs and whole devices of the kinds the scheduler's --accelerators turns on (none: NVIDIA GPUs only)"},
		{"Ascend", peerPod("allot", map[string]string{"huawei.com/Ascend910": "1"}, nil, nil), "huawei.com/Ascend910 is not honoured"},
		{"HAMi MIG", peerPod("allot", nil, map[string]string{"nvidia.com/vgpu-mode": "mig"}, nil), "nvidia.com/vgpu-mode=mig is not honoured"},
		{"topology-aware", peerPod("allot", nil, map[string]string{"hami.io/gpu-scheduler-policy": "topology-aware"}, nil),
			"hami.io/gpu-scheduler-policy=topology-aware is not honoured: Allot chooses by binpack or spread only"},
		{"two fractions", peerPod("allot", nil, map[string]string{"gpu-fraction": "0.5", v1alpha1.AnnotationGPUFraction: "0.3"}, nil),
			"allot.dev/gpu-fraction=0.3 and gpu-fraction=0.5 ask for allot.dev/gpu-fraction differently"},
		{"two queues", peerPod("allot", nil, nil, map[string]string{"kai.scheduler/queue": "a", v1alpha1.LabelQueue: "b"}),
			"allot.dev/queue=b and kai.scheduler/queue=a ask for allot.dev/queue differently"},
		{"two peers' memory", peerPod("allot", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}, map[string]string{"gpu-memory": "4000"}, nil),
			"nvidia.com/gpumem=8000 and gpu-memory=4000 ask for allot.dev/gpu-memory differently"},
		{"memory both ways", peerPod("allot", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpumem-percentage": "50"}, nil, nil),
			"nvidia.com/gpumem and nvidia.com/gpumem-percentage are both set"},
		{"KAI memory in bytes", peerPod("allot", nil, map[string]string{"gpu-memory": "8Gi"}, nil), "a whole number of MiB"},
		{"HAMi's record forged", peerPod("allot", nil, map[string]string{v1alpha1.AnnotationTranslated: "x"}, nil), "allot.dev/translated is written by Allot's webhook"},
		{"task priority", peerPod("allot", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/priority": "1"}, nil, nil), "nvidia.com/priority (HAMi-core's task priority) is not honoured"},
	} {
		err := (Peers{}).Translate(c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// The same value under both names is one request, not a conflict.
	same := peerPod("allot", nil, map[string]string{"gpu-memory": "8192", v1alpha1.AnnotationGPUMemory: "8Gi"}, nil)
	if err := (Peers{}).Translate(same); err != nil {
		t.Errorf("same value: %v", err)
	}
}

// HAMi's gpumem-percentage 100 asked in requests alone (no limits: the mutating webhook
// sees the pod before the API server checks it) becomes whole GPUs, without a panic.
func TestWholeGPUPercentageFromRequestsOnly(t *testing.T) {
	p := peerPod("hami-scheduler", nil, nil, nil)
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		"nvidia.com/gpu": resource.MustParse("2"), "nvidia.com/gpumem-percentage": resource.MustParse("100")}}
	if err := (Peers{AdoptSchedulers: []string{"hami-scheduler"}}).Translate(p); err != nil {
		t.Fatal(err)
	}
	if got := v1alpha1.WholeGPUs(p); got != 2 {
		t.Fatalf("%d whole GPUs, want 2: %+v", got, p.Spec.Containers[0].Resources)
	}
}

// The container KAI-Scheduler gives a fraction, and the one that asked for HAMi's slice, is
// the one Allot gives the slice.
func TestTheContainerGivenTheSlice(t *testing.T) {
	kai := peerPod("kai-scheduler", nil, map[string]string{"gpu-fraction": "0.5", "gpu-fraction-container-name": "trainer"}, nil)
	if err := (Peers{}).Translate(kai); err != nil || kai.Annotations[v1alpha1.AnnotationGPUContainer] != "trainer" {
		t.Fatalf("KAI's container name: %v, %v", err, kai.Annotations)
	}
	hami := peerPod("hami-scheduler", nil, nil, nil)
	hami.Spec.Containers = append([]corev1.Container{{Name: "sidecar"}}, hami.Spec.Containers...)
	hami.Spec.Containers[1].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("4000")}
	if err := (Peers{}).Translate(hami); err != nil || hami.Annotations[v1alpha1.AnnotationGPUContainer] != hami.Spec.Containers[1].Name {
		t.Fatalf("HAMi's container: %v, %v", err, hami.Annotations)
	}
}
