package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A node update wakes the scheduler unless it only carries the occupancy or utilisation
// reports, which the engine does not read.
func TestReportOnlyNodeUpdates(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", ResourceVersion: "1",
		Labels:      map[string]string{v1alpha1.LabelGPUProduct: "H100"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUUIDs: "GPU-a,GPU-b", v1alpha1.AnnotationGPUUtilization: "0,0"}}}
	for _, c := range []struct {
		name   string
		change func(n *corev1.Node)
		report bool
	}{
		{"utilisation report", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationGPUUtilization] = "95,0" }, true},
		{"occupancy written", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationOccupancy] = "{}" }, true},
		{"utilisation report gone", func(n *corev1.Node) { delete(n.Annotations, v1alpha1.AnnotationGPUUtilization) }, true},
		{"GPU UUIDs changed", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationGPUUUIDs] = "GPU-a" }, false},
		{"label changed", func(n *corev1.Node) { n.Labels[v1alpha1.LabelNodePool] = "big" }, false},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false},
		{"not ready", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, false},
	} {
		n := base.DeepCopy()
		n.ResourceVersion = "2"
		c.change(n)
		if got := reportOnly(base, n); got != c.report {
			t.Errorf("%s: reportOnly %v, want %v", c.name, got, c.report)
		}
	}
}
