package admission

import (
	"context"
	"encoding/json"
	"net/http"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// JobMutator makes a batch Job scheduled by Allot survive its evictions: a pod Allot evicts
// (reclaim, preemption, consolidation) is marked DisruptionTarget by the Eviction API, and
// a pod failure policy that ignores such failures has the Job controller recreate the pod
// without counting it against backoffLimit. The recreated pod joins the same PodGroup, so
// it keeps the group's place in its queue.
type JobMutator struct{}

// Handle implements admission.Handler.
func (JobMutator) Handle(_ context.Context, req admission.Request) admission.Response {
	var j batchv1.Job
	if err := json.Unmarshal(req.Object.Raw, &j); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	spec := &j.Spec.Template.Spec
	// The API server accepts a pod failure policy only with restartPolicy Never.
	if spec.SchedulerName != v1alpha1.SchedulerName || j.Spec.PodFailurePolicy != nil || spec.RestartPolicy != corev1.RestartPolicyNever {
		return admission.Allowed("")
	}
	j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}}
	// With a failure policy the API server requires replacement only once a pod has failed.
	failed := batchv1.Failed
	j.Spec.PodReplacementPolicy = &failed
	cur, err := json.Marshal(&j)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, cur)
}
