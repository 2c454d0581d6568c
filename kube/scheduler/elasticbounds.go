package scheduler

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// ElasticBoundsPolicy refuses, when a PyTorchJob is made or its spec changed, an elastic
// range that cannot run: elasticPolicy.minReplicas under 1 or above maxReplicas, or
// Worker.replicas outside them, a bound left out being the other one, as the training
// operator fills it in (maxReplicas 4 alone is 4:4). torchrun would wait forever for a
// minimum it cannot reach, or never admit the workers above its maximum; the operator checks
// none of it, and Allot grows and shrinks the job within the range. Refused at creation,
// the job says why at once, naming the field. It holds for every PyTorchJob of the cluster,
// Allot's or not: such a job runs under no scheduler. It does not see pytorchjobs/scale,
// where the operator's autoscaler writes a count within the range. An elastic Job's range
// (allot.dev/min-member, max-member) is checked by the Job webhook (kube/admission). The
// chart installs the same policy (deploy/helm/allot/templates/elasticbounds.yaml; a test
// compares the two).
func ElasticBoundsPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	name := v1alpha1.ElasticBoundsPolicyName
	const ep = "object.spec.elasticPolicy"
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"kubeflow.org"}, APIVersions: []string{"*"}, Resources: []string{"pytorchjobs"}}}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "elastic-and-changed",
				Expression: "has(object.spec) && has(" + ep + ") && (request.operation == 'CREATE' || !has(oldObject.spec) || oldObject.spec != object.spec)"}},
			// A bound left out is the other's, as the training operator fills it in
			// (both left out: the worker count, which then passes); a check holds where a
			// value it compares is missing.
			Variables: []admissionregistrationv1.Variable{
				{Name: "min", Expression: ep + ".?minReplicas.or(" + ep + ".?maxReplicas)"},
				{Name: "max", Expression: ep + ".?maxReplicas.or(" + ep + ".?minReplicas)"},
				{Name: "workers", Expression: "object.spec.?pytorchReplicaSpecs[?'Worker'].?replicas"},
			},
			// A message reads a bound with orValue: there value() fails (and the API server
			// says only "failed expression"), where the check itself reads it well.
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!variables.min.hasValue() || variables.min.value() >= 1",
				MessageExpression: "'spec.elasticPolicy.minReplicas: ' + string(variables.min.orValue(0)) + ' is not allowed; " +
					"allowed: a whole number from 1 (the fewest workers the job runs with) to spec.elasticPolicy.maxReplicas'",
				Reason: ptr(metav1.StatusReasonInvalid),
			}, {
				Expression: "!variables.min.hasValue() || !variables.max.hasValue() || variables.max.value() >= variables.min.value()",
				MessageExpression: "'spec.elasticPolicy.maxReplicas: ' + string(variables.max.orValue(0)) + ' is not allowed; " +
					"allowed: at least spec.elasticPolicy.minReplicas (' + string(variables.min.orValue(0)) + ')'",
				Reason: ptr(metav1.StatusReasonInvalid),
			}, {
				Expression: "!variables.workers.hasValue() || (!variables.min.hasValue() || variables.workers.value() >= variables.min.value()) && " +
					"(!variables.max.hasValue() || variables.workers.value() <= variables.max.value())",
				MessageExpression: "'spec.pytorchReplicaSpecs.Worker.replicas: ' + string(variables.workers.orValue(0)) + ' is not allowed; " +
					"allowed: from spec.elasticPolicy.minReplicas (' + (variables.min.hasValue() ? string(variables.min.orValue(0)) : 'unset') + ') " +
					"to spec.elasticPolicy.maxReplicas (' + (variables.max.hasValue() ? string(variables.max.orValue(0)) : 'unset') + '); " +
					"a bound left out is the other one, as the training operator reads it'",
				Reason: ptr(metav1.StatusReasonInvalid),
			}},
		}}
	return p, DenyBinding(name)
}
