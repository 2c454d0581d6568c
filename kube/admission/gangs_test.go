package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/workload"
)

func obj(apiVersion, kind, name string, spec map[string]any, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "spec": spec}}
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

func own(u *unstructured.Unstructured) Owner {
	return Owner{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), Object: u}
}

// TestGangOfEcosystemPods: each project's pods, with the owners their controllers give
// them, join the gang the workload controller makes for them, with its size and the class
// their kind serves.
func TestGangOfEcosystemPods(t *testing.T) {
	allot := map[string]any{"spec": map[string]any{"schedulerName": v1alpha1.SchedulerName}}
	lws := obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llm", map[string]any{"replicas": int64(2),
		"leaderWorkerTemplate": map[string]any{"size": int64(4), "workerTemplate": allot}}, nil)
	leaderSts := obj("apps/v1", "StatefulSet", "llm", nil, nil)
	leaderPod := obj("v1", "Pod", "llm-1", nil, nil)
	workerSts := obj("apps/v1", "StatefulSet", "llm-1", nil, nil)

	ray := obj("ray.io/v1", "RayCluster", "rc", map[string]any{"headGroupSpec": map[string]any{"template": allot},
		"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": int64(2), "minReplicas": int64(1), "template": allot}}}, nil)
	rayJob := obj("ray.io/v1", "RayJob", "rj", nil, nil)
	rayService := obj("ray.io/v1", "RayService", "rs", nil, nil)

	rjob := func(name string, par int64) map[string]any {
		return map[string]any{"name": name, "replicas": int64(1), "template": map[string]any{"spec": map[string]any{"parallelism": par, "template": allot}}}
	}
	jobSet := obj("jobset.x-k8s.io/v1alpha2", "JobSet", "tj", map[string]any{"replicatedJobs": []any{
		rjob("dataset-initializer", 1), rjob("model-initializer", 1), rjob("node", 2)}}, nil)
	trainJob := obj("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", nil, nil)
	nodeJob := obj("batch/v1", "Job", "tj-node-0", nil, map[string]string{workload.LabelReplicatedJob: "node"})
	initJob := obj("batch/v1", "Job", "tj-dataset-initializer-0", nil, map[string]string{workload.LabelReplicatedJob: "dataset-initializer"})

	rs := obj("apps/v1", "ReplicaSet", "hello-00001-deployment-abc", nil, nil)
	dep := obj("apps/v1", "Deployment", "hello-00001-deployment", nil, nil)
	rev := obj("serving.knative.dev/v1", "Revision", "hello-00001", nil, nil)
	conf := obj("serving.knative.dev/v1", "Configuration", "hello", nil, nil)
	ksvc := obj("serving.knative.dev/v1", "Service", "hello", nil, nil)
	isvc := obj("serving.kserve.io/v1beta1", "InferenceService", "hello", nil, nil)

	for _, c := range []struct {
		name  string
		pod   string
		chain []*unstructured.Unstructured
		want  gang
	}{
		{"LWS leader", "llm-1", []*unstructured.Unstructured{leaderSts, lws}, gang{v1alpha1.ClassInference, "llm-1", 4}},
		{"LWS worker", "llm-1-3", []*unstructured.Unstructured{workerSts, leaderPod, leaderSts, lws}, gang{v1alpha1.ClassInference, "llm-1", 4}},
		{"bare RayCluster", "rc-head", []*unstructured.Unstructured{ray}, gang{v1alpha1.ClassInteractive, "rc", 3}},
		{"RayJob's cluster", "rc-worker", []*unstructured.Unstructured{ray, rayJob}, gang{v1alpha1.ClassTrain, "rc", 3}},
		{"RayService's cluster", "rc-worker", []*unstructured.Unstructured{ray, rayService}, gang{v1alpha1.ClassInference, "rc", 3}},
		{"TrainJob node", "tj-node-0-1", []*unstructured.Unstructured{nodeJob, jobSet, trainJob}, gang{v1alpha1.ClassTrain, "tj", 2}},
		{"TrainJob initializer", "tj-dataset-initializer-0-0", []*unstructured.Unstructured{initJob, jobSet, trainJob}, gang{v1alpha1.ClassTrain, "", 0}},
		{"Knative", "hello-00001-deployment-abc-x", []*unstructured.Unstructured{rs, dep, rev, conf, ksvc}, gang{v1alpha1.ClassInference, "", 0}},
		{"KServe serverless", "hello-00001-deployment-abc-x", []*unstructured.Unstructured{rs, dep, rev, conf, ksvc, isvc}, gang{v1alpha1.ClassInference, "", 0}},
		{"KServe raw", "hello-predictor-abc-x", []*unstructured.Unstructured{rs, dep, isvc}, gang{v1alpha1.ClassInference, "", 0}},
	} {
		w := Workload{}
		for _, o := range c.chain {
			w.Chain = append(w.Chain, own(o))
		}
		top := c.chain[len(c.chain)-1]
		w.Kind, w.Name, w.APIVersion, w.Object = top.GetKind(), top.GetName(), top.GetAPIVersion(), top
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.pod}}
		if got := gangOf(p, w); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
