package scheduler

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// CapacityTypePolicy refuses a node's allot.dev/capacity-type, the admin's word on whether
// a node is spot, with a value other than spot or on-demand, when it is set or changed: read
// as on-demand, a misspelt "spot" would put work its queue keeps off spot capacity on a
// node that goes. A value there before the policy stays (the node's other updates pass),
// and is named in the node's problems. The chart installs the same policy
// (deploy/helm/allot/templates/capacitytype.yaml; a test compares the two).
func CapacityTypePolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	name := v1alpha1.CapacityTypePolicyName
	key := celString(v1alpha1.LabelCapacityType)
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}}}}}},
			// Only a node whose label is set or changed: the kubelet's own updates of a
			// node pass untouched.
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "capacity-type-set",
				Expression: key + " in object.metadata.?labels.orValue({}) && (request.operation == 'CREATE' || " +
					"oldObject.metadata.?labels.orValue({})[?" + key + "] != object.metadata.labels[?" + key + "])"}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.metadata.labels[" + key + "] in ['spot', 'on-demand']",
				MessageExpression: "'metadata.labels[" + v1alpha1.LabelCapacityType + "]: \"' + object.metadata.labels[" + key + "] + " +
					"'\" is not allowed; allowed: spot or on-demand'",
				Reason: ptr(metav1.StatusReasonInvalid),
			}},
		}}
	return p, DenyBinding(name)
}
