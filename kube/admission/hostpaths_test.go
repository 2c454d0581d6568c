package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// hostPathView is view with two queues that rule the node's paths: datasets allows those
// under /data, sealed allows none.
type hostPathView struct{ view }

func (v hostPathView) Queue(name string) (*v1alpha1.Queue, bool) {
	switch name {
	case "datasets":
		return &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{HostPaths: &v1alpha1.HostPathPolicy{Allowed: []string{"/data", "/scratch/"}}}}, true
	case "sealed":
		return &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{HostPaths: &v1alpha1.HostPathPolicy{}}}, true
	}
	return v.view.Queue(name)
}

// A queue's spec.hostPaths holds its pods to the node's directories it allows, by whole
// path elements and after "..", naming the volume; a queue without the rule leaves host
// paths to the cluster's PodSecurity; the sharing volumes Allot's webhook adds are not the
// tenant's and pass.
func TestQueueRulesHostPaths(t *testing.T) {
	withHostPath := func(queue, p string) *corev1.Pod {
		pod := pod(queue, 1, nil, nil)
		pod.Spec.Volumes = []corev1.Volume{{Name: "host-0", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host-0", MountPath: "/mnt"}}
		return pod
	}
	for _, c := range []struct {
		queue, path, want string // want "" for admitted
	}{
		{"datasets", "/data", ""},
		{"datasets", "/data/imagenet", ""},
		{"datasets", "/scratch/alice", ""},
		{"datasets", "/database", `spec.volumes[0] (host-0): hostPath "/database" is not allowed: queue datasets allows paths of the node under /data, /scratch/ only (spec.hostPaths)`},
		{"datasets", "/data/../etc", `hostPath "/data/../etc" is not allowed`},
		{"datasets", "/", `hostPath "/" is not allowed`},
		{"sealed", "/data", `spec.volumes[0] (host-0): hostPath "/data" is not allowed: queue sealed allows no path of the node (spec.hostPaths)`},
		{"team-a", "/etc", ""},
	} {
		err := ValidatePod(withHostPath(c.queue, c.path), hostPathView{}, nil)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("queue %s, hostPath %s: %v, want %q", c.queue, c.path, err, c.want)
		}
	}
	// A sharing pod in the sealed queue keeps the webhook's sharing volumes; one of the
	// tenant's own beside them is still refused.
	shared := pod("sealed", 0, nil, nil)
	mountSharing(shared, "/run/allot/sharing")
	q, _ := hostPathView{}.Queue("sealed")
	if err := checkHostPaths(shared, q); err != nil {
		t.Errorf("the webhook's sharing volumes in queue sealed: %v", err)
	}
	shared.Spec.Volumes = append(shared.Spec.Volumes, corev1.Volume{Name: shmVolume + "-2", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/allot/sharing/shm"}}})
	if err := checkHostPaths(shared, q); err == nil {
		t.Error("a volume of the tenant's at the sharing root's shm directory passed as the webhook's")
	}
}
