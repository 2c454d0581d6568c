package workload

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FuzzGang: a workload object as the API server hands it over, whatever its spec holds
// (objects the schema of a CRD does not check, numbers out of range), gives a gang size
// between 0 and the pods it can have, and never panics the controller.
func FuzzGang(f *testing.F) {
	f.Add([]byte(`{"kind":"Job","metadata":{"annotations":{"allot.dev/min-member":"2"}},"spec":{"parallelism":4,"completions":4,"template":{"spec":{"schedulerName":"allot"}}}}`))
	f.Add([]byte(`{"kind":"JobSet","spec":{"replicatedJobs":[{"replicas":2,"template":{"spec":{"parallelism":4,"template":{"spec":{"schedulerName":"allot"}}}}}]}}`))
	f.Add([]byte(`{"kind":"PyTorchJob","spec":{"pytorchReplicaSpecs":{"Master":{"replicas":1},"Worker":{"replicas":3}}}}`))
	f.Add([]byte(`{"kind":"MPIJob","spec":{"mpiReplicaSpecs":{"Worker":{"replicas":-5},"Launcher":{"replicas":9e18}}}}`))
	f.Add([]byte(`{"kind":"JobSet","spec":{"replicatedJobs":[{"replicas":4294967296,"template":{"spec":{"parallelism":4294967296}}}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			return
		}
		u := &unstructured.Unstructured{Object: obj}
		pods, _, ok := Gang(u)
		if ok && (pods < 0 || pods > MaxGang) {
			t.Fatalf("gang of %d pods from %s", pods, data)
		}
	})
}
