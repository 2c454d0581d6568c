package scheduler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// A pod of another scheduler on a MIG node books nothing by Allot's MIG annotations, which
// no webhook or policy of Allot's saw (a tenant could otherwise have Allot keep every
// instance from everyone); what it asks of the device plugin it holds, on the first free
// instances of its profile, never where its annotations say.
func TestOtherSchedulersMIGAnnotationsBookNothing(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mig-1", UID: "mig-1", Labels: map[string]string{
		v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"}}}
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("7"),
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	foreign := func(name string, ann map[string]string, res corev1.ResourceList) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Annotations: ann}.Pod()
		p.UID, p.Spec.SchedulerName, p.Spec.NodeName = types.UID(name), "default-scheduler", "mig-1"
		p.Spec.Containers[0].Resources.Limits = res
		return p
	}
	pods := []*corev1.Pod{
		foreign("grab", map[string]string{v1alpha1.AnnotationMIG: "7g.80gb", v1alpha1.AnnotationMIGInstances: "#0/7g.80gb@0"}, nil),
		foreign("real", map[string]string{v1alpha1.AnnotationMIGInstances: "#0/1g.10gb@6"}, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}),
	}
	snap, _ := buildSnapshot(time.Unix(1e9, 0), []*corev1.Node{n}, pods, nil, nil, nil, nil)
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			switch p.ID {
			case "default/grab":
				if p.Request.WantsMIG() {
					t.Errorf("grab asks %+v by its annotation", p.Request)
				}
			case "default/real":
				if b := p.Binding; b == nil || b.MIG != "1g.10gb" || len(b.MIGStarts) != 1 || b.MIGStarts[0] != 0 {
					t.Errorf("real holds %+v: want its 1g on the first free instance (slice 0), not where its annotation says (6)", b)
				}
			}
		}
	}
}
