package inspect

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A device the agent could not read (-1) shows no utilisation; its neighbours' readings
// stand.
func TestUnreadDeviceHasNoUtilization(t *testing.T) {
	u := utilization("0,-1,40", 3)
	if u[0] == nil || *u[0] != 0 || u[1] != nil || u[2] == nil || *u[2] != 40 {
		t.Fatalf("utilisation %v, want 0, none, 40", u)
	}
}

// A node an agent marked is read from the agent's Lease alone: the load an older agent
// left on the Node is frozen, and is not shown as now's. A node without an agent keeps its
// own (a simulated kubelet's).
func TestLoadOfAnAgentsNodeIsTheLeases(t *testing.T) {
	frozen := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Annotations: map[string]string{v1alpha1.AnnotationAgent: "v1",
		v1alpha1.AnnotationGPUUtilization: "0,0", v1alpha1.AnnotationGPUMemoryUsed: "0,0"}}}
	sim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-1", Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "95"}}}
	reporting := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-2", Annotations: map[string]string{v1alpha1.AnnotationAgent: "v1",
		v1alpha1.AnnotationGPUUtilization: "0"}}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "allot-agent-dgx-2", Labels: map[string]string{v1alpha1.LabelAgentLease: "dgx-2"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "70", v1alpha1.AnnotationGPUMemoryUsed: "1000"}}}
	out := WithLoad([]*corev1.Node{frozen, sim, reporting}, []*coordinationv1.Lease{lease})
	if v, ok := out[0].Annotations[v1alpha1.AnnotationGPUUtilization]; ok {
		t.Errorf("the agent's node without a report on its Lease reads %q, want none", v)
	}
	if frozen.Annotations[v1alpha1.AnnotationGPUUtilization] != "0,0" {
		t.Error("the Node read was changed")
	}
	if v := out[1].Annotations[v1alpha1.AnnotationGPUUtilization]; v != "95" {
		t.Errorf("the simulated node reads %q, want its own 95", v)
	}
	if v := out[2].Annotations[v1alpha1.AnnotationGPUUtilization]; v != "70" {
		t.Errorf("the reporting node reads %q, want its Lease's 70", v)
	}
}
