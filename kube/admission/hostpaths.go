package admission

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// checkHostPaths holds a pod to its queue's rule for the node's paths (spec.hostPaths): a
// hostPath volume only under an allowed directory. The sharing volumes the mutating webhook
// adds are the admin's (sharingRoot, the scheduler's --sharing-root) and pass at exactly
// the paths that webhook gives them: a tenant's volume under one of their names elsewhere
// (a whole-GPU pod, which the webhook does not mount, naming "/" so) is the tenant's.
func checkHostPaths(p *corev1.Pod, q *v1alpha1.Queue, sharingRoot string) error {
	rule := q.Spec.HostPaths
	if rule == nil {
		return nil
	}
	root := ""
	if sharingRoot != "" {
		root = path.Clean(sharingRoot)
	}
	for i, v := range p.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		hp := path.Clean(v.HostPath.Path)
		switch {
		case root != "" && (v.Name == sharingVolume && hp == root || v.Name == shmVolume && hp == v1alpha1.ShmDir(root) ||
			v.Name == lockVolume && hp == v1alpha1.HAMiLockDir):
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

// QueueRulesAllowed checks a pod scheduled by Allot against its queue's rules for the
// node's paths (sharingRoot being the mutating webhook's, empty where no pool enforces
// sharing) and for node pools. ValidatePod has checked the queue exists.
func QueueRulesAllowed(p *corev1.Pod, view View, sharingRoot string) error {
	if !subject(p) {
		return nil
	}
	q, ok := view.Queue(p.Labels[v1alpha1.LabelQueue])
	if !ok {
		return nil
	}
	if err := checkHostPaths(p, q, sharingRoot); err != nil {
		return err
	}
	if _, err := convert.Pools(p, q); err != nil {
		return err
	}
	_, _, _, err := convert.SpotPolicy(p, q)
	return err
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
