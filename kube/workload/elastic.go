package workload

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// JobElastic is how far the scheduler may grow an elastic indexed Job (allot submit
// --workers MIN:MAX): an Indexed Job whose completions equal its parallelism, which
// Kubernetes lets change together (removing the highest indexes when lowered), with
// allot.dev/max-member above its parallelism (and allot.dev/min-member its gang). nil for any other Job: its pods are what it
// runs.
func JobElastic(j *batchv1.Job) *v1alpha1.PodGroupElastic {
	m, err := strconv.ParseInt(j.Annotations[v1alpha1.AnnotationMaxMember], 10, 32)
	// Without allot.dev/min-member its gang would be its parallelism, and grow with it.
	if _, least := j.Annotations[v1alpha1.AnnotationMinMember]; err != nil || !least || j.Spec.CompletionMode == nil || *j.Spec.CompletionMode != batchv1.IndexedCompletion ||
		j.Spec.Parallelism == nil || j.Spec.Completions == nil || *j.Spec.Parallelism != *j.Spec.Completions {
		return nil
	}
	n := int64(*j.Spec.Parallelism)
	if n < 1 || m < n || m > MaxGang {
		return nil
	}
	return &v1alpha1.PodGroupElastic{Members: int32(n), MaxMembers: int32(m)}
}

// elasticOf is the growth of a workload of another project: a PyTorchJob's workers up to
// its elasticPolicy.maxReplicas. nil for the others.
func elasticOf(k kind, u *unstructured.Unstructured) *v1alpha1.PodGroupElastic {
	if k.kind != "PyTorchJob" {
		return nil
	}
	most, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "elasticPolicy", "maxReplicas")
	worker, _, _ := unstructured.NestedMap(u.Object, "spec", "pytorchReplicaSpecs", "Worker")
	if !ok || worker == nil {
		return nil
	}
	_, pods := replicaSpecsShape("pytorchReplicaSpecs")(u)
	workers := intOr(worker, 1, "replicas")
	m := intOr(map[string]any{"m": most}, 0, "m")
	if pods < 1 || workers < 1 || m <= 0 {
		return nil
	}
	return &v1alpha1.PodGroupElastic{Members: int32(pods), MaxMembers: int32(bounded(pods - workers + max(m, workers)))}
}

// sameElastic compares two growth specs, nil with nil.
func sameElastic(a, b *v1alpha1.PodGroupElastic) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
