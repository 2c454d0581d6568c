package workload

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A PyTorchJob's gang: all its replicas, or with an elasticPolicy its master and the
// minimum of workers, the workers beyond elastic; a minimum outside 1 to the workers asked
// is held to it.
func TestPyTorchJobElasticGang(t *testing.T) {
	job := func(elastic map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Master": map[string]any{"replicas": int64(1), "template": map[string]any{"spec": map[string]any{"schedulerName": "allot"}}},
			"Worker": map[string]any{"replicas": int64(4), "template": map[string]any{"spec": map[string]any{"schedulerName": "allot"}}}}}
		if elastic != nil {
			spec["elasticPolicy"] = elastic
		}
		return &unstructured.Unstructured{Object: map[string]any{"kind": "PyTorchJob", "spec": spec}}
	}
	for _, c := range []struct {
		name    string
		elastic map[string]any
		want    int64
	}{
		{"rigid", nil, 5},
		{"elastic from 2 workers", map[string]any{"minReplicas": int64(2), "maxReplicas": int64(4)}, 3},
		{"a policy without a minimum", map[string]any{"maxReplicas": int64(8)}, 5},
		{"a minimum above the workers asked", map[string]any{"minReplicas": int64(9)}, 5},
		{"a minimum of 0", map[string]any{"minReplicas": int64(0)}, 2},
	} {
		pods, ours, ok := Gang(job(c.elastic))
		if !ok || !ours || pods != c.want {
			t.Errorf("%s: gang of %d (ours %v, known %v), want %d", c.name, pods, ours, ok, c.want)
		}
	}
}

// How far the scheduler may grow a workload: an elastic indexed Job (completions equal to
// parallelism, both bounds named) and a PyTorchJob's workers up to elasticPolicy.maxReplicas
// (its other replicas counted in); anything else is not grown.
func TestElasticRange(t *testing.T) {
	indexed, nonIndexed := batchv1.IndexedCompletion, batchv1.NonIndexedCompletion
	job := func(mode *batchv1.CompletionMode, parallelism, completions int32, ann map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Annotations: ann},
			Spec: batchv1.JobSpec{CompletionMode: mode, Parallelism: &parallelism, Completions: &completions}}
	}
	bounds := map[string]string{v1alpha1.AnnotationMinMember: "1", v1alpha1.AnnotationMaxMember: "4"}
	for _, c := range []struct {
		name string
		job  *batchv1.Job
		want *v1alpha1.PodGroupElastic
	}{
		{"allot submit --workers 1:4", job(&indexed, 1, 1, bounds), &v1alpha1.PodGroupElastic{Members: 1, MaxMembers: 4}},
		{"grown to 3", job(&indexed, 3, 3, bounds), &v1alpha1.PodGroupElastic{Members: 3, MaxMembers: 4}},
		{"completions apart from parallelism", job(&indexed, 1, 4, bounds), nil},
		{"not indexed", job(&nonIndexed, 1, 1, bounds), nil},
		{"no minimum", job(&indexed, 1, 1, map[string]string{v1alpha1.AnnotationMaxMember: "4"}), nil},
		{"a maximum below its count", job(&indexed, 3, 3, map[string]string{v1alpha1.AnnotationMinMember: "1", v1alpha1.AnnotationMaxMember: "2"}), nil},
		{"a maximum that is no number", job(&indexed, 1, 1, map[string]string{v1alpha1.AnnotationMinMember: "1", v1alpha1.AnnotationMaxMember: "many"}), nil},
	} {
		if got := JobElastic(c.job); !sameElastic(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	pytorch := func(workers int64, elastic map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Master": map[string]any{"replicas": int64(1)}, "Worker": map[string]any{"replicas": workers}}}
		if elastic != nil {
			spec["elasticPolicy"] = elastic
		}
		return &unstructured.Unstructured{Object: map[string]any{"kind": "PyTorchJob", "spec": spec}}
	}
	k := kind{kind: "PyTorchJob"}
	if got := elasticOf(k, pytorch(1, map[string]any{"minReplicas": int64(1), "maxReplicas": int64(4)})); !sameElastic(got, &v1alpha1.PodGroupElastic{Members: 2, MaxMembers: 5}) {
		t.Errorf("a PyTorchJob of a master and 1 of up to 4 workers: %+v, want 2 of up to 5 pods", got)
	}
	if got := elasticOf(k, pytorch(2, map[string]any{"minReplicas": int64(1)})); got != nil {
		t.Errorf("a PyTorchJob without maxReplicas: %+v, want none", got)
	}
	if got := elasticOf(kind{kind: "MPIJob"}, pytorch(1, map[string]any{"maxReplicas": int64(4)})); got != nil {
		t.Errorf("an MPIJob: %+v, want none", got)
	}
}
