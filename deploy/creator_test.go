package deploy_test

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/admission"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
)

// The chart's allot-created-by policy is the one the scheduler installs where the chart is
// not used, and its creator webhook sees the kinds and objects the embedded cluster's does.
// TestResearcherCLISession plays the tenant against both.
func TestHelmCreatorIsTheSchedulers(t *testing.T) {
	objs := deploy.Render(t)
	chart := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs["ValidatingAdmissionPolicy/allot-created-by"])
	want, _ := scheduler.CreatorPolicy()
	if a, b := string(deploy.MustJSON(t, chart.Spec)), string(deploy.MustJSON(t, want.Spec)); a != b {
		t.Errorf("the chart's policy differs from the scheduler's:\nchart:     %s\nscheduler: %s", a, b)
	}
	if objs["ValidatingAdmissionPolicyBinding/allot-created-by"] == nil {
		t.Error("no binding for allot-created-by")
	}
	mut := as[admissionregistrationv1.MutatingWebhookConfiguration](t, objs["MutatingWebhookConfiguration/allot"])
	for _, w := range mut.Webhooks {
		if w.Name != "creator.mutate.allot.dev" {
			continue
		}
		var rules []admissionregistrationv1.Rule
		for _, r := range w.Rules {
			rules = append(rules, r.Rule)
		}
		if a, b := string(deploy.MustJSON(t, rules)), string(deploy.MustJSON(t, admission.CreatorRules)); a != b {
			t.Errorf("the chart's creator webhook sees %s, the embedded one %s", a, b)
		}
		if len(w.MatchConditions) != 1 || w.MatchConditions[0].Expression != admission.CreatorCondition || *w.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("the chart's creator webhook: %+v, failure policy %v", w.MatchConditions, *w.FailurePolicy)
		}
		for _, r := range w.Rules {
			if len(r.Operations) != 2 || r.Operations[0] != admissionregistrationv1.Create || r.Operations[1] != admissionregistrationv1.Update {
				t.Errorf("the chart's creator webhook sees %v of %v, want CREATE and UPDATE", r.Operations, r.Resources)
			}
		}
		return
	}
	t.Error("the chart has no creator.mutate.allot.dev webhook")
}

// The chart's allot-created-by policy alone, as where the creator webhook did not answer:
// a tenant with edit may not create a workload naming someone else as its creator, nor add
// or change the name after; a workload made with no name, or with its own, is admitted.
func TestCreatorPolicyHoldsWithoutTheWebhook(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 1, 1)
	install(t, e, objs, "ValidatingAdmissionPolicy/allot-created-by", "ValidatingAdmissionPolicyBinding/allot-created-by")
	alice := kubetest.Tenant(t, e.Ctx, e.Cluster.Config, "team-c", "alice")
	job := func(name, by string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}}
		if by != "" {
			j.Annotations = map[string]string{v1alpha1.AnnotationCreatedBy: by}
		}
		return j
	}
	jobs := alice.BatchV1().Jobs("team-c")
	n := 0
	e.WaitFor(t, "the policy in force", func() (bool, string) {
		n++
		_, err := jobs.Create(e.Ctx, job(fmt.Sprintf("forged-%d", n), "dave"), metav1.CreateOptions{})
		return err != nil, fmt.Sprint(err)
	})
	if _, err := jobs.Create(e.Ctx, job("forged", "dave"), metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), `metadata.annotations[allot.dev/created-by]: "dave" is not allowed: Allot records who creates a workload (here alice); leave the annotation out`) {
		t.Errorf("a Job claiming dave made it: %v", err)
	}
	if _, err := jobs.Create(e.Ctx, job("own", "alice"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a Job naming its own creator: %v", err)
	}
	if _, err := jobs.Create(e.Ctx, job("unnamed", ""), metav1.CreateOptions{}); err != nil {
		t.Errorf("a Job naming no creator: %v", err)
	}
	for name, patch := range map[string]string{
		"own":     `{"metadata":{"annotations":{"allot.dev/created-by":"dave"}}}`,
		"unnamed": `{"metadata":{"annotations":{"allot.dev/created-by":"alice"}}}`,
	} {
		if _, err := jobs.Patch(e.Ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil ||
			!strings.Contains(err.Error(), "fixed once the object exists") {
			t.Errorf("patching %s's creator: %v", name, err)
		}
	}
	// Dropping it is let through (a server-side apply of a manifest without it drops it;
	// the webhook, where it answers, puts it back): the name is lost, never forged.
	if j, err := jobs.Patch(e.Ctx, "own", types.MergePatchType, []byte(`{"metadata":{"annotations":{"allot.dev/created-by":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("dropping own's creator: %v", err)
	} else if _, ok := j.Annotations[v1alpha1.AnnotationCreatedBy]; ok {
		t.Errorf("own's creator still there with no webhook: %v", j.Annotations)
	}
	// Other changes of the workload stay the tenant's.
	if _, err := jobs.Patch(e.Ctx, "own", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"c"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling own: %v", err)
	}
}
