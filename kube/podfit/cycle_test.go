package podfit

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodsOfOneTemplateShareAShape: pods made from one template differ in the name of the
// service account token volume the API server adds to each; that must not make each one a
// shape of its own (every shape runs the filters on every node, every cycle). A claim does
// tell pods apart, as does a node selector.
func TestPodsOfOneTemplateShareAShape(t *testing.T) {
	c := &Checker{}
	pod := func(name string, extra ...corev1.Volume) *corev1.Pod {
		vols := append([]corev1.Volume{
			{Name: "kube-api-access-" + name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}, extra...)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"}, Spec: corev1.PodSpec{Volumes: vols}}
	}
	claim := func(name string) corev1.Volume {
		return corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
	}
	a, b := c.shapeOf(pod("train-0x7k2"), false).key(), c.shapeOf(pod("train-9qz4m"), false).key()
	if a != b {
		t.Errorf("two pods of one template have different shapes:\n%s\n%s", a, b)
	}
	if len(c.shapeOf(pod("train-0x7k2"), false).Volumes) != 0 {
		t.Error("token, ConfigMap and emptyDir volumes are in the shape; no static plugin reads them")
	}
	c1, c2 := c.shapeOf(pod("db-0", claim("data-0")), false).key(), c.shapeOf(pod("db-1", claim("data-1")), false).key()
	if c1 == c2 || c1 == a {
		t.Error("pods with different claims share a shape: the volume plugins judge claims")
	}
	sel := pod("train-sel")
	sel.Spec.NodeSelector = map[string]string{"zone": "a"}
	if c.shapeOf(sel, false).key() == a {
		t.Error("a node selector does not change the shape")
	}
}
