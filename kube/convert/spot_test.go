package convert

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// A node is spot as its cloud's or autoscaler's labels say, or as the admin's label says
// over them; a notice (a taint, a deletion) keeps new pods off it; a capacity label
// outside the two values is a node problem.
func TestSpotNodes(t *testing.T) {
	node := func(labels map[string]string, taints ...string) *corev1.Node {
		n := gpuNode(nil)
		n.Labels = labels
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		for _, k := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
		return n
	}
	for _, c := range []struct {
		name        string
		n           *corev1.Node
		spot, taken bool
	}{
		{"karpenter spot", node(map[string]string{"karpenter.sh/capacity-type": "spot"}), true, false},
		{"karpenter on-demand", node(map[string]string{"karpenter.sh/capacity-type": "on-demand"}), false, false},
		{"EKS spot", node(map[string]string{"eks.amazonaws.com/capacityType": "SPOT"}), true, false},
		{"GKE spot", node(map[string]string{"cloud.google.com/gke-spot": "true"}), true, false},
		{"AKS spot", node(map[string]string{"kubernetes.azure.com/scalesetpriority": "spot"}), true, false},
		{"the admin says on-demand over the cloud", node(map[string]string{"cloud.google.com/gke-spot": "true", v1alpha1.LabelCapacityType: "on-demand"}), false, false},
		{"the admin says spot", node(map[string]string{v1alpha1.LabelCapacityType: "spot"}), true, false},
		{"Karpenter's disruption taint", node(map[string]string{"karpenter.sh/capacity-type": "spot"}, "karpenter.sh/disrupted"), true, true},
		{"AWS's termination handler", node(nil, "aws-node-termination-handler/spot-itn"), false, true},
		{"GKE's impending termination", node(nil, "cloud.google.com/impending-node-termination"), false, true},
	} {
		got := Node(c.n)
		if got.Spot != c.spot || got.Unschedulable != c.taken {
			t.Errorf("%s: spot %v, taking no pods %v; want %v, %v", c.name, got.Spot, got.Unschedulable, c.spot, c.taken)
		}
	}
	gone := node(nil)
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	if Interrupted(gone) == "" || !Node(gone).Unschedulable {
		t.Error("a node being deleted still takes pods")
	}
	bad := node(map[string]string{v1alpha1.LabelCapacityType: "cheap"})
	if p := strings.Join(NodeProblems(bad), "; "); !strings.Contains(p, `label allot.dev/capacity-type: "cheap" is not allowed: spot or on-demand`) {
		t.Errorf("problems %q", p)
	}
}

// A pod's spot policy over its queue's, and each bad value refused naming the field; a
// queue whose policy is never keeps its pods off spot whatever they ask.
func TestSpotPolicies(t *testing.T) {
	three := int32(3)
	queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: v1alpha1.QueueSpec{Spot: &v1alpha1.SpotSpec{
		Policy: "first", OnDemandAfter: &metav1.Duration{Duration: 10 * time.Minute}, InterruptionBudget: &three}}}
	never := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "serving"}, Spec: v1alpha1.QueueSpec{Spot: &v1alpha1.SpotSpec{Policy: "never"}}}
	pod := func(kv ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
		return p
	}
	for _, c := range []struct {
		name   string
		p      *corev1.Pod
		q      *v1alpha1.Queue
		policy engine.SpotPolicy
		after  time.Duration
		budget int // -1: none
		err    string
	}{
		{"the queue's", pod(), queue, engine.SpotFirst, 10 * time.Minute, 3, ""},
		{"the pod's over the queue's", pod(v1alpha1.AnnotationSpot, "first", v1alpha1.AnnotationOnDemandAfter, "2m", v1alpha1.AnnotationInterruptionBudget, "0"), queue, engine.SpotFirst, 2 * time.Minute, 0, ""},
		{"allowed: the wait is not read", pod(v1alpha1.AnnotationSpot, "allowed"), queue, engine.SpotAllowed, 0, 3, ""},
		{"no queue policy", pod(), nil, engine.SpotAllowed, 0, -1, ""},
		{"never, in a queue that says never", pod(v1alpha1.AnnotationSpot, "never"), never, engine.SpotNever, 0, -1, ""},
		{"spot where the queue says never", pod(v1alpha1.AnnotationSpot, "first"), never, 0, 0, 0,
			`metadata.annotations[allot.dev/spot]: "first" is not allowed: queue serving keeps its work off spot capacity (spec.spot.policy never)`},
		{"an unknown policy", pod(v1alpha1.AnnotationSpot, "sometimes"), nil, 0, 0, 0, `metadata.annotations[allot.dev/spot]: "sometimes" is not a spot policy: allowed, never or first`},
		{"a wait not a duration", pod(v1alpha1.AnnotationOnDemandAfter, "soon"), queue, 0, 0, 0, `metadata.annotations[allot.dev/on-demand-after]: "soon" is not allowed: a positive duration`},
		{"a negative budget", pod(v1alpha1.AnnotationInterruptionBudget, "-1"), queue, 0, 0, 0, `metadata.annotations[allot.dev/interruption-budget]: "-1" is not allowed`},
	} {
		policy, after, budget, err := SpotPolicy(c.p, c.q)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case policy != c.policy || after != c.after || (budget == nil) != (c.budget < 0) || (budget != nil && *budget != c.budget):
			t.Errorf("%s: %s, %s, %v; want %s, %s, %d", c.name, policy, after, budget, c.policy, c.after, c.budget)
		}
	}
}
