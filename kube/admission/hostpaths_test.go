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
	const root = "/run/allot/sharing"
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
		p := withHostPath(c.queue, c.path)
		err := ValidatePod(p, hostPathView{}, nil)
		if err == nil {
			err = QueueRulesAllowed(p, hostPathView{}, root)
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("queue %s, hostPath %s: %v, want %q", c.queue, c.path, err, c.want)
		}
	}
	// A sharing pod in the sealed queue keeps the webhook's sharing volumes at the sharing
	// root; a volume of the tenant's under one of their names elsewhere is the tenant's (a
	// whole-GPU pod, which the webhook does not mount, naming the host's "/" so).
	shared := pod("sealed", 0, nil, nil)
	mountSharing(shared, root)
	if err := QueueRulesAllowed(shared, hostPathView{}, root); err != nil {
		t.Errorf("the webhook's sharing volumes in queue sealed: %v", err)
	}
	for _, v := range []corev1.Volume{
		{Name: sharingVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
		{Name: shmVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}},
		{Name: lockVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v1alpha1.HAMiLockDir}}},
	} {
		whole := pod("sealed", 1, nil, nil)
		whole.Spec.Volumes = []corev1.Volume{v}
		if err := QueueRulesAllowed(whole, hostPathView{}, ""); err == nil {
			t.Errorf("a whole-GPU pod's %s at %s passed as the webhook's where no pool shares", v.Name, v.HostPath.Path)
		}
		if v.Name != lockVolume {
			if err := QueueRulesAllowed(whole, hostPathView{}, root); err == nil {
				t.Errorf("a whole-GPU pod's %s at %s passed as the webhook's", v.Name, v.HostPath.Path)
			}
		}
	}
}

// A queue's node pools hold its pods: a pod naming a pool the queue does not list is
// refused at admission, with the field; one naming a listed pool, or none, is admitted.
func TestQueueRulesNodePools(t *testing.T) {
	v := poolView{}
	for _, c := range []struct {
		selector, list, want string
	}{
		{"", "", ""},
		{"h100", "", ""},
		{"", "a100,h100", ""},
		{"l40s", "", `spec.nodeSelector[allot.dev/node-pool]: node pool "l40s" is not one queue gpu-pools may use: its nodePools are h100, a100`},
		{"", "h100,l40s", `metadata.annotations[allot.dev/node-pools]: node pool "l40s" is not one queue gpu-pools may use`},
	} {
		p := pod("gpu-pools", 1, nil, nil)
		if c.selector != "" {
			p.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: c.selector}
		}
		if c.list != "" {
			p.Annotations = map[string]string{v1alpha1.AnnotationNodePools: c.list}
		}
		err := QueueRulesAllowed(p, v, "")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("selector %q, list %q: refused: %v", c.selector, c.list, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("selector %q, list %q: %v, want %q", c.selector, c.list, err, c.want)
		}
	}
}

type poolView struct{ view }

func (v poolView) Queue(name string) (*v1alpha1.Queue, bool) {
	if name == "gpu-pools" {
		return &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{NodePools: v1alpha1.PoolList{"h100", "a100"}}}, true
	}
	return v.view.Queue(name)
}
