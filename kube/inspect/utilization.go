package inspect

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// Utilization is how busy each of a node's devices is now, in percent by index
// (convert.UtilizationUnread for one its agent could not read), as whatever acts on it
// reads it (the idle controller, the custom metrics API): its agent's report on its Lease
// while the agent renews it; else, only where trustNode says the node reports on itself
// (the embedded cluster's simulated nodes, whose kubelet writes the annotation) and no
// agent ever marked it, the Node's own annotation. ok is false when nothing reports now,
// or the report is not a percentage per field (convert.ParseUtilization). The pages show
// the last report instead (WithLoad): a look, not a decision.
func Utilization(n *corev1.Node, agent *coordinationv1.Lease, now time.Time, trustNode bool) ([]int, bool) {
	if agent != nil && LeaseLive(agent, now) {
		if v := agent.Annotations[v1alpha1.AnnotationGPUUtilization]; v != "" {
			return convert.ParseUtilization(v)
		}
	}
	if n == nil || !trustNode {
		return nil, false
	}
	// What an older agent left on the Node stays there frozen: it is no reading of now.
	if _, marked := n.Annotations[v1alpha1.AnnotationAgent]; marked {
		return nil, false
	}
	return convert.ParseUtilization(n.Annotations[v1alpha1.AnnotationGPUUtilization])
}

// LeaseLive is whether an agent renewed its Lease within the Lease's duration, as every
// reader of the agents' Leases judges it (the scheduler, the idle controller, the custom
// metrics API): up to, not at, the renewal plus the duration.
func LeaseLive(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}
