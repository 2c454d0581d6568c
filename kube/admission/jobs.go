package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

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
	if spec.SchedulerName == v1alpha1.SchedulerName {
		if err := elasticBounds(&j); err != nil {
			return admission.Denied(err.Error())
		}
	}
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

// elasticBounds checks an elastic Job's range where its owner wrote one: allot.dev/min-member
// (its gang) a whole number from 1 to its parallelism, and allot.dev/max-member (how far
// the scheduler may grow it) at least its parallelism, on an Indexed Job whose completions
// equal its parallelism, the only kind of Job whose count can change. Refused here, at its
// creation, a range would otherwise be ignored without a word.
func elasticBounds(j *batchv1.Job) error {
	least, hasMin := j.Annotations[v1alpha1.AnnotationMinMember]
	most, hasMax := j.Annotations[v1alpha1.AnnotationMaxMember]
	if !hasMin && !hasMax {
		return nil
	}
	n := int64(1)
	if j.Spec.Parallelism != nil {
		n = int64(*j.Spec.Parallelism)
	}
	lo := int64(0)
	if hasMin {
		v, err := strconv.ParseInt(least, 10, 32)
		if err != nil || v < 1 || v > n {
			return fmt.Errorf("Job %s: annotation %s: %q is not allowed; allowed: a whole number from 1 to the Job's parallelism (%d)", j.Name, v1alpha1.AnnotationMinMember, least, n)
		}
		lo = v
	}
	if !hasMax {
		return nil
	}
	v, err := strconv.ParseInt(most, 10, 32)
	if err != nil || v < n || v < lo || v > v1alpha1.MaxGang {
		return fmt.Errorf("Job %s: annotation %s: %q is not allowed; allowed: a whole number from the Job's parallelism (%d) and its %s up to %d",
			j.Name, v1alpha1.AnnotationMaxMember, most, n, v1alpha1.AnnotationMinMember, v1alpha1.MaxGang)
	}
	if !hasMin {
		return fmt.Errorf("Job %s: annotation %s needs %s, the workers it cannot run without (its gang)", j.Name, v1alpha1.AnnotationMaxMember, v1alpha1.AnnotationMinMember)
	}
	indexed := j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
	if !indexed || j.Spec.Completions == nil || int64(*j.Spec.Completions) != n {
		return fmt.Errorf("Job %s: annotation %s needs an elastic indexed Job: spec.completionMode Indexed and spec.completions equal to spec.parallelism (%d), which Kubernetes lets change together", j.Name, v1alpha1.AnnotationMaxMember, n)
	}
	return nil
}
