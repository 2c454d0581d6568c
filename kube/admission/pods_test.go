package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// view is a cluster of 16 GPUs of 80Gi with two queues, one of them for namespace ml only.
type view struct{}

func (view) Queue(name string) (*v1alpha1.Queue, bool) {
	switch name {
	case "team-a":
		return &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}, true
	case "ml-only":
		return &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{Namespaces: []string{"ml"}}}, true
	}
	return nil, false
}
func (view) QueueNames() []string { return []string{"ml-only", "team-a"} }
func (view) PodGroup(ns, name string) (*v1alpha1.PodGroup, bool) {
	return &v1alpha1.PodGroup{Spec: v1alpha1.PodGroupSpec{MinMember: 3}}, name == "trio"
}
func (view) NamespaceLabels(string) map[string]string { return nil }
func (view) GPUs() (int64, int64)                     { return 16, 80 << 30 }
func (view) Topologies() map[string]convert.Levels {
	return map[string]convert.Levels{"default": {Labels: []string{"example.com/rack", "kubernetes.io/hostname"}, Names: []string{"rack", "host"}}}
}

func pod(queue string, gpus int64, labels, ann map[string]string) *corev1.Pod {
	l := map[string]string{v1alpha1.LabelQueue: queue}
	for k, v := range labels {
		l[k] = v
	}
	c := corev1.Container{Name: "main"}
	if gpus > 0 {
		c.Resources.Limits = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Labels: l, Annotations: ann},
		Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, Containers: []corev1.Container{c}}}
}

func TestValidatePod(t *testing.T) {
	frac := func(v string) map[string]string { return map[string]string{v1alpha1.AnnotationGPUFraction: v} }
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" = admitted
	}{
		{"half", pod("team-a", 0, nil, frac("0.5")), ""},
		{"not a number", pod("team-a", 0, nil, frac("half")), `allot.dev/gpu-fraction: "half" is not allowed`},
		{"one", pod("team-a", 0, nil, frac("1")), `allot.dev/gpu-fraction: "1" is not allowed`},
		{"too small", pod("team-a", 0, nil, frac("0.0001")), "the smallest fraction is 0.001"},
		{"fraction and whole GPUs", pod("team-a", 1, nil, frac("0.5")), "a pod takes a slice of GPUs or whole GPUs, not both"},
		{"compute with whole GPUs", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationGPUCompute: "30"}), "a pod takes a slice of GPUs or whole GPUs, not both"},
		{"compute alone", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUCompute: "30"}), ""},
		{"compute over 100", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUFraction: "0.5", v1alpha1.AnnotationGPUCompute: "150"}),
			`allot.dev/gpu-compute: "150" is not allowed: a whole percentage of each GPU's compute from 1 to 100`},
		{"a count without a slice", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUCount: "2"}), "allot.dev/gpu-count is set without"},
		{"a slice of two", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUMemory: "8Gi", v1alpha1.AnnotationGPUCount: "2"}), ""},
		{"an island maybe", pod("team-a", 2, nil, map[string]string{v1alpha1.AnnotationGPUIsland: "preferred"}), `allot.dev/gpu-island: "preferred" is not allowed`},
		{"an untranslated peer", pod("team-a", 0, nil, map[string]string{"gpu-fraction": "0.5"}), "were not translated by Allot's mutating webhook (gpu-fraction=0.5 → allot.dev/gpu-fraction=0.5)"},
		{"memory fits", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUMemory: "80Gi"}), ""},
		{"memory too large", pod("team-a", 0, nil, map[string]string{v1alpha1.AnnotationGPUMemory: "81Gi"}), "at most 80Gi"},
		{"no queue", pod("", 1, nil, nil), "allot.dev/queue: no queue"},
		{"namespace not admitted", pod("ml-only", 1, nil, nil), `namespace "default" may not use queue "ml-only"`},
		{"gang fits", pod("team-a", 4, map[string]string{v1alpha1.LabelPodGroup: "trio"}, nil), ""},
		{"class", pod("team-a", 1, map[string]string{v1alpha1.LabelClass: "interactive", v1alpha1.LabelPreemptible: "false"}, nil), ""},
		{"unknown class", pod("team-a", 1, map[string]string{v1alpha1.LabelClass: "batch"}, nil), `allot.dev/class: "batch" is not allowed: train, interactive or inference`},
		{"preemptible maybe", pod("team-a", 1, map[string]string{v1alpha1.LabelPreemptible: "maybe"}, nil), `allot.dev/preemptible: "maybe" is not allowed: true or false`},
		{"gang too large", pod("team-a", 6, map[string]string{v1alpha1.LabelPodGroup: "trio"}, nil), "needs 18 GPUs at once (3 pods × 6) but the cluster has 16"},
		{"rack required", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationTopologyRequired: "rack"}), ""},
		{"level by node label", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationTopologyPreferred: "kubernetes.io/hostname"}), ""},
		{"unknown level", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationTopologyRequired: "row"}),
			`allot.dev/topology-required: "row" is not a level of Topology default; levels: rack, host`},
		{"unknown topology", pod("team-a", 1, nil, map[string]string{v1alpha1.AnnotationTopologyRequired: "rack", v1alpha1.AnnotationTopology: "east"}),
			`allot.dev/topology: no Topology "east"; topologies: default`},
	} {
		err := ValidatePod(c.pod, view{}, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	other := pod("nope", 0, nil, frac("7"))
	other.Spec.SchedulerName = "default-scheduler"
	if err := ValidatePod(other, view{}, nil); err != nil {
		t.Errorf("another scheduler's pod was judged: %v", err)
	}
	// A DRA claim is admitted; beside nvidia.com/gpu or a fraction it is refused, since
	// its GPUs would be counted twice and handed out by two agents.
	claims := pod("team-a", 0, nil, nil)
	claims.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
	if err := ValidatePod(claims, view{}, nil); err != nil {
		t.Errorf("a pod with a resource claim was refused: %v", err)
	}
	both := pod("team-a", 1, nil, nil)
	both.Spec.ResourceClaims = claims.Spec.ResourceClaims
	if err := ValidatePod(both, view{}, nil); err == nil || !strings.Contains(err.Error(), "spec.resourceClaims (gpu) with nvidia.com/gpu") {
		t.Errorf("a pod with a resource claim and nvidia.com/gpu: %v", err)
	}
	claims.Spec.SchedulerName = "default-scheduler"
	if err := ValidatePod(claims, view{}, nil); err != nil {
		t.Errorf("another scheduler's DRA pod was judged: %v", err)
	}
}
