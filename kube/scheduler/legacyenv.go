package scheduler

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A sharing pod admitted before the one-container layout (v1alpha1.OneContainerSliceSince)
// reads its device from a ConfigMap in its own namespace, which the scheduler fills at the
// bind (writeConfigMap), labelled as Allot's and owned by the pod. The kubelet reads it
// again at every container start, so a tenant with the edit role who rewrote it, or deleted
// it and made one of the same name, would give the next start of its container any device
// of the node. The API server keeps those ConfigMaps to the scheduler: no webhook has to
// be up for it.

// ConfigMapsPolicyName is the ValidatingAdmissionPolicy that keeps them.
const ConfigMapsPolicyName = "allot-gpu-configmaps"

// gpuConfigMapCEL is true of a ConfigMap the scheduler wrote for a pod: Allot's label and
// a pod for its owner (o is object or oldObject).
func gpuConfigMapCEL(o string) string {
	return fmt.Sprintf(`%s != null && %s.metadata.?labels[%s].orValue("") == %s && %s.metadata.?ownerReferences.orValue([]).exists(r, r.kind == "Pod")`,
		o, o, celString(managedByLabel), celString(SchedulerName), o)
}

// managedByLabel marks what the scheduler writes (the ConfigMaps, the reservation pods).
const managedByLabel = "app.kubernetes.io/managed-by"

// ConfigMapsPolicy is the policy, with the users who may write such a ConfigMap besides
// the cluster's own controllers (the garbage collector removes it with its pod, the
// namespace controller with its namespace) and cluster admins: the scheduler.
func ConfigMapsPolicy(writers []string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapsPolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}}},
			// Made as one, or one before: the label taken off or the owner changed counts.
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "a-pods-gpu-configmap",
				Expression: gpuConfigMapCEL("object") + " || " + gpuConfigMapCEL("oldObject")}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "request.userInfo.username in " + CELList(writers) +
					` || request.userInfo.username.startsWith("system:serviceaccount:kube-system:") || request.userInfo.username == "system:kube-controller-manager"` +
					` || "system:masters" in request.userInfo.?groups.orValue([])`,
				MessageExpression: `"ConfigMap " + (object != null ? object.metadata.name : oldObject.metadata.name) + ` +
					`" holds the GPU a pod admitted before ` + v1alpha1.OneContainerSliceSince.Format("2006-01-02") + ` reads at each start of its container: Allot's scheduler writes it, and it goes with its pod ` +
					`(delete the pod and create it anew, which needs no ConfigMap)"`,
				Reason: ptr(metav1.StatusReasonForbidden),
			}},
		}}
	return p, DenyBinding(ConfigMapsPolicyName)
}
