// Package podutil holds the pod-status helper the scheduler and the simulated kubelet
// share; the upstream one lives in k8s.io/kubernetes, which only kube/localcluster imports.
package podutil

import corev1 "k8s.io/api/core/v1"

// SetCondition replaces the pod's condition of c's type, or adds it.
func SetCondition(p *corev1.Pod, c corev1.PodCondition) {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == c.Type {
			p.Status.Conditions[i] = c
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, c)
}
