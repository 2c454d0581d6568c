package multicluster

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/kube/scheduler"
)

// The ValidatingAdmissionPolicies that keep the fields dispatch reads to their owners.
const (
	DispatchPolicyName = "allot-dispatch"
	OriginPolicyName   = "allot-dispatch-origin"
)

// dispatchAnnotations are what the manager alone writes on its Jobs: where each was
// dispatched, when, and why it waits. A tenant who set allot.dev/cluster on a Job would
// have it run there without the manager's choice, past its queue's quota.
var dispatchAnnotations = []string{AnnotationCluster, AnnotationDispatchedAt, AnnotationWaiting, AnnotationCopy}

// DispatchPolicy, on a manager cluster, refuses a Job created with, or changed to, other
// values of the dispatch annotations by anyone but writers (the manager's user) and
// cluster admins. The manager installs it at start where it may; the chart installs the
// same (deploy/helm/allot/templates/multicluster.yaml; a test compares the two).
func DispatchPolicy(writers []string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	keys := scheduler.CELList(dispatchAnnotations)
	return jobPolicy(DispatchPolicyName, writers, []admissionregistrationv1.Variable{
		{Name: "newA", Expression: "object.metadata.?annotations.orValue({})"},
		{Name: "oldA", Expression: "request.operation == 'UPDATE' ? oldObject.metadata.?annotations.orValue({}) : {}"},
	}, admissionregistrationv1.Validation{
		Expression: keys + ".all(k, (k in variables.newA ? variables.newA[k] : '') == (k in variables.oldA ? variables.oldA[k] : ''))",
		Message: "metadata.annotations " + strings.Join(dispatchAnnotations, ", ") + " are written by Allot's multi-cluster manager " +
			"(where a Job runs is its choice, by the queues' quotas): leave them out",
		Reason: ptr.To(metav1.StatusReasonForbidden),
	})
}

// OriginPolicy, on a worker cluster, keeps the label allot.dev/origin (which makes a Job
// a copy the manager mirrors, resumes, suspends or deletes) to writers (the manager's
// identity there) and cluster admins: a tenant's Job cannot pass as another's copy.
func OriginPolicy(writers []string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	key := fmt.Sprintf("%q", LabelOrigin)
	return jobPolicy(OriginPolicyName, writers, []admissionregistrationv1.Variable{
		{Name: "newL", Expression: "object.metadata.?labels.orValue({})"},
		{Name: "oldL", Expression: "request.operation == 'UPDATE' ? oldObject.metadata.?labels.orValue({}) : {}"},
	}, admissionregistrationv1.Validation{
		Expression: "(" + key + " in variables.newL ? variables.newL[" + key + "] : '') == (" + key + " in variables.oldL ? variables.oldL[" + key + "] : '')",
		Message:    "metadata.labels[" + LabelOrigin + "] marks the copy of a multi-cluster manager's Job: the manager alone sets it; leave it out",
		Reason:     ptr.To(metav1.StatusReasonForbidden),
	})
}

// jobPolicy is a policy on Jobs' creation and updates that lets writers and cluster
// admins through and holds everyone else to v.
func jobPolicy(name string, writers []string, vars []admissionregistrationv1.Variable, v admissionregistrationv1.Validation) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	v.Expression = "request.userInfo.username in " + scheduler.CELList(writers) + " || 'system:masters' in request.userInfo.?groups.orValue([]) || " + v.Expression
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}}}}}},
			Variables:   vars,
			Validations: []admissionregistrationv1.Validation{v},
		}}
	return p, scheduler.DenyBinding(name)
}

// ensurePolicy installs a policy where it is missing, with the caller's own user among its
// writers; without the right to (the chart installs it), it says so.
func ensurePolicy(ctx context.Context, client kubernetes.Interface, make func([]string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding), others ...string) {
	writers := others
	if r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		writers = append(writers, r.Status.UserInfo.Username)
	}
	p, b := make(writers)
	scheduler.InstallPolicy(ctx, client, p, b, "the multi-cluster dispatch fields to their owners")
}
