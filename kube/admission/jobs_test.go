package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// An elastic Job's range is checked when it is made, naming the annotation and what is
// allowed: a minimum above the maximum, a maximum below the Job's count, one that is no
// number, a maximum without a minimum, and a Job whose count cannot change are refused.
func TestElasticJobBoundsAreChecked(t *testing.T) {
	indexed, nonIndexed := batchv1.IndexedCompletion, batchv1.NonIndexedCompletion
	job := func(mode *batchv1.CompletionMode, parallelism, completions int32, ann map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "ddp", Annotations: ann},
			Spec: batchv1.JobSpec{CompletionMode: mode, Parallelism: &parallelism, Completions: &completions,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, RestartPolicy: corev1.RestartPolicyNever}}}}
	}
	bounds := func(lo, hi string) map[string]string {
		return map[string]string{v1alpha1.AnnotationMinMember: lo, v1alpha1.AnnotationMaxMember: hi}
	}
	for _, c := range []struct {
		name string
		job  *batchv1.Job
		want string // "" allowed
	}{
		{"allot submit --workers 1:4", job(&indexed, 1, 1, bounds("1", "4")), ""},
		{"a rigid gang of 2 of 4", job(&indexed, 4, 4, map[string]string{v1alpha1.AnnotationMinMember: "2"}), ""},
		{"a minimum above the maximum", job(&indexed, 2, 2, bounds("3", "2")), "allot.dev/min-member: \"3\" is not allowed; allowed: a whole number from 1 to the Job's parallelism (2)"},
		{"a maximum below the count", job(&indexed, 3, 3, bounds("1", "2")), "allot.dev/max-member: \"2\" is not allowed; allowed: a whole number from the Job's parallelism (3)"},
		{"a maximum that is no number", job(&indexed, 1, 1, bounds("1", "many")), "allot.dev/max-member: \"many\" is not allowed"},
		{"a maximum alone", job(&indexed, 1, 1, map[string]string{v1alpha1.AnnotationMaxMember: "4"}), "allot.dev/max-member needs allot.dev/min-member"},
		{"not indexed", job(&nonIndexed, 1, 1, bounds("1", "4")), "needs an elastic indexed Job: spec.completionMode Indexed"},
		{"completions apart", job(&indexed, 1, 4, bounds("1", "4")), "spec.completions equal to spec.parallelism (1)"},
	} {
		raw, _ := json.Marshal(c.job)
		resp := JobMutator{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
		switch {
		case c.want == "" && !resp.Allowed:
			t.Errorf("%s: refused: %s", c.name, resp.Result.Message)
		case c.want != "" && (resp.Allowed || !strings.Contains(resp.Result.Message, c.want)):
			t.Errorf("%s: allowed %v, %q; want a refusal saying %q", c.name, resp.Allowed, resp.Result.Message, c.want)
		}
	}
}
