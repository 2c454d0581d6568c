package metricsapi

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestPodUtilization: a pod's value is the mean of its devices' readings, from its node's
// agent's Lease while the agent renews it, else from the node (a simulated node's kubelet);
// a stale agent reading, an unreadable device, a pod without devices or not running count
// for nothing.
func TestPodUtilization(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1", Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: "10,20,30,40",
		v1alpha1.AnnotationGPUUUIDs: "GPU-a,GPU-b,GPU-c,GPU-d"}}}
	lease := func(renewed time.Time, util string) *coordinationv1.Lease {
		secs := int32(40)
		at := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: util}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &at, LeaseDurationSeconds: &secs}}
	}
	pod := func(indices string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationGPUs: indices}}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, c := range []struct {
		name  string
		lease *coordinationv1.Lease
		pod   *corev1.Pod
		want  float64
		ok    bool
	}{
		{"the node's, devices 1 and 3", nil, pod("1,3", corev1.PodRunning), 30, true},
		{"the live agent's over the node's", lease(now.Add(-10*time.Second), "90,80,70,60"), pod("0,1", corev1.PodRunning), 85, true},
		{"a stale agent's is not taken", lease(now.Add(-time.Minute), "90,80,70,60"), pod("0", corev1.PodRunning), 10, true},
		{"an unreadable device is left out", lease(now, "90,x,70,60"), pod("0,1", corev1.PodRunning), 90, true},
		{"a device the node does not have", nil, pod("7", corev1.PodRunning), 0, false},
		{"no devices", nil, pod("", corev1.PodRunning), 0, false},
		{"the devices the kubelet gave, as the agent recorded them", nil, recorded(pod("0", corev1.PodRunning), "GPU-d, GPU-c"), 35, true},
		{"a record of devices the node does not list: the bind's", nil, recorded(pod("0", corev1.PodRunning), "GPU-z"), 10, true},
		{"not running", nil, pod("0", corev1.PodPending), 0, false},
	} {
		got, ok := podUtilization(c.pod, heldDevices(c.pod, node), deviceUtilization(node, c.lease, now))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func recorded(p *corev1.Pod, uuids string) *corev1.Pod {
	p.Annotations[v1alpha1.AnnotationGPUDevices] = uuids
	return p
}
