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
	f.Add([]byte(`{"kind":"RayCluster","spec":{"workerGroupSpecs":[{"replicas":9e18,"numOfHosts":9e18,"minReplicas":-1}]}}`))
	f.Add([]byte(`{"kind":"LeaderWorkerSet","spec":{"leaderWorkerTemplate":{"size":-3}}}`))
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

// TestEcosystemShapes: the gang sizes of the other projects' workloads, as their
// controllers run them.
func TestEcosystemShapes(t *testing.T) {
	for _, c := range []struct {
		name, obj string
		ours      bool
		pods      int64
	}{
		{"LWS group", `{"kind":"LeaderWorkerSet","spec":{"replicas":2,"leaderWorkerTemplate":{"size":4,"workerTemplate":{"spec":{"schedulerName":"allot"}}}}}`, true, 4},
		{"LWS without size", `{"kind":"LeaderWorkerSet","spec":{"leaderWorkerTemplate":{"leaderTemplate":{"spec":{"schedulerName":"allot"}}}}}`, true, 1},
		{"LWS leader ready first", `{"kind":"LeaderWorkerSet","spec":{"startupPolicy":"LeaderReady","leaderWorkerTemplate":{"size":4,"workerTemplate":{"spec":{"schedulerName":"allot"}}}}}`, true, 1},
		{"LWS of another scheduler", `{"kind":"LeaderWorkerSet","spec":{"leaderWorkerTemplate":{"size":4}}}`, false, 0},
		{"LWS leader on another scheduler", `{"kind":"LeaderWorkerSet","spec":{"leaderWorkerTemplate":{"size":4,"leaderTemplate":{"spec":{}},"workerTemplate":{"spec":{"schedulerName":"allot"}}}}}`, true, 3},
		{"LWS leader on another scheduler, leader ready first", `{"kind":"LeaderWorkerSet","spec":{"startupPolicy":"LeaderReady","leaderWorkerTemplate":{"size":4,"leaderTemplate":{"spec":{}},"workerTemplate":{"spec":{"schedulerName":"allot"}}}}}`, true, 3},
		{"LWS workers on another scheduler", `{"kind":"LeaderWorkerSet","spec":{"leaderWorkerTemplate":{"size":4,"leaderTemplate":{"spec":{"schedulerName":"allot"}},"workerTemplate":{"spec":{}}}}}`, true, 1},
		{"RayCluster fixed", `{"kind":"RayCluster","spec":{"headGroupSpec":{"template":{"spec":{"schedulerName":"allot"}}},"workerGroupSpecs":[{"replicas":2,"minReplicas":0,"template":{"spec":{"schedulerName":"allot"}}},{"replicas":1,"numOfHosts":4,"template":{"spec":{"schedulerName":"allot"}}}]}}`, true, 7},
		{"RayCluster autoscaled", `{"kind":"RayCluster","spec":{"enableInTreeAutoscaling":true,"headGroupSpec":{"template":{"spec":{"schedulerName":"allot"}}},"workerGroupSpecs":[{"replicas":5,"minReplicas":1,"maxReplicas":8,"template":{"spec":{"schedulerName":"allot"}}}]}}`, true, 2},
		{"RayCluster replicas held to max", `{"kind":"RayCluster","spec":{"headGroupSpec":{"template":{"spec":{"schedulerName":"allot"}}},"workerGroupSpecs":[{"replicas":9,"maxReplicas":3,"template":{"spec":{"schedulerName":"allot"}}}]}}`, true, 4},
		{"RayCluster head on another scheduler", `{"kind":"RayCluster","spec":{"headGroupSpec":{"template":{"spec":{}}},"workerGroupSpecs":[{"replicas":2,"template":{"spec":{"schedulerName":"allot"}}}]}}`, true, 2},
		{"RayCluster with a worker group on another scheduler", `{"kind":"RayCluster","spec":{"headGroupSpec":{"template":{"spec":{"schedulerName":"allot"}}},"workerGroupSpecs":[{"replicas":2,"template":{"spec":{"schedulerName":"allot"}}},{"replicas":5,"template":{"spec":{}}}]}}`, true, 3},
		{"RayCluster group suspended", `{"kind":"RayCluster","spec":{"headGroupSpec":{"template":{"spec":{"schedulerName":"allot"}}},"workerGroupSpecs":[{"replicas":2,"suspend":true,"template":{"spec":{"schedulerName":"allot"}}}]}}`, true, 1},
	} {
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.obj), &obj); err != nil {
			t.Fatal(err)
		}
		pods, ours, ok := Gang(&unstructured.Unstructured{Object: obj})
		if !ok || ours != c.ours || pods != c.pods {
			t.Errorf("%s: %d pods, ours %v (known %v); want %d, %v", c.name, pods, ours, ok, c.pods, c.ours)
		}
	}
	js := `{"kind":"JobSet","spec":{"replicatedJobs":[
		{"name":"dataset-initializer","replicas":1,"template":{"spec":{"template":{"spec":{"schedulerName":"allot"}}}}},
		{"name":"prepare","replicas":1,"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"model-initializer"}},"spec":{"template":{"spec":{"schedulerName":"allot"}}}}},
		{"name":"node","replicas":1,"template":{"spec":{"parallelism":2,"completions":2,"template":{"spec":{"schedulerName":"allot"}}}}}]}}`
	var obj map[string]any
	if err := json.Unmarshal([]byte(js), &obj); err != nil {
		t.Fatal(err)
	}
	if ours, pods := TrainerShape(&unstructured.Unstructured{Object: obj}); !ours || pods != 2 {
		t.Errorf("TrainJob's JobSet: %d pods, ours %v; want the 2 nodes", pods, ours)
	}
}
