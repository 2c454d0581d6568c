package admission

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// checkHostPaths holds a pod to its queue's rule for the node's paths (spec.hostPaths): a
// hostPath volume only under an allowed directory. The sharing volumes the mutating webhook
// adds are the admin's (agent.sharingRoot) and not the tenant's to choose; they pass where
// they have the shapes that webhook gives them, and their mounts are checkSharingMounts'.
func checkHostPaths(p *corev1.Pod, q *v1alpha1.Queue) error {
	rule := q.Spec.HostPaths
	if rule == nil {
		return nil
	}
	root := ""
	for _, v := range p.Spec.Volumes {
		if v.Name == sharingVolume && v.HostPath != nil {
			root = path.Clean(v.HostPath.Path)
		}
	}
	for i, v := range p.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		hp := path.Clean(v.HostPath.Path)
		switch {
		case v.Name == sharingVolume,
			v.Name == shmVolume && root != "" && hp == v1alpha1.ShmDir(root),
			v.Name == lockVolume && hp == v1alpha1.HAMiLockDir:
			continue
		case allowedPath(hp, rule.Allowed):
			continue
		}
		if len(rule.Allowed) == 0 {
			return fmt.Errorf("spec.volumes[%d] (%s): hostPath %q is not allowed: queue %s allows no path of the node (spec.hostPaths); use a PersistentVolumeClaim (allot submit --pvc) or NFS (--nfs)",
				i, v.Name, v.HostPath.Path, q.Name)
		}
		return fmt.Errorf("spec.volumes[%d] (%s): hostPath %q is not allowed: queue %s allows paths of the node under %s only (spec.hostPaths)",
			i, v.Name, v.HostPath.Path, q.Name, strings.Join(rule.Allowed, ", "))
	}
	return nil
}

// allowedPath tells whether p (clean, so without "..") is one of the directories or under
// one, by whole path elements: /data allows /data/imagenet, not /database.
func allowedPath(p string, allowed []string) bool {
	for _, a := range allowed {
		a = path.Clean(a)
		if p == a || strings.HasPrefix(p, strings.TrimSuffix(a, "/")+"/") {
			return true
		}
	}
	return false
}
