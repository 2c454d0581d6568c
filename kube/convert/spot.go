package convert

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Spot capacity as clouds and their autoscalers label and taint it, and the spot policy
// of a pod and its queue. Who writes what: node labels and taints are the cloud's, its
// autoscaler's or its termination handler's, and an admin's (tenants may not write
// Nodes); the pod's annotations are its owner's, fixed at admission; the queue's are the
// admin's.

// capacityLabels are the labels by which clouds and autoscalers say a node is spot, with
// the value that says so.
var capacityLabels = []struct{ key, spot, onDemand string }{
	{"karpenter.sh/capacity-type", "spot", "on-demand"},
	{"eks.amazonaws.com/capacityType", "SPOT", "ON_DEMAND"},
	{"cloud.google.com/gke-spot", "true", ""},
	{"cloud.google.com/gke-preemptible", "true", ""},
	{"kubernetes.azure.com/scalesetpriority", "spot", "regular"},
}

// interruptionTaints are the taints that tell a node goes soon: Karpenter's disruption,
// AWS's node termination handler's, GKE's impending termination.
var interruptionTaints = []string{
	"karpenter.sh/disrupted",
	"karpenter.sh/disruption",
	"aws-node-termination-handler/spot-itn",
	"aws-node-termination-handler/rebalance-recommendation",
	"aws-node-termination-handler/scheduled-maintenance",
	"aws-node-termination-handler/asg-lifecycle-termination",
	"cloud.google.com/impending-node-termination",
}

// Spot tells whether the node is spot capacity: the admin's label allot.dev/capacity-type
// first (spot or on-demand), else the cloud's.
func Spot(n *corev1.Node) bool {
	if v, ok := n.Labels[v1alpha1.LabelCapacityType]; ok {
		return v == v1alpha1.CapacitySpot
	}
	for _, l := range capacityLabels {
		if n.Labels[l.key] == l.spot {
			return true
		}
	}
	return false
}

// Interrupted says why the node goes soon ("" where it does not): a taint of an
// interruption notice, or its deletion under way. Nothing new is placed there.
func Interrupted(n *corev1.Node) string {
	if n.DeletionTimestamp != nil {
		return "the node is being deleted"
	}
	for _, t := range n.Spec.Taints {
		for _, k := range interruptionTaints {
			if t.Key == k {
				return "taint " + k + ": the node goes soon"
			}
		}
	}
	return ""
}

// capacityProblem says what is wrong with the admin's capacity label, "" where nothing.
func capacityProblem(n *corev1.Node) string {
	v, ok := n.Labels[v1alpha1.LabelCapacityType]
	if !ok || v == v1alpha1.CapacitySpot || v == v1alpha1.CapacityOnDemand {
		return ""
	}
	return fmt.Sprintf("label %s: %q is not allowed: %s or %s; read as on-demand", v1alpha1.LabelCapacityType, v, v1alpha1.CapacitySpot, v1alpha1.CapacityOnDemand)
}

// SpotPolicy is the job's spot policy from its pod's annotations over its queue's
// spec.spot (q nil: unknown), or an error naming the field. A queue whose policy is never
// keeps its pods off spot capacity whatever they ask.
func SpotPolicy(p *corev1.Pod, q *v1alpha1.Queue) (policy engine.SpotPolicy, after time.Duration, budget *int, err error) {
	var def v1alpha1.SpotSpec
	if q != nil && q.Spec.Spot != nil {
		def = *q.Spec.Spot
	}
	name := def.Policy
	if v, ok := p.Annotations[v1alpha1.AnnotationSpot]; ok {
		if def.Policy == v1alpha1.SpotNever && v != v1alpha1.SpotNever {
			return 0, 0, nil, fmt.Errorf("metadata.annotations[%s]: %q is not allowed: queue %s keeps its work off spot capacity (spec.spot.policy never)", v1alpha1.AnnotationSpot, v, q.Name)
		}
		name = v
	}
	if policy, err = engine.ParseSpotPolicy(name); err != nil {
		field := "metadata.annotations[" + v1alpha1.AnnotationSpot + "]"
		if _, ok := p.Annotations[v1alpha1.AnnotationSpot]; !ok {
			field = "queue " + q.Name + " spec.spot.policy"
		}
		return 0, 0, nil, fmt.Errorf("%s: %w", field, err)
	}
	if def.OnDemandAfter != nil {
		after = def.OnDemandAfter.Duration
	}
	if v, ok := p.Annotations[v1alpha1.AnnotationOnDemandAfter]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, 0, nil, fmt.Errorf("metadata.annotations[%s]: %q is not allowed: a positive duration such as 10m (spot first, on-demand after this long)", v1alpha1.AnnotationOnDemandAfter, v)
		}
		after = d
	}
	if after > 0 && policy != engine.SpotFirst {
		after = 0 // read only with spot first
	}
	if def.InterruptionBudget != nil {
		b := int(*def.InterruptionBudget)
		budget = &b
	}
	if v, ok := p.Annotations[v1alpha1.AnnotationInterruptionBudget]; ok {
		b, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || b < 0 {
			return 0, 0, nil, fmt.Errorf("metadata.annotations[%s]: %q is not allowed: the interruptions a workload survives on spot capacity, a whole number 0 or more", v1alpha1.AnnotationInterruptionBudget, v)
		}
		budget = &b
	}
	return policy, after, budget, nil
}
