package scheduler

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/admission"
)

// CreatorPolicy keeps allot.dev/created-by true on the kinds whose top objects are
// workloads (admission.CreatorRules): at creation a top object (no owner) may carry only
// its requester's name, which Allot's webhook writes; afterwards no one may change or add
// it. An update that drops it is let through: a server-side apply of the manifest drops
// it, and the webhook puts it back (where it did not answer, the name is lost, never
// forged). What a controller makes for a workload (an owned object) may carry what it
// copied from its owner: Allot reads the value from top objects alone. The chart installs
// the same policy (deploy/helm/allot/templates/creator.yaml; a test compares the two).
func CreatorPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	name := v1alpha1.CreatorPolicyName
	key := celString(v1alpha1.AnnotationCreatedBy)
	rules := make([]admissionregistrationv1.NamedRuleWithOperations, len(admission.CreatorRules))
	for i, r := range admission.CreatorRules {
		rules[i] = admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: r}}
	}
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rules},
			Variables: []admissionregistrationv1.Variable{
				{Name: "newA", Expression: "object.metadata.?annotations.orValue({})"},
				{Name: "oldA", Expression: "request.operation == 'UPDATE' ? oldObject.metadata.?annotations.orValue({}) : {}"},
				{Name: "top", Expression: "size(object.metadata.?ownerReferences.orValue([])) == 0"},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "request.operation != 'CREATE' || !variables.top || !(" + key + " in variables.newA) || variables.newA[" + key + "] == request.userInfo.username",
				MessageExpression: "'metadata.annotations[" + v1alpha1.AnnotationCreatedBy + "]: \"' + variables.newA[" + key + "] + '\" is not allowed: " +
					"Allot records who creates a workload (here ' + request.userInfo.username + '); leave the annotation out'",
				Reason: ptr(metav1.StatusReasonForbidden),
			}, {
				Expression: "request.operation != 'UPDATE' || !(" + key + " in variables.newA) || " +
					"(" + key + " in variables.oldA && variables.newA[" + key + "] == variables.oldA[" + key + "])",
				MessageExpression: "'metadata.annotations[" + v1alpha1.AnnotationCreatedBy + "]: fixed once the object exists (who created it)'",
				Reason:            ptr(metav1.StatusReasonForbidden),
			}},
		}}
	return p, DenyBinding(name)
}
