package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// TestCycleWaitsForTopologiesOnlyWhenNamed: a cycle goes ahead before the Topology
// informer has listed unless one of Allot's workloads names a level, on its pod or on its
// PodGroup; another scheduler's pod with the annotation does not hold Allot up.
func TestCycleWaitsForTopologiesOnlyWhenNamed(t *testing.T) {
	plain := basePod("plain", v1alpha1.SchedulerName)
	other := basePod("other", "default-scheduler")
	other.Annotations = map[string]string{v1alpha1.AnnotationTopologyRequired: "rack"}
	if namesTopology([]*corev1.Pod{plain, other}, nil) {
		t.Error("waits with no Allot workload naming a level")
	}
	named := basePod("named", v1alpha1.SchedulerName)
	named.Annotations = map[string]string{v1alpha1.AnnotationTopologyPreferred: "block"}
	if !namesTopology([]*corev1.Pod{plain, named}, nil) {
		t.Error("goes ahead with a pod that prefers a block")
	}
	member := basePod("ddp-0", v1alpha1.SchedulerName)
	member.Labels[LabelPodGroup] = "ddp"
	groups := map[string]convert.Group{"default/ddp": {Topology: map[string]string{v1alpha1.AnnotationTopologyRequired: "rack"}}}
	if !namesTopology([]*corev1.Pod{member}, groups) {
		t.Error("goes ahead with a gang whose PodGroup requires a rack")
	}
}

// TestCycleWaitsForPodGroupsOnlyForGangs: before the PodGroups have listed, a cycle goes
// ahead unless one of Allot's pods carries a group's label (from admission on).
func TestCycleWaitsForPodGroupsOnlyForGangs(t *testing.T) {
	single := basePod("single", v1alpha1.SchedulerName)
	foreign := basePod("foreign", "default-scheduler")
	foreign.Labels[LabelPodGroup] = "theirs"
	if inGangs([]*corev1.Pod{single, foreign}) {
		t.Error("waits with no gang of Allot's")
	}
	member := basePod("ddp-0", v1alpha1.SchedulerName)
	member.Labels[LabelPodGroup] = "ddp"
	if !inGangs([]*corev1.Pod{single, member}) {
		t.Error("goes ahead with a member of a gang")
	}
}
