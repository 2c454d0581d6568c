package stack_test

// The objects of LeaderWorkerSet, KubeRay, Kubeflow Trainer v2, Knative Serving and KServe
// as their controllers make them (names, owner references, labels), for tests that run
// without those controllers: each builder here stands for one step of a controller, and the
// Kubernetes controllers of the embedded cluster (StatefulSet, Job, Deployment, ReplicaSet)
// do the rest. Kept apart from the tests so that a test running the real controllers can
// check its objects against the same shapes.

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/workload"
)

// Labels the projects' controllers put on what they make.
const (
	lwsName        = "leaderworkerset.sigs.k8s.io/name"
	lwsGroupIndex  = "leaderworkerset.sigs.k8s.io/group-index"
	lwsGroupKey    = "leaderworkerset.sigs.k8s.io/group-key"
	lwsWorkerIndex = "leaderworkerset.sigs.k8s.io/worker-index"
	lwsSize        = "leaderworkerset.sigs.k8s.io/size"
	lwsLeaderName  = "leaderworkerset.sigs.k8s.io/leader-name"
	rayCluster     = "ray.io/cluster"
	rayNodeType    = "ray.io/node-type"
	rayGroup       = "ray.io/group"
	jobSetName     = "jobset.sigs.k8s.io/jobset-name"
	trainerStep    = "trainer.kubeflow.org/trainjob-ancestor-step"
	knativeService = "serving.knative.dev/service"
	knativeConfig  = "serving.knative.dev/configuration"
	knativeRev     = "serving.knative.dev/revision"
	kserveISVC     = "serving.kserve.io/inferenceservice"
)

// ecosystemKinds are the kinds the tests serve with open schemas (structural, unknown
// fields kept), as stand-ins for the projects' CRDs.
var ecosystemKinds = []struct {
	gvr  schema.GroupVersionResource
	kind string
}{
	{workload.LeaderWorkerSets, "LeaderWorkerSet"},
	{workload.RayClusters, "RayCluster"},
	{workload.RayJobs, "RayJob"},
	{workload.RayServices, "RayService"},
	{workload.JobSets, "JobSet"},
	{workload.TrainJobs, "TrainJob"},
	{knServices, "Service"},
	{knConfigurations, "Configuration"},
	{knRevisions, "Revision"},
	{inferenceServices, "InferenceService"},
}

var (
	knServices        = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	knConfigurations  = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "configurations"}
	knRevisions       = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "revisions"}
	inferenceServices = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1beta1", Resource: "inferenceservices"}
)

// installEcosystem serves the projects' kinds and starts a workload controller that sees
// them (the stack's own looked for CRDs before they were there).
func installEcosystem(t *testing.T, e *kubetest.Env) {
	t.Helper()
	for _, k := range ecosystemKinds {
		installCRD(t, e, k.gvr.Group, k.gvr.Version, k.kind, k.gvr.Resource)
	}
	go workload.New(e.Client, e.Dyn, e.Allot).Run(e.Ctx)
}

// create makes an object of one of the projects' kinds and returns it as stored.
func create(t *testing.T, e *kubetest.Env, gvr schema.GroupVersionResource, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	if u.GetNamespace() == "" {
		u.SetNamespace("default")
	}
	out, err := e.Dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(e.Ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

func object(gvr schema.GroupVersionResource, kind, name string, labels map[string]string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "spec": spec}}
	u.SetName(name)
	u.SetNamespace("default")
	u.SetLabels(labels)
	return u
}

// controlledBy is the owner reference a controller puts on what it makes.
func controlledBy(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func ownedBy(u *unstructured.Unstructured) metav1.OwnerReference {
	return controlledBy(u.GetAPIVersion(), u.GetKind(), u.GetName(), u.GetUID())
}

// mustUnstructured is a typed object as the JSON the API server stores.
func mustUnstructured(o any) map[string]any {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		panic(err)
	}
	return m
}

func fromUnstructured(m map[string]any, into any) {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, into); err != nil {
		panic(err)
	}
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// gpuPodSpec is one container asking for gpus whole GPUs, scheduled by Allot.
func gpuPodSpec(gpus int64) corev1.PodSpec {
	return kubetest.PodSpec{GPUs: gpus}.Pod().Spec
}

func podTemplate(gpus int64, labels map[string]string) map[string]any {
	spec := gpuPodSpec(gpus)
	return map[string]any{"metadata": map[string]any{"labels": toAny(labels)}, "spec": mustUnstructured(&spec)}
}

// --- LeaderWorkerSet (sigs.k8s.io/lws) ---

// leaderWorkerSet is an LWS of replicas groups of size pods, each asking gpus GPUs.
func leaderWorkerSet(name string, labels map[string]string, replicas, size, gpus int64) *unstructured.Unstructured {
	return object(workload.LeaderWorkerSets, "LeaderWorkerSet", name, labels, map[string]any{
		"replicas":      replicas,
		"startupPolicy": "LeaderCreated",
		"leaderWorkerTemplate": map[string]any{"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
			"workerTemplate": podTemplate(gpus, nil)},
	})
}

// lwsLeaderStatefulSet is the StatefulSet the LWS controller makes for the leaders: named
// after the LWS, owned by it, one leader pod per group.
func lwsLeaderStatefulSet(lws *unstructured.Unstructured, gpus int64) *appsv1.StatefulSet {
	replicas, _, _ := unstructured.NestedInt64(lws.Object, "spec", "replicas")
	size, _, _ := unstructured.NestedInt64(lws.Object, "spec", "leaderWorkerTemplate", "size")
	sel := map[string]string{lwsName: lws.GetName(), lwsWorkerIndex: "0"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: lws.GetName(), Namespace: lws.GetNamespace(), Labels: sel,
			OwnerReferences: []metav1.OwnerReference{ownedBy(lws)}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(replicas)), ServiceName: lws.GetName(),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel,
				Annotations: map[string]string{lwsSize: fmt.Sprint(size)}}, Spec: gpuPodSpec(gpus)}},
	}
}

// lwsWorkerStatefulSet is the StatefulSet the LWS controller makes for one group's workers
// once its leader pod exists: named after the leader pod, owned by it, ordinals from 1.
func lwsWorkerStatefulSet(lws *unstructured.Unstructured, leader *corev1.Pod, group int, gpus int64) *appsv1.StatefulSet {
	size, _, _ := unstructured.NestedInt64(lws.Object, "spec", "leaderWorkerTemplate", "size")
	sel := map[string]string{lwsName: lws.GetName(), lwsGroupIndex: fmt.Sprint(group), lwsGroupKey: fmt.Sprintf("key-%s-%d", lws.GetName(), group)}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: leader.Name, Namespace: leader.Namespace, Labels: sel,
			OwnerReferences: []metav1.OwnerReference{controlledBy("v1", "Pod", leader.Name, leader.UID)}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(size - 1)), ServiceName: lws.GetName(),
			PodManagementPolicy: appsv1.ParallelPodManagement, Ordinals: &appsv1.StatefulSetOrdinals{Start: 1},
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel,
				Annotations: map[string]string{lwsSize: fmt.Sprint(size), lwsLeaderName: leader.Name}}, Spec: gpuPodSpec(gpus)}},
	}
}

// --- KubeRay (ray.io/v1) ---

// rayClusterSpec is a head of headGPUs and one worker group "gpu" of workers pods of one GPU.
func rayClusterSpec(headGPUs, workers int64) map[string]any {
	return map[string]any{
		"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": podTemplate(headGPUs, nil)},
		"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": workers, "minReplicas": workers,
			"maxReplicas": workers + 2, "numOfHosts": int64(1), "rayStartParams": map[string]any{}, "template": podTemplate(1, nil)}},
	}
}

// rayPod is a pod KubeRay makes for a RayCluster: owned by it, labelled with the cluster,
// its node type (head or worker) and group.
func rayPod(cluster *unstructured.Unstructured, name, nodeType, group string, gpus int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster.GetNamespace(),
		Labels: map[string]string{rayCluster: cluster.GetName(), rayNodeType: nodeType, rayGroup: group,
			"ray.io/is-ray-node": "yes", "app.kubernetes.io/created-by": "kuberay-operator"},
		OwnerReferences: []metav1.OwnerReference{ownedBy(cluster)}}, Spec: gpuPodSpec(gpus)}
}

// --- Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1) ---

// trainJob is a TrainJob of numNodes nodes on a torch runtime that also initializes a dataset.
func trainJob(name string, labels map[string]string, numNodes int64) *unstructured.Unstructured {
	return object(workload.TrainJobs, "TrainJob", name, labels, map[string]any{
		"runtimeRef":  map[string]any{"name": "torch-distributed", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
		"trainer":     map[string]any{"numNodes": numNodes},
		"initializer": map[string]any{"dataset": map[string]any{"storageUri": "hf://tatsu-lab/alpaca"}},
	})
}

// trainerReplicatedJob is one replicated job of the JobSet Trainer makes from its runtime.
func trainerReplicatedJob(name, step string, parallelism, gpus int64) map[string]any {
	spec := gpuPodSpec(gpus)
	spec.RestartPolicy = corev1.RestartPolicyNever
	return map[string]any{"name": name, "replicas": int64(1),
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{trainerStep: step}},
			"spec": map[string]any{"parallelism": parallelism, "completions": parallelism,
				"template": map[string]any{"spec": mustUnstructured(&spec)}}}}
}

// trainJobSet is the JobSet Trainer makes for a TrainJob: its name, owned by it, a
// dataset-initializer job and the node job of numNodes pods that depends on it.
func trainJobSet(tj *unstructured.Unstructured, numNodes, gpus int64) *unstructured.Unstructured {
	node := trainerReplicatedJob("node", "trainer", numNodes, gpus)
	node["dependsOn"] = []any{map[string]any{"name": "dataset-initializer", "status": "Complete"}}
	js := object(workload.JobSets, "JobSet", tj.GetName(), nil, map[string]any{"replicatedJobs": []any{
		trainerReplicatedJob("dataset-initializer", "dataset-initializer", 1, 0), node}})
	js.SetOwnerReferences([]metav1.OwnerReference{ownedBy(tj)})
	return js
}

// jobSetJob is the Job the JobSet controller makes for replica 0 of a replicated job:
// <jobset>-<replicated job>-0, owned by the JobSet, labelled with both names.
func jobSetJob(js *unstructured.Unstructured, rjob string) *batchv1.Job {
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	for _, o := range rjs {
		rj := o.(map[string]any)
		if rj["name"] != rjob {
			continue
		}
		var spec batchv1.JobSpec
		fromUnstructured(rj["template"].(map[string]any)["spec"].(map[string]any), &spec)
		labels := map[string]string{jobSetName: js.GetName(), workload.LabelReplicatedJob: rjob, "jobset.sigs.k8s.io/job-index": "0"}
		spec.Template.Labels = labels
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: js.GetName() + "-" + rjob + "-0", Namespace: js.GetNamespace(),
			Labels: labels, OwnerReferences: []metav1.OwnerReference{ownedBy(js)}}, Spec: spec}
	}
	panic("no replicated job " + rjob)
}

// --- Knative Serving and KServe ---

// knativeChain makes what Knative makes for a Service (top: the Knative Service, or set
// under an InferenceService by KServe's serverless mode): its Configuration, the first
// Revision, and the Revision's Deployment of replicas pods asking gpus each, labelled as
// Knative labels them. The Deployment is real: the embedded cluster makes its pods.
func knativeChain(t *testing.T, e *kubetest.Env, name string, labels map[string]string, owner *unstructured.Unstructured, replicas int32, gpus int64) *appsv1.Deployment {
	t.Helper()
	ksvc := object(knServices, "Service", name, labels, map[string]any{"template": podTemplate(gpus, nil)})
	if owner != nil {
		ksvc.SetOwnerReferences([]metav1.OwnerReference{ownedBy(owner)})
	}
	ksvc = create(t, e, knServices, ksvc)
	conf := object(knConfigurations, "Configuration", name, map[string]string{knativeService: name}, map[string]any{"template": podTemplate(gpus, nil)})
	conf.SetOwnerReferences([]metav1.OwnerReference{ownedBy(ksvc)})
	conf = create(t, e, knConfigurations, conf)
	rev := object(knRevisions, "Revision", name+"-00001", map[string]string{knativeService: name, knativeConfig: name}, map[string]any{})
	rev.SetOwnerReferences([]metav1.OwnerReference{ownedBy(conf)})
	rev = create(t, e, knRevisions, rev)
	podLabels := map[string]string{knativeService: name, knativeConfig: name, knativeRev: rev.GetName()}
	if owner != nil {
		podLabels[kserveISVC] = owner.GetName()
	}
	return deployment(rev.GetName()+"-deployment", rev, podLabels, replicas, gpus)
}

// deployment is a Deployment owned by owner (a Knative Revision, or an InferenceService in
// KServe's raw deployment mode) whose pods carry labels.
func deployment(name string, owner *unstructured.Unstructured, labels map[string]string, replicas int32, gpus int64) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: owner.GetNamespace(), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownedBy(owner)}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: gpuPodSpec(gpus)}},
	}
}

// inferenceService is a KServe InferenceService with a predictor of one GPU.
func inferenceService(name string, labels map[string]string) *unstructured.Unstructured {
	return object(inferenceServices, "InferenceService", name, labels, map[string]any{
		"predictor": map[string]any{"schedulerName": v1alpha1.SchedulerName,
			"model": map[string]any{"modelFormat": map[string]any{"name": "huggingface"},
				"resources": map[string]any{"limits": map[string]any{v1alpha1.GPUResource: "1"}}}}})
}
