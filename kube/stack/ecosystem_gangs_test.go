package stack_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/workload"
)

// podGroup waits for a PodGroup of that minMember and queue, and returns it.
func podGroup(t *testing.T, e *kubetest.Env, name string, min int64, queue string) *unstructured.Unstructured {
	t.Helper()
	var pg *unstructured.Unstructured
	e.WaitFor(t, "PodGroup "+name, func() (bool, string) {
		var err error
		pg, err = e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		m, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember")
		q, _, _ := unstructured.NestedString(pg.Object, "spec", "queue")
		return m == min && q == queue, fmt.Sprintf("minMember %d queue %q", m, q)
	})
	return pg
}

// labelled waits until want pods that match carry the labels and annotations given (""
// for a label that must be absent), and returns them.
func labelled(t *testing.T, e *kubetest.Env, what string, want int, match func(*corev1.Pod) bool, labels, annotations map[string]string) []*corev1.Pod {
	t.Helper()
	var got []*corev1.Pod
	e.WaitFor(t, what, func() (bool, string) {
		got = got[:0]
		var wrong []string
		for _, p := range e.Pods(t, "default") {
			if !match(p) {
				continue
			}
			ok := true
			for k, v := range labels {
				if cur, set := p.Labels[k]; cur != v || (v == "") == set {
					ok = false
				}
			}
			for k, v := range annotations {
				if p.Annotations[k] != v {
					ok = false
				}
			}
			if ok {
				got = append(got, p)
			} else {
				wrong = append(wrong, fmt.Sprintf("%s %v %v", p.Name, p.Labels, p.Annotations))
			}
		}
		return len(got) == want, fmt.Sprintf("%d of %d; not as wanted: %s", len(got), want, strings.Join(wrong, "; "))
	})
	return got
}

// TestLWSGroupsAreGangs: a LeaderWorkerSet of two groups of four pods (a leader and three
// workers, the workers' StatefulSet owned by the leader pod) gets one PodGroup of four per
// group, and its pods the group's gang, class inference and the LWS's queue. With six GPUs
// one group runs whole and the other waits whole: no group holds GPUs it cannot use.
func TestLWSGroupsAreGangs(t *testing.T) {
	e := start(t, 1, 6)
	e.Queue(t, "team-a", 8, nil)
	installEcosystem(t, e)
	lws := create(t, e, workload.LeaderWorkerSets, leaderWorkerSet("llm", map[string]string{v1alpha1.LabelQueue: "team-a"}, 2, 4, 1))
	if _, err := e.Client.AppsV1().StatefulSets("default").Create(e.Ctx, lwsLeaderStatefulSet(lws, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The LWS controller makes a group's workers once its leader pod exists.
	for g := range 2 {
		var leader *corev1.Pod
		e.WaitFor(t, "leader pod", func() (bool, string) {
			leader = e.Pods(t, "default")[fmt.Sprintf("llm-%d", g)]
			return leader != nil, ""
		})
		if _, err := e.Client.AppsV1().StatefulSets("default").Create(e.Ctx, lwsWorkerStatefulSet(lws, leader, g, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for g := range 2 {
		name := fmt.Sprintf("llm-%d", g)
		podGroup(t, e, name, 4, "team-a")
		labelled(t, e, "group "+name+"'s pods", 4, func(p *corev1.Pod) bool { return p.Name == name || strings.HasPrefix(p.Name, name+"-") },
			map[string]string{v1alpha1.LabelPodGroup: name, v1alpha1.LabelClass: v1alpha1.ClassInference, v1alpha1.LabelQueue: "team-a", v1alpha1.LabelPreemptible: ""},
			map[string]string{v1alpha1.AnnotationMinMember: "4"})
	}
	var whole string
	e.WaitFor(t, "one group running whole", func() (bool, string) {
		byGroup := map[string]int{}
		for _, p := range e.Pods(t, "default") {
			if kubetest.Running(p) {
				byGroup[p.Labels[v1alpha1.LabelPodGroup]]++
			}
		}
		for g, n := range byGroup {
			if n == 4 {
				whole = g
			}
		}
		return whole != "", fmt.Sprint(byGroup)
	})
	time.Sleep(2 * time.Second) // several cycles with two GPUs free
	var partly []string
	for _, p := range e.Pods(t, "default") {
		if p.Labels[v1alpha1.LabelPodGroup] != whole && kubetest.Bound(p) {
			partly = append(partly, p.Name+" on "+p.Spec.NodeName)
		}
	}
	if len(partly) > 0 {
		sort.Strings(partly)
		t.Fatalf("group %s runs; the other group's pods bound with only two GPUs free: %s", whole, strings.Join(partly, ", "))
	}

	// Scaled to one group: the LWS controller scales the leaders' StatefulSet, the second
	// leader pod goes and its workers with it (their StatefulSet is the pod's), and the
	// LWS's status follows. The second group's PodGroup goes once its pods are gone.
	patch := func(what string, do func() error) {
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	patch("scale the LWS", func() error {
		_, err := e.Dyn.Resource(workload.LeaderWorkerSets).Namespace("default").Patch(e.Ctx, "llm", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
		return err
	})
	patch("scale the leaders", func() error {
		_, err := e.Client.AppsV1().StatefulSets("default").Patch(e.Ctx, "llm", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
		return err
	})
	e.WaitFor(t, "group llm-1's pods gone", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelPodGroup] == "llm-1" })
		return n == 0, fmt.Sprintf("%d left", n)
	})
	patch("the LWS's status", func() error {
		_, err := e.Dyn.Resource(workload.LeaderWorkerSets).Namespace("default").Patch(e.Ctx, "llm", types.MergePatchType, []byte(`{"status":{"replicas":1}}`), metav1.PatchOptions{})
		return err
	})
	e.WaitFor(t, "PodGroup llm-1 gone", func() (bool, string) {
		_, err := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Get(e.Ctx, "llm-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	podGroup(t, e, "llm-0", 4, "team-a")
}

// TestRayClusterIsOneGang: a RayCluster's head and two workers (pods KubeRay owns by the
// cluster) are one gang of three that waits whole while two GPUs are free and starts once
// three are; a RayJob's cluster takes the RayJob's queue and class.
func TestRayClusterIsOneGang(t *testing.T) {
	e := start(t, 1, 3)
	e.Queue(t, "team-a", 3, nil)
	e.Queue(t, "team-b", 1, nil)
	installEcosystem(t, e)
	e.MustPod(t, kubetest.PodSpec{Name: "busy", Queue: "team-a", GPUs: 1, Labels: map[string]string{v1alpha1.LabelPreemptible: "false"}})
	e.WaitFor(t, "busy running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["busy"]), "" })

	rc := create(t, e, workload.RayClusters, object(workload.RayClusters, "RayCluster", "rc", map[string]string{v1alpha1.LabelQueue: "team-a"}, rayClusterSpec(1, 2)))
	for _, p := range []*corev1.Pod{rayPod(rc, "rc-head-x7k2p", "head", "headgroup", 1),
		rayPod(rc, "rc-gpu-worker-a", "worker", "gpu", 1), rayPod(rc, "rc-gpu-worker-b", "worker", "gpu", 1)} {
		if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podGroup(t, e, "rc", 3, "team-a")
	inCluster := func(p *corev1.Pod) bool { return p.Labels[rayCluster] == "rc" }
	labelled(t, e, "the cluster's pods", 3, inCluster,
		map[string]string{v1alpha1.LabelPodGroup: "rc", v1alpha1.LabelClass: v1alpha1.ClassInteractive, v1alpha1.LabelQueue: "team-a"},
		map[string]string{v1alpha1.AnnotationMinMember: "3"})
	time.Sleep(2 * time.Second) // several cycles with two GPUs free
	if n := e.Count(t, "default", func(p *corev1.Pod) bool { return inCluster(p) && kubetest.Bound(p) }); n != 0 {
		t.Fatalf("%d of the RayCluster's 3 pods bound with 2 GPUs free: a gang starts whole or not at all", n)
	}
	if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, "busy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the whole cluster running", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return inCluster(p) && kubetest.Running(p) })
		return n == 3, fmt.Sprintf("%d running", n)
	})

	// A RayJob's cluster says no queue: the RayJob's is the gang's and its pods'.
	rj := create(t, e, workload.RayJobs, object(workload.RayJobs, "RayJob", "rj", map[string]string{v1alpha1.LabelQueue: "team-b"},
		map[string]any{"entrypoint": "python train.py", "rayClusterSpec": rayClusterSpec(0, 0)}))
	cluster := object(workload.RayClusters, "RayCluster", "rj-raycluster-m2x8q", map[string]string{"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj"}, rayClusterSpec(0, 0))
	cluster.SetOwnerReferences([]metav1.OwnerReference{ownedBy(rj)})
	cluster = create(t, e, workload.RayClusters, cluster)
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, rayPod(cluster, "rj-raycluster-m2x8q-head-q9z", "head", "headgroup", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podGroup(t, e, cluster.GetName(), 1, "team-b")
	labelled(t, e, "the RayJob's head", 1, func(p *corev1.Pod) bool { return p.Labels[rayCluster] == cluster.GetName() },
		map[string]string{v1alpha1.LabelPodGroup: cluster.GetName(), v1alpha1.LabelClass: v1alpha1.ClassTrain, v1alpha1.LabelQueue: "team-b"}, nil)

	// allot list shows the bare cluster and, through its cluster, the RayJob.
	ws, err := inspect.Workloads(e.Ctx, e.Client, "default", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		if strings.HasPrefix(w.Kind, "Ray") { // not the busy pod, which may still be leaving
			got = append(got, fmt.Sprintf("%s %s %d pods %s", w.Ref(), w.Queue, len(w.Pods), w.Type))
		}
	}
	want := []string{"RayCluster/rc team-a 3 pods interactive", "RayJob/rj team-b 1 pods distributed"}
	if !slices.Equal(got, want) {
		t.Fatalf("allot list: %q, want %q", got, want)
	}
}

// TestTrainJobNodesAreOneGang: a TrainJob of two nodes whose runtime first initializes a
// dataset: its JobSet's node pods are one gang of two, named after the TrainJob; the
// initializer's pod is in no gang (it ends before the nodes start), and the JobSet is not
// grouped a second time with all three pods.
func TestTrainJobNodesAreOneGang(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 4, nil)
	installEcosystem(t, e)
	tj := create(t, e, workload.TrainJobs, trainJob("tune", map[string]string{v1alpha1.LabelQueue: "team-a"}, 2))
	js := create(t, e, workload.JobSets, trainJobSet(tj, 2, 1))
	for _, rj := range []string{"dataset-initializer", "node"} {
		if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, jobSetJob(js, rj), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pg := podGroup(t, e, "tune", 2, "team-a")
	if ref := metav1.GetControllerOfNoCopy(pg); ref == nil || ref.Kind != "TrainJob" || ref.UID != tj.GetUID() {
		t.Fatalf("PodGroup tune controlled by %+v, want the TrainJob", ref)
	}
	of := func(rj string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool { return p.Labels["jobset.sigs.k8s.io/replicatedjob-name"] == rj }
	}
	labelled(t, e, "the node pods", 2, of("node"),
		map[string]string{v1alpha1.LabelPodGroup: "tune", v1alpha1.LabelClass: v1alpha1.ClassTrain, v1alpha1.LabelQueue: "team-a"},
		map[string]string{v1alpha1.AnnotationMinMember: "2"})
	labelled(t, e, "the initializer's pod", 1, of("dataset-initializer"),
		map[string]string{v1alpha1.LabelPodGroup: "", v1alpha1.LabelClass: v1alpha1.ClassTrain, v1alpha1.LabelQueue: "team-a"},
		map[string]string{v1alpha1.AnnotationMinMember: ""})
	e.WaitFor(t, "nodes and initializer running", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return p.Labels[jobSetName] == "tune" && kubetest.Running(p) })
		return n == 3, fmt.Sprintf("%d running", n)
	})
	// Still one gang of two: nothing grouped the JobSet as a whole meanwhile.
	podGroup(t, e, "tune", 2, "team-a")
}

// TestKnativeAndKServePodsServeInference: the pods of a Knative Service, of a KServe
// InferenceService in raw deployment mode and of one in serverless mode (through a Knative
// Service) are inference: queue from the top owner's labels, not preemptible unless the
// owner says so, and held within the queue's quota: with three GPUs idle, a second replica
// of a queue of quota 1 waits.
func TestKnativeAndKServePodsServeInference(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 1, nil)
	e.Queue(t, "team-b", 2, nil)
	installEcosystem(t, e)
	dep := knativeChain(t, e, "hello", map[string]string{v1alpha1.LabelQueue: "team-a"}, nil, 2, 1)
	if _, err := e.Client.AppsV1().Deployments("default").Create(e.Ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hello := func(p *corev1.Pod) bool { return p.Labels[knativeService] == "hello" }
	labelled(t, e, "the Knative Service's pods", 2, hello,
		map[string]string{v1alpha1.LabelClass: v1alpha1.ClassInference, v1alpha1.LabelQueue: "team-a", v1alpha1.LabelPreemptible: "", v1alpha1.LabelPodGroup: ""}, nil)

	raw := create(t, e, inferenceServices, inferenceService("llama", map[string]string{v1alpha1.LabelQueue: "team-b", v1alpha1.LabelPreemptible: "true"}))
	if _, err := e.Client.AppsV1().Deployments("default").Create(e.Ctx,
		deployment("llama-predictor", raw, map[string]string{kserveISVC: "llama", "app": "isvc.llama-predictor"}, 1, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labelled(t, e, "the raw InferenceService's pod", 1, func(p *corev1.Pod) bool { return p.Labels[kserveISVC] == "llama" },
		map[string]string{v1alpha1.LabelClass: v1alpha1.ClassInference, v1alpha1.LabelQueue: "team-b", v1alpha1.LabelPreemptible: "true"}, nil)

	serverless := create(t, e, inferenceServices, inferenceService("mistral", map[string]string{v1alpha1.LabelQueue: "team-b"}))
	dep = knativeChain(t, e, "mistral-predictor", nil, serverless, 1, 1)
	if _, err := e.Client.AppsV1().Deployments("default").Create(e.Ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labelled(t, e, "the serverless InferenceService's pod", 1, func(p *corev1.Pod) bool { return p.Labels[kserveISVC] == "mistral" },
		map[string]string{v1alpha1.LabelClass: v1alpha1.ClassInference, v1alpha1.LabelQueue: "team-b", v1alpha1.LabelPreemptible: ""}, nil)

	e.WaitFor(t, "one replica of hello running", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return hello(p) && kubetest.Running(p) })
		return n == 1, fmt.Sprintf("%d running", n)
	})
	time.Sleep(2 * time.Second) // several cycles with GPUs idle
	if n := e.Count(t, "default", func(p *corev1.Pod) bool { return hello(p) && kubetest.Bound(p) }); n != 1 {
		t.Fatalf("%d replicas of hello bound: inference of a queue of quota 1 stays within it", n)
	}
}
