package admission

import (
	"context"
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Creator records who created a workload: the request's user, as the API server
// authenticated it, in allot.dev/created-by on the workload's top object (one with no
// owner: a Job, a Deployment, a TrainJob, a PodGroup). allot list -o wide, describe and the
// dashboard show it. A tenant cannot choose the value: this webhook writes over it at
// creation and puts it back where an update drops it, and the allot-created-by policy
// (kube/scheduler/creator.go) refuses a value that is not the requester's at creation and
// any change after, also where this webhook did not answer.
type Creator struct{}

// CreatorRules are the kinds whose top objects are workloads (kube/inspect's): Kubernetes'
// own and those of the projects Allot schedules for (docs/integrations.md). A kind whose
// CRD is not installed costs nothing. Not pods: a policy on every pod's creation cost
// kube-bench's 2,000 bare pods 15-20% of their throughput here (docs/performance.md), and
// a bare pod is rarely how people run work; Allot shows no creator for one.
var CreatorRules = []admissionregv1.Rule{
	{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}},
	{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments", "statefulsets"}},
	{APIGroups: []string{"jobset.x-k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"jobsets"}},
	{APIGroups: []string{"leaderworkerset.x-k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leaderworkersets"}},
	{APIGroups: []string{"ray.io"}, APIVersions: []string{"*"}, Resources: []string{"rayclusters", "rayjobs", "rayservices"}},
	{APIGroups: []string{"trainer.kubeflow.org"}, APIVersions: []string{"*"}, Resources: []string{"trainjobs"}},
	{APIGroups: []string{"kubeflow.org"}, APIVersions: []string{"*"}, Resources: []string{"pytorchjobs", "mpijobs"}},
	{APIGroups: []string{"serving.knative.dev"}, APIVersions: []string{"*"}, Resources: []string{"services"}},
	{APIGroups: []string{"serving.kserve.io"}, APIVersions: []string{"*"}, Resources: []string{"inferenceservices"}},
	{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version}, Resources: []string{"podgroups"}},
}

// CreatorCondition sends the webhook, at creation, top objects only (what a controller
// makes for a workload is not one) outside the system's namespaces; and an update that
// drops the name. A server-side apply of a manifest without it
// drops it (the field is the applier's, who created the object), and so does a replace:
// the webhook puts it back rather than have the policy refuse the apply.
const CreatorCondition = "request.operation == 'CREATE' ? " +
	"((!has(object.metadata.ownerReferences) || size(object.metadata.ownerReferences) == 0) && " +
	"!(request.namespace in ['kube-system', 'kube-public', 'kube-node-lease'])) : " +
	"('" + v1alpha1.AnnotationCreatedBy + "' in oldObject.metadata.?annotations.orValue({}) && " +
	"!('" + v1alpha1.AnnotationCreatedBy + "' in object.metadata.?annotations.orValue({})))"

// Handle implements admission.Handler.
func (Creator) Handle(_ context.Context, req admission.Request) admission.Response {
	var name string
	switch req.Operation {
	case admissionv1.Create:
		name = req.UserInfo.Username
	case admissionv1.Update:
		var old map[string]any
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		name, _ = annotations(old)[v1alpha1.AnnotationCreatedBy].(string)
	}
	if name == "" {
		return admission.Allowed("")
	}
	var o map[string]any
	if err := json.Unmarshal(req.Object.Raw, &o); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if refs, _ := meta(o)["ownerReferences"].([]any); len(refs) > 0 && req.Operation == admissionv1.Create {
		return admission.Allowed("")
	}
	ann := annotations(o)
	if _, kept := ann[v1alpha1.AnnotationCreatedBy]; kept && req.Operation == admissionv1.Update {
		return admission.Allowed("") // a change is the policy's to refuse, loudly
	}
	ann[v1alpha1.AnnotationCreatedBy] = name
	cur, err := json.Marshal(o)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, cur)
}

// meta is an object's metadata, made where it has none.
func meta(o map[string]any) map[string]any {
	m, _ := o["metadata"].(map[string]any)
	if m == nil {
		m = map[string]any{}
		o["metadata"] = m
	}
	return m
}

// annotations is an object's annotations, made where it has none.
func annotations(o map[string]any) map[string]any {
	m := meta(o)
	a, _ := m["annotations"].(map[string]any)
	if a == nil {
		a = map[string]any{}
		m["annotations"] = a
	}
	return a
}
