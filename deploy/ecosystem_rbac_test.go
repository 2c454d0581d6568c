package deploy_test

import (
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/kubetest"
)

// TestSchedulerRoleReadsEcosystemKinds: the chart's scheduler role lets the workload
// controller watch LeaderWorkerSets and RayClusters and delete a PodGroup it made, and the
// webhook read each owner it climbs (RayJobs, RayServices, TrainJobs, Knative's and
// KServe's serving objects), asked of the API server's authorizer as that account; it still
// may not change them.
func TestSchedulerRoleReadsEcosystemKinds(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 0, 0)
	install(t, e, objs, "ServiceAccount/allot", "ClusterRole/allot", "ClusterRoleBinding/allot")
	rc := serviceAccount(e, "allot")
	client := kubernetes.NewForConfigOrDie(rc)
	may := func(verb, group, resource string) bool {
		t.Helper()
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(e.Ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: group, Resource: resource, Namespace: "default"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	// The API server's RBAC cache takes the binding a moment after it is made (longer on a
	// loaded machine): wait for one right the role grants before judging them all.
	e.WaitFor(t, "the scheduler's role in force", func() (bool, string) { return may("get", "ray.io", "rayclusters"), "not yet" })
	for _, a := range []struct{ verbs, group, resource string }{
		{"get list watch", "leaderworkerset.x-k8s.io", "leaderworkersets"},
		{"get list watch", "ray.io", "rayclusters"},
		{"get", "ray.io", "rayjobs"},
		{"get", "ray.io", "rayservices"},
		{"get", "trainer.kubeflow.org", "trainjobs"},
		{"get list watch", "jobset.x-k8s.io", "jobsets"},
		{"get", "serving.knative.dev", "services"},
		{"get", "serving.knative.dev", "configurations"},
		{"get", "serving.knative.dev", "revisions"},
		{"get", "serving.kserve.io", "inferenceservices"},
		{"get", "", "pods"},
		{"get", "apps", "statefulsets"},
		{"delete", "allot.dev", "podgroups"},
	} {
		for _, verb := range strings.Fields(a.verbs) {
			if !may(verb, a.group, a.resource) {
				t.Errorf("the scheduler may not %s %s.%s", verb, a.resource, a.group)
			}
		}
		for _, verb := range []string{"update", "patch", "delete"} {
			// Only read: other projects' objects. (StatefulSets the idle controller scales
			// to zero, as allot suspend does: docs/idle.md.)
			if a.group != "allot.dev" && a.group != "" && a.group != "apps" && may(verb, a.group, a.resource) {
				t.Errorf("the scheduler may %s %s.%s", verb, a.resource, a.group)
			}
		}
	}
}
