package stack_test

// Gangs of the LeaderWorkerSet, KubeRay and Kubeflow Trainer objects as the projects' real
// controllers make them (kube/ecosystem runs them in-process): the test creates only the
// user's object; every StatefulSet, Job, JobSet and pod below it is the controllers' work.
// Their webhooks do not run (see docs/integrations.md), so each object spells out the
// defaults those would fill in.

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/ecosystem"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/workload"
)

// withControllers starts the named projects' real controllers on e's cluster, after the
// stack: its workload controller watches their kinds once their CRDs are served, as under
// allot up --with.
func withControllers(t *testing.T, e *kubetest.Env, names ...string) {
	t.Helper()
	if err := ecosystem.Start(e.Ctx, e.Cluster.Config, names); err != nil {
		t.Fatal(err)
	}
}

// realPodTemplate is a pod template of one container named name asking gpus GPUs,
// scheduled by Allot.
func realPodTemplate(name string, gpus int64) map[string]any {
	spec := gpuPodSpec(gpus)
	spec.Containers[0].Name = name
	return map[string]any{"spec": mustUnstructured(&spec)}
}

// evicted is the pods Allot evicted, by name, sorted.
func evicted(t *testing.T, e *kubetest.Env) []string {
	t.Helper()
	l, err := e.Client.CoreV1().Events("default").List(e.Ctx, metav1.ListOptions{FieldSelector: "reason=Evicted"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range l.Items {
		if ev.InvolvedObject.Kind == "Pod" {
			seen[ev.InvolvedObject.Name] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// lwsGroupOf is the group (its leader pod's name) of a pod of LWS name: the leader is
// <lws>-<i>, its workers <lws>-<i>-<j>.
func lwsGroupOf(lws, pod string) string {
	rest, ok := strings.CutPrefix(pod, lws+"-")
	if !ok {
		return ""
	}
	i, _, _ := strings.Cut(rest, "-")
	return lws + "-" + i
}

// TestRealLWSGroupsStartAndGoWhole: the real LeaderWorkerSet controller makes two groups
// of four pods (one GPU each) from an LWS of team-a, which borrows four GPUs over its quota
// of four to run both. Each group is a PodGroup of four, and both run whole. When team-b
// asks for its quota, a whole group is evicted — its four pods, never one to three of them
// — and, made again by the LWS controller, waits whole.
func TestRealLWSGroupsStartAndGoWhole(t *testing.T) {
	e := start(t, 1, 8)
	e.Queue(t, "team-a", 4, nil)
	e.Queue(t, "team-b", 4, nil)
	withControllers(t, e, ecosystem.LWS)
	// The fields LWS's defaulting webhook would fill are given.
	create(t, e, workload.LeaderWorkerSets, object(workload.LeaderWorkerSets, "LeaderWorkerSet", "llm",
		map[string]string{v1alpha1.LabelQueue: "team-a", v1alpha1.LabelPreemptible: "true"}, map[string]any{
			"replicas":      int64(2),
			"startupPolicy": "LeaderCreated",
			"leaderWorkerTemplate": map[string]any{"size": int64(4), "restartPolicy": "RecreateGroupOnPodRestart",
				"workerTemplate": realPodTemplate("server", 1)},
			"rolloutStrategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdateConfiguration": map[string]any{"maxUnavailable": int64(1), "maxSurge": int64(0), "partition": int64(0)}},
			"networkConfig": map[string]any{"subdomainPolicy": "Shared"},
		}))
	for g := range 2 {
		name := fmt.Sprintf("llm-%d", g)
		podGroup(t, e, name, 4, "team-a")
		labelled(t, e, "group "+name+"'s pods", 4, func(p *corev1.Pod) bool { return lwsGroupOf("llm", p.Name) == name },
			map[string]string{v1alpha1.LabelPodGroup: name, v1alpha1.LabelClass: v1alpha1.ClassInference, v1alpha1.LabelQueue: "team-a"},
			map[string]string{v1alpha1.AnnotationMinMember: "4"})
	}
	running := func(match func(*corev1.Pod) bool) int {
		return e.Count(t, "default", func(p *corev1.Pod) bool { return match(p) && kubetest.Running(p) && p.DeletionTimestamp == nil })
	}
	inGroup := func(g string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelPodGroup] == g }
	}
	e.WaitFor(t, "both groups running whole", func() (bool, string) {
		a, b := running(inGroup("llm-0")), running(inGroup("llm-1"))
		return a == 4 && b == 4, fmt.Sprintf("llm-0 %d, llm-1 %d running", a, b)
	})

	// team-b's gang of four in its quota: team-a's borrowed GPUs are taken back.
	e.MustPod(t, kubetest.PodSpec{Name: "claim", Queue: "team-b", GPUs: 4})
	e.WaitFor(t, "team-b's pod running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["claim"]), "" })
	time.Sleep(2 * time.Second) // several cycles: no further eviction
	got := evicted(t, e)
	byGroup := map[string]int{}
	for _, n := range got {
		byGroup[lwsGroupOf("llm", n)]++
	}
	if len(byGroup) != 1 || len(got) != 4 {
		t.Fatalf("evicted %v (by group %v), want the four pods of one group", got, byGroup)
	}
	// The other group keeps running whole; the reclaimed one is made again by the LWS
	// controller and waits whole, with no GPU free.
	for _, g := range []string{"llm-0", "llm-1"} {
		if byGroup[g] == 0 {
			if n := running(inGroup(g)); n != 4 {
				t.Fatalf("group %s, not reclaimed, has %d pods running, want 4", g, n)
			}
			continue
		}
		e.WaitFor(t, "group "+g+" made again, all four waiting", func() (bool, string) {
			var made, bound int
			for _, p := range e.Pods(t, "default") {
				if inGroup(g)(p) && p.DeletionTimestamp == nil {
					made++
					if kubetest.Bound(p) {
						bound++
					}
				}
			}
			return made == 4 && bound == 0, fmt.Sprintf("%d made, %d bound", made, bound)
		})
	}
}

// unschedulable is the message of the pod's PodScheduled=False Unschedulable condition, or
// "".
func unschedulable(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

// ofRayCluster matches the pods of RayCluster rc.
func ofRayCluster(rc string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return p.Labels[rayCluster] == rc }
}

// TestRealRayClusterWaitsWhole: the real KubeRay controller makes a head (one GPU) and two
// workers (one GPU each) from a RayCluster of team-a. With two GPUs free none of the three
// is bound, and each says it waits for its gang of three; once a third GPU frees, all
// three run.
func TestRealRayClusterWaitsWhole(t *testing.T) {
	e := start(t, 1, 3)
	e.Queue(t, "team-a", 3, nil)
	e.Queue(t, "team-b", 1, nil)
	withControllers(t, e, ecosystem.Ray)
	// A GPU taken within team-b's quota, which team-a cannot reclaim: the cluster waits for
	// capacity, not for quota.
	e.MustPod(t, kubetest.PodSpec{Name: "busy", Queue: "team-b", GPUs: 1, Labels: map[string]string{v1alpha1.LabelPreemptible: "false"}})
	e.WaitFor(t, "busy running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["busy"]), "" })

	create(t, e, workload.RayClusters, object(workload.RayClusters, "RayCluster", "rc", map[string]string{v1alpha1.LabelQueue: "team-a"}, map[string]any{
		"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": realPodTemplate("ray-head", 1)},
		"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": int64(2), "minReplicas": int64(2), "maxReplicas": int64(2),
			"rayStartParams": map[string]any{}, "template": realPodTemplate("ray-worker", 1)}},
	}))
	podGroup(t, e, "rc", 3, "team-a")
	inCluster := ofRayCluster("rc")
	pods := labelled(t, e, "the cluster's pods", 3, inCluster,
		map[string]string{v1alpha1.LabelPodGroup: "rc", v1alpha1.LabelQueue: "team-a"},
		map[string]string{v1alpha1.AnnotationMinMember: "3"})
	e.WaitFor(t, "a reason on each waiting pod", func() (bool, string) {
		var missing []string
		for _, p := range pods {
			if !strings.Contains(unschedulable(e.Pods(t, "default")[p.Name]), "gang of 3") {
				missing = append(missing, p.Name)
			}
		}
		return len(missing) == 0, "no PodScheduled=False Unschedulable naming the gang of 3 on " + strings.Join(missing, ", ")
	})
	t.Logf("%s waits: %s", pods[0].Name, unschedulable(e.Pods(t, "default")[pods[0].Name]))
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
}

var clusterTrainingRuntimes = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "clustertrainingruntimes"}

// TestRealTrainJobNodesAreOneGang: from a TrainJob of two nodes (one GPU each) on a
// ClusterTrainingRuntime, the real Trainer and JobSet controllers make a JobSet, its Job
// and the node pods; those are one PodGroup of two: neither is bound while one GPU is free,
// and both run once two are.
func TestRealTrainJobNodesAreOneGang(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	withControllers(t, e, ecosystem.Trainer)
	e.MustPod(t, kubetest.PodSpec{Name: "busy", Queue: "team-a", GPUs: 1, Labels: map[string]string{v1alpha1.LabelPreemptible: "false"}})
	e.WaitFor(t, "busy running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["busy"]), "" })
	node := realPodTemplate("node", 1)
	node["spec"].(map[string]any)["restartPolicy"] = "OnFailure"
	rt := object(clusterTrainingRuntimes, "ClusterTrainingRuntime", "torch-gpu", map[string]string{"trainer.kubeflow.org/framework": "torch"}, map[string]any{
		"mlPolicy": map[string]any{"numNodes": int64(1), "torch": map[string]any{"numProcPerNode": "auto"}},
		// The JobSet fields JobSet's defaulting webhook would fill are given.
		"template": map[string]any{"spec": map[string]any{
			"successPolicy": map[string]any{"operator": "All"},
			"startupPolicy": map[string]any{"startupPolicyOrder": "AnyOrder"},
			"network":       map[string]any{"enableDNSHostnames": true, "publishNotReadyAddresses": true},
			"replicatedJobs": []any{map[string]any{"name": "node", "replicas": int64(1),
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{trainerStep: "trainer"}},
					"spec": map[string]any{"completionMode": "Indexed", "template": node}}}},
		}},
	})
	rt.SetNamespace("")
	if _, err := e.Dyn.Resource(clusterTrainingRuntimes).Create(e.Ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tj := create(t, e, workload.TrainJobs, object(workload.TrainJobs, "TrainJob", "tune", map[string]string{v1alpha1.LabelQueue: "team-a"}, map[string]any{
		"runtimeRef": map[string]any{"name": "torch-gpu", "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
		"trainer":    map[string]any{"numNodes": int64(2)},
	}))
	pg := podGroup(t, e, "tune", 2, "team-a")
	if ref := metav1.GetControllerOfNoCopy(pg); ref == nil || ref.Kind != "TrainJob" || ref.UID != tj.GetUID() {
		t.Fatalf("PodGroup tune controlled by %+v, want the TrainJob", ref)
	}
	nodes := func(p *corev1.Pod) bool { return p.Labels[jobSetName] == "tune" }
	labelled(t, e, "the node pods", 2, nodes,
		map[string]string{v1alpha1.LabelPodGroup: "tune", v1alpha1.LabelClass: v1alpha1.ClassTrain, v1alpha1.LabelQueue: "team-a"},
		map[string]string{v1alpha1.AnnotationMinMember: "2"})
	time.Sleep(2 * time.Second) // several cycles with one GPU free
	if n := e.Count(t, "default", func(p *corev1.Pod) bool { return nodes(p) && kubetest.Bound(p) }); n != 0 {
		t.Fatalf("%d of the TrainJob's 2 nodes bound with 1 GPU free: its nodes start together or not at all", n)
	}
	if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, "busy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "both nodes running", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return nodes(p) && kubetest.Running(p) })
		return n == 2, fmt.Sprintf("%d running", n)
	})
}
