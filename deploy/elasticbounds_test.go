package deploy_test

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/internal/trainingop"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
)

// The chart's allot-elastic-bounds policy is the one the scheduler installs where the chart
// is not used.
func TestHelmElasticBoundsIsTheSchedulers(t *testing.T) {
	objs := deploy.Render(t)
	chart := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs["ValidatingAdmissionPolicy/allot-elastic-bounds"])
	want, _ := scheduler.ElasticBoundsPolicy()
	if a, b := string(deploy.MustJSON(t, chart.Spec)), string(deploy.MustJSON(t, want.Spec)); a != b {
		t.Errorf("the chart's policy differs from the scheduler's:\nchart:     %s\nscheduler: %s", a, b)
	}
	if objs["ValidatingAdmissionPolicyBinding/allot-elastic-bounds"] == nil {
		t.Error("no binding for allot-elastic-bounds")
	}
}

// The chart's allot-elastic-bounds policy, on the PyTorchJob CRD of Kubeflow's training
// operator (v1.8.1, its own manifests): a range that cannot run is refused when the job is
// made, naming the field and what is allowed, a bound left out read as the operator fills
// it in (the other one); a range that can is admitted, and changing the worker count within
// it (as Allot does to grow and shrink the job) is too. A job made before the policy may be
// updated without its spec changing.
func TestElasticBoundsPolicyRefusesWhatCannotRun(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 1, 1)
	if err := trainingop.InstallCRDs(e.Ctx, e.Cluster.Config); err != nil {
		t.Fatal(err)
	}
	jobs := e.Dyn.Resource(schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}).Namespace("default")
	const unset = -1000
	job := func(name string, min, max, workers int64) *unstructured.Unstructured {
		ep := map[string]any{"rdzvBackend": "c10d"}
		if min != unset {
			ep["minReplicas"] = min
		}
		if max != unset {
			ep["maxReplicas"] = max
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"elasticPolicy": ep, "pytorchReplicaSpecs": map[string]any{"Worker": map[string]any{"replicas": workers,
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "pytorch", "image": "trainer"}}}}}}}}}
	}
	// Made before the policy: a range that cannot run.
	if _, err := jobs.Create(e.Ctx, job("before", 3, 2, 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	install(t, e, objs, "ValidatingAdmissionPolicy/allot-elastic-bounds", "ValidatingAdmissionPolicyBinding/allot-elastic-bounds")
	n := 0
	e.WaitFor(t, "the policy in force", func() (bool, string) {
		n++
		_, err := jobs.Create(e.Ctx, job(fmt.Sprintf("probe-%d", n), 3, 2, 2), metav1.CreateOptions{})
		return err != nil, fmt.Sprint(err)
	})
	for _, c := range []struct {
		name              string
		min, max, workers int64
		refused           string // "" where admitted
	}{
		{"min-above-max", 3, 2, 2, "spec.elasticPolicy.maxReplicas: 2 is not allowed; allowed: at least spec.elasticPolicy.minReplicas (3)"},
		{"min-zero", 0, 4, 2, "spec.elasticPolicy.minReplicas: 0 is not allowed; allowed: a whole number from 1"},
		// The operator reads maxReplicas 4 alone as 4:4, minReplicas 1 alone as 1:1.
		{"max-alone", unset, 4, 2, "spec.pytorchReplicaSpecs.Worker.replicas: 2 is not allowed; allowed: from spec.elasticPolicy.minReplicas (4) to spec.elasticPolicy.maxReplicas (4)"},
		{"min-alone", 1, unset, 3, "spec.pytorchReplicaSpecs.Worker.replicas: 3 is not allowed; allowed: from spec.elasticPolicy.minReplicas (1) to spec.elasticPolicy.maxReplicas (1)"},
		{"max-alone-fits", unset, 2, 2, ""},
		{"workers-above-max", 1, 2, 3, "spec.pytorchReplicaSpecs.Worker.replicas: 3 is not allowed; allowed: from spec.elasticPolicy.minReplicas (1) to spec.elasticPolicy.maxReplicas (2)"},
		{"workers-below-min", 2, 4, 1, "spec.pytorchReplicaSpecs.Worker.replicas: 1 is not allowed; allowed: from spec.elasticPolicy.minReplicas (2) to spec.elasticPolicy.maxReplicas (4)"},
		{"fits", 1, 4, 1, ""},
		{"no-bounds", unset, unset, 2, ""},
	} {
		_, err := jobs.Create(e.Ctx, job(c.name, c.min, c.max, c.workers), metav1.CreateOptions{})
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s refused: %v", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: %v, want refused with %q", c.name, err, c.refused)
		}
	}
	// The job from before the policy: labelled as it was, its spec left alone, it passes;
	// a change of its spec is checked.
	if _, err := jobs.Patch(e.Ctx, "before", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling a job made before the policy: %v", err)
	}
	if _, err := jobs.Patch(e.Ctx, "before", types.MergePatchType, []byte(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":1}}}}`), metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.elasticPolicy.maxReplicas: 2 is not allowed") {
		t.Errorf("changing the spec of a job made before the policy: %v", err)
	}
	// Allot grows the job within its range, and may not take it past it.
	if _, err := jobs.Patch(e.Ctx, "fits", types.MergePatchType, []byte(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":4}}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("growing fits to 4 workers: %v", err)
	}
	if _, err := jobs.Patch(e.Ctx, "fits", types.MergePatchType, []byte(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":5}}}}`), metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.pytorchReplicaSpecs.Worker.replicas: 5 is not allowed") {
		t.Errorf("5 workers of at most 4: %v", err)
	}
}
