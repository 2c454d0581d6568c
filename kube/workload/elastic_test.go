package workload

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
