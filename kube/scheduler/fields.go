package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Who may write what on a pod Allot schedules, once it exists. Its owner sets the queue,
// the gang and the GPU request when creating it, and the admission webhooks check them
// then; the scheduler writes where it put the pod and what its containers get in the bind
// (pods/binding, which an UPDATE policy does not see); the node's agent records the
// devices the kubelet gave. Pod labels and annotations stay writable by anyone who may
// update the pod (a tenant with the edit role in its namespace), so without this policy a
// tenant could rewrite a running pod's share (double-booking its GPU), move it to another
// team's queue, or point its next container start at another device. The API server
// refuses those writes itself: no webhook has to be up for it.

// frozenLabels and frozenAnnotations may not change after creation.
var (
	frozenLabels = []string{v1alpha1.LabelQueue, v1alpha1.LabelPodGroup, v1alpha1.LabelClass, v1alpha1.LabelPreemptible,
		v1alpha1.LabelReservation}
	frozenAnnotations = []string{
		v1alpha1.AnnotationGPUFraction, v1alpha1.AnnotationGPUMemory, v1alpha1.AnnotationGPUCompute, v1alpha1.AnnotationGPUTypes,
		v1alpha1.AnnotationMinMember, v1alpha1.AnnotationTopologyRequired, v1alpha1.AnnotationTopologyPreferred, v1alpha1.AnnotationTopology,
		v1alpha1.AnnotationGPUs, v1alpha1.AnnotationGPUShare, v1alpha1.AnnotationConfigMap, v1alpha1.AnnotationLeader,
		// The slice's count and the device choice (the owner's), what the bind booked of
		// each device (the scheduler's), and what the webhook translated (its record).
		v1alpha1.AnnotationGPUCount, v1alpha1.AnnotationGPUContainer, v1alpha1.AnnotationGPUUUIDPick, v1alpha1.AnnotationGPUUUIDExclude, v1alpha1.AnnotationGPUTypeExclude,
		v1alpha1.AnnotationGPUIsland, v1alpha1.AnnotationNodePolicy, v1alpha1.AnnotationGPUPolicy,
		v1alpha1.AnnotationGPUShareMemory, v1alpha1.AnnotationGPUShareCompute, v1alpha1.AnnotationTranslated,
		// The MIG instance asked of Allot (the owner's) and where the bind booked it.
		v1alpha1.AnnotationMIG, v1alpha1.AnnotationMIGInstances,
		// A dynamic fraction's limit (the owner's): what the bind holds the pod to.
		v1alpha1.AnnotationGPUMemoryLimit, v1alpha1.AnnotationGPUFractionLimit,
		// How its compute share holds (the owner's, within its node's).
		v1alpha1.AnnotationComputeMode,
		// The node pools it tries, in order, and the capacity it may use (the owner's,
		// within its queue's).
		v1alpha1.AnnotationNodePools, v1alpha1.AnnotationSpot, v1alpha1.AnnotationOnDemandAfter, v1alpha1.AnnotationInterruptionBudget,
	}
	// agentRecords are what the node's agent records on a pod, which only the agents may
	// change: the devices the kubelet gave it, and the GPU memory its processes hold (a
	// tenant who lowered it could keep a burster from being stopped).
	agentRecords = []string{v1alpha1.AnnotationGPUDevices, v1alpha1.AnnotationPodGPUMemoryUsed}
	// frozenPrefixes: the device environment and the CDI device requests.
	frozenPrefixes = append([]string{v1alpha1.AnnotationGPUEnvPrefix}, v1alpha1.CDIOwnedPrefixes...)
)

// FieldsPolicy is the policy, with the users who may record a pod's devices and GPU memory
// (the agents).
func FieldsPolicy(deviceRecorders []string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	name := v1alpha1.FieldsPolicyName
	owned := make([]string, len(frozenPrefixes))
	for i, p := range frozenPrefixes {
		owned[i] = fmt.Sprintf("k.startsWith(%s)", celString(p))
	}
	isOwned := strings.Join(owned, " || ")
	changedIn := func(list, newV, oldV string) string {
		return fmt.Sprintf("%s.filter(k, (k in %s) != (k in %s) || (k in %s && %s[k] != %s[k]))", list, newV, oldV, newV, newV, oldV)
	}
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "scheduled-by-allot",
				Expression: "object.spec.schedulerName == " + celString(v1alpha1.SchedulerName)}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "newA", Expression: "object.metadata.?annotations.orValue({})"},
				{Name: "oldA", Expression: "oldObject.metadata.?annotations.orValue({})"},
				{Name: "newL", Expression: "object.metadata.?labels.orValue({})"},
				{Name: "oldL", Expression: "oldObject.metadata.?labels.orValue({})"},
				{Name: "changed", Expression: changedIn(CELList(frozenLabels), "variables.newL", "variables.oldL") + " + " +
					changedIn(CELList(frozenAnnotations), "variables.newA", "variables.oldA") + " + " +
					fmt.Sprintf("variables.newA.filter(k, (%s) && (!(k in variables.oldA) || variables.oldA[k] != variables.newA[k])) + ", isOwned) +
					fmt.Sprintf("variables.oldA.filter(k, (%s) && !(k in variables.newA))", isOwned)},
				{Name: "recordsChanged", Expression: changedIn(CELList(agentRecords), "variables.newA", "variables.oldA")},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "size(variables.changed) == 0",
				MessageExpression: "variables.changed.join(', ') + ': fixed once the pod is admitted; Allot books the pod and gives its containers their devices by it " +
					"(delete the pod and create it anew to change it)'",
				Reason: ptr(metav1.StatusReasonForbidden),
			}, {
				Expression:        "size(variables.recordsChanged) == 0 || request.userInfo.username in " + CELList(deviceRecorders),
				MessageExpression: "variables.recordsChanged.join(', ') + \" is written by the node's allot agent only: what it reads on the node (the devices the kubelet gave the pod, the GPU memory its processes hold)\"",
				Reason:            ptr(metav1.StatusReasonForbidden),
			}},
		}}
	return p, DenyBinding(name)
}

// denyBinding binds the policy named to every object it matches, refusing what it fails.
// DenyBinding binds the policy of that name to every object it matches, refusing.
func DenyBinding(name string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
}

func celString(s string) string { return fmt.Sprintf("%q", s) }

// CELList is a CEL list literal of the strings.
func CELList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = celString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// ensureFieldsPolicy installs the policies if they are missing: the pod-fields one with
// the scheduler's own user among the device recorders (agents run in process on allot up,
// with its client) beside those configured, and the GPU ConfigMaps one with it as their
// writer. Without the right to (the Helm chart installs them itself), it says so.
func (s *Scheduler) ensureFieldsPolicy(ctx context.Context) {
	recorders := append([]string(nil), s.opts.DeviceRecorders...)
	var me []string
	if r, err := s.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		me = []string{r.Status.UserInfo.Username}
	}
	p, b := FieldsPolicy(append(recorders, me...))
	s.ensurePolicy(ctx, p, b, "pods' queue, share and device fields from their owners")
	p, b = ConfigMapsPolicy(me)
	s.ensurePolicy(ctx, p, b, "the GPU ConfigMaps of pods admitted before the one-container layout from their owners")
	p, b = CreatorPolicy()
	s.ensurePolicy(ctx, p, b, "who created each workload")
	p, b = ElasticBoundsPolicy()
	s.ensurePolicy(ctx, p, b, "PyTorchJobs' elastic ranges within what can run")
	p, b = CapacityTypePolicy()
	s.ensurePolicy(ctx, p, b, "nodes' allot.dev/capacity-type to spot or on-demand")
}

func (s *Scheduler) ensurePolicy(ctx context.Context, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, keeps string) {
	InstallPolicy(ctx, s.client, p, b, keeps)
}

// InstallPolicy creates a ValidatingAdmissionPolicy and its binding where they are
// missing. Without the right to (the Helm chart installs them itself, and gives no right
// to), it says so; any other failure says what the API server will not keep.
func InstallPolicy(ctx context.Context, client kubernetes.Interface, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, keeps string) {
	api := client.AdmissionregistrationV1()
	_, err := api.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		_, err = api.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
	}
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
	case apierrors.IsForbidden(err):
		slog.Info("allot: not allowed to install a policy; the Helm chart installs it", "policy", p.Name)
	default:
		slog.Warn("allot: the API server will not keep "+keeps+" (install the chart's policy)", "policy", p.Name, "err", err)
	}
}
