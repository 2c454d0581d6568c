package stack_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// start brings up a cluster of nodes × gpus with Allot's whole stack on it: webhooks,
// workload controller and scheduler.
func start(t *testing.T, nodes, gpus int) *kubetest.Env {
	e, _ := startWithMetrics(t, nodes, gpus)
	return e
}

func startWithMetrics(t *testing.T, nodes, gpus int) (*kubetest.Env, string) {
	t.Helper()
	e := kubetest.Start(t, nodes, gpus)
	r, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e, r.MetricsURL
}

// scrape returns the metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func fraction(name, f string) kubetest.PodSpec {
	return kubetest.PodSpec{Name: name, Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: f}}
}

// gpuOf is where a running shared pod sits, and the environment its container starts
// with (resolved as the kubelet does, from the pod as it is now).
func gpuOf(t *testing.T, e *kubetest.Env, name string) (node, index string, env map[string]string) {
	t.Helper()
	p := e.Pods(t, "default")[name]
	return p.Spec.NodeName, p.Annotations[v1alpha1.AnnotationGPUs], e.ContainerEnv(t, p, p.Spec.Containers[0].Name)
}

func reservations(t *testing.T, e *kubetest.Env) []string {
	var out []string
	for name := range e.Pods(t, v1alpha1.SystemNamespace) {
		out = append(out, name)
	}
	return out
}

// One node, four GPUs:
//
//	GPU a: nb-1 0.5 + nb-2 0.5      GPU b: big 0.6 + small 0.4      GPU c: extra 0.5
func TestFractionsShareGPUs(t *testing.T) {
	e, metrics := startWithMetrics(t, 1, 4)
	e.Queue(t, "team-a", 4, nil)
	e.MustPod(t, fraction("nb-1", "0.5"))
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "both halves running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 2, fmt.Sprintf("%d running", n)
	})
	n1, g1, env1 := gpuOf(t, e, "nb-1")
	n2, g2, env2 := gpuOf(t, e, "nb-2")
	if n1 != n2 || g1 != g2 {
		t.Fatalf("halves on %s GPU %s and %s GPU %s, want one GPU", n1, g1, n2, g2)
	}
	node, err := e.Client.CoreV1().Nodes().Get(e.Ctx, n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uuids := strings.Split(node.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
	var idx int
	fmt.Sscan(g1, &idx)
	for _, env := range []map[string]string{env1, env2} {
		if env["NVIDIA_VISIBLE_DEVICES"] != uuids[idx] || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" ||
			env["CUDA_DEVICE_SM_LIMIT"] != "50" || env["CUDA_DEVICE_MEMORY_LIMIT"] != "40960m" || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=40960M" {
			t.Fatalf("environment %v, want device %s with a 50%% share of 80Gi", env, uuids[idx])
		}
	}
	if r := reservations(t, e); len(r) != 1 || r[0] != fmt.Sprintf("allot-reservation-%s-gpu%s", n1, g1) {
		t.Fatalf("reservations %v, want one for %s GPU %s", r, n1, g1)
	}
	e.WaitFor(t, "occupancy on the node", func() (bool, string) {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, n1, metav1.GetOptions{})
		occ, err := scheduler.ParseOccupancy(n)
		if err != nil || len(occ.GPUs) != 1 {
			return false, fmt.Sprint(occ, err)
		}
		g := occ.GPUs[0]
		return g.Index == idx && g.UUID == uuids[idx] && g.Used == 1000 && len(g.Holders) == 2 && g.Holders[0].Pod == "default/nb-1" &&
			g.Holders[0].Share == 500, fmt.Sprintf("%+v", g)
	})

	e.MustPod(t, fraction("big", "0.6"))
	e.MustPod(t, fraction("small", "0.4"))
	e.WaitFor(t, "0.6 and 0.4 running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 4, fmt.Sprintf("%d running", n)
	})
	_, gb, envb := gpuOf(t, e, "big")
	_, gs, envs := gpuOf(t, e, "small")
	if gb != gs || gb == g1 {
		t.Fatalf("0.6 on GPU %s, 0.4 on GPU %s (halves on %s): want one other GPU for both", gb, gs, g1)
	}
	if envb["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "60" || envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "40" {
		t.Fatalf("compute shares %s and %s, want 60 and 40", envb["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	}
	// The queue gauges count the fractions: 0.5 + 0.5 + 0.6 + 0.4 GPUs.
	e.WaitFor(t, "queue gauges", func() (bool, string) {
		m := scrape(t, metrics)
		return strings.Contains(m, `allot_queue_allocated_gpus{queue="team-a"} 2`) && strings.Contains(m, `allot_queue_quota_gpus{queue="team-a"} 4`) &&
			strings.Contains(m, "allot_pods_scheduled_total 4") && strings.Contains(m, "allot_scheduling_cycle_duration_seconds_count"), m
	})
	e.MustPod(t, fraction("extra", "0.5"))
	e.WaitFor(t, "a further half running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["extra"]), "" })
	if _, ge, _ := gpuOf(t, e, "extra"); ge == g1 || ge == gb {
		t.Fatalf("0.5 on GPU %s, which is full", ge)
	}
	if r := reservations(t, e); len(r) != 3 {
		t.Fatalf("reservations %v, want one per shared GPU (3)", r)
	}

	for _, name := range []string{"nb-1", "nb-2"} {
		if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone := fmt.Sprintf("allot-reservation-%s-gpu%s", n1, g1)
	e.WaitFor(t, "the halves' reservation released", func() (bool, string) {
		r := reservations(t, e)
		for _, name := range r {
			if name == gone {
				return false, fmt.Sprint(r)
			}
		}
		return len(r) == 2, fmt.Sprint(r)
	})
}

// TestAdmissionRefusesWhatCannotRun: each pod is refused by the API server with a message
// naming the annotation or label and what is allowed. Two nodes of eight 80Gi GPUs.
func TestAdmissionRefusesWhatCannotRun(t *testing.T) {
	e := start(t, 2, 8)
	e.Queue(t, "team-a", 8, nil)
	e.Queue(t, "ml-only", 8, map[string]any{"namespaces": []any{"ml"}})
	gang := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "huge", "namespace": "default"}, "spec": map[string]any{"minMember": int64(3), "queue": "team-a"}}}
	if _, err := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Create(e.Ctx, gang, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ann := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		pod  kubetest.PodSpec
		want string
	}{
		{kubetest.PodSpec{Name: "f15", Queue: "team-a", Annotations: ann(v1alpha1.AnnotationGPUFraction, "1.5")},
			`allot.dev/gpu-fraction: "1.5" is not allowed: a fraction is a number between 0 and 1`},
		{kubetest.PodSpec{Name: "f0", Queue: "team-a", Annotations: ann(v1alpha1.AnnotationGPUFraction, "0")},
			`allot.dev/gpu-fraction: "0" is not allowed`},
		{kubetest.PodSpec{Name: "mem", Queue: "team-a", Annotations: ann(v1alpha1.AnnotationGPUMemory, "100Gi")},
			`allot.dev/gpu-memory: "100Gi" is more than any GPU in the cluster has: at most 80Gi`},
		{kubetest.PodSpec{Name: "both", Queue: "team-a", Annotations: ann(v1alpha1.AnnotationGPUFraction, "0.5", v1alpha1.AnnotationGPUMemory, "8Gi")},
			"allot.dev/gpu-fraction and allot.dev/gpu-memory are both set"},
		{kubetest.PodSpec{Name: "unknown", Queue: "team-z", GPUs: 1},
			`allot.dev/queue: queue "team-z" does not exist; queues: ml-only, team-a`},
		{kubetest.PodSpec{Name: "foreign", Queue: "ml-only", GPUs: 1},
			`allot.dev/queue: namespace "default" may not use queue "ml-only"; it admits namespaces ml`},
		{kubetest.PodSpec{Name: "gang", Queue: "team-a", GPUs: 8, Labels: ann(v1alpha1.LabelPodGroup, "huge")},
			`allot.dev/pod-group: gang "huge" needs 24 GPUs at once (3 pods × 8) but the cluster has 16`},
	} {
		err := e.CreatePod(c.pod)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.pod.Name, err, c.want)
		}
	}
	if err := e.CreatePod(kubetest.PodSpec{Name: "fine", Queue: "team-a", Annotations: ann(v1alpha1.AnnotationGPUMemory, "20Gi")}); err != nil {
		t.Fatalf("a valid pod was refused: %v", err)
	}
}

// One node of three GPUs, one held by "busy": a Job of three one-GPU pods waits whole
// until busy goes, then starts whole. Its pods carry the Job's queue, the train class and
// the PodGroup the workload controller made.
func TestJobStartsWholeOrNotAtAll(t *testing.T) {
	e := start(t, 1, 3)
	e.Queue(t, "team-a", 3, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "busy", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "busy running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["busy"]), "" })
	three := int32(3)
	tmpl := kubetest.PodSpec{GPUs: 1}.Pod()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{Parallelism: &three, Completions: &three,
			Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
	if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	jobPods := func(p *corev1.Pod) bool { return p.Labels["job-name"] == "train" }
	e.WaitFor(t, "the job's pods, grouped", func() (bool, string) {
		n := 0
		for _, p := range e.Pods(t, "default") {
			if jobPods(p) && p.Labels[v1alpha1.LabelPodGroup] == "train" && p.Labels[v1alpha1.LabelQueue] == "team-a" && p.Labels[v1alpha1.LabelClass] == "train" {
				n++
			}
		}
		return n == 3, fmt.Sprintf("%d labelled pods", n)
	})
	pg, err := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Get(e.Ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no PodGroup for the Job: %v", err)
	}
	if m, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember"); m != 3 {
		t.Fatalf("PodGroup minMember %d, want the Job's parallelism 3", m)
	}
	time.Sleep(2 * time.Second) // several cycles with two GPUs free
	if n := e.Count(t, "default", func(p *corev1.Pod) bool { return jobPods(p) && kubetest.Bound(p) }); n != 0 {
		var seen []string
		for _, p := range e.Pods(t, "default") {
			seen = append(seen, fmt.Sprintf("%s %s %v", p.Name, p.Spec.NodeName, p.Annotations))
		}
		t.Fatalf("%d of the job's pods bound with 2 GPUs free: a gang starts whole or not at all (%s)", n, strings.Join(seen, "; "))
	}
	if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, "busy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the whole job running", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return jobPods(p) && kubetest.Running(p) })
		return n == 3, fmt.Sprintf("%d running", n)
	})
}

// TestInteractiveTimeLimitStopsPods: a notebook past its queue's 2 s limit is stopped with
// an Event; a training pod of the same queue keeps running.
func TestInteractiveTimeLimitStopsPods(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, map[string]any{"interactiveTimeLimit": "2s"})
	e.MustPod(t, kubetest.PodSpec{Name: "notebook", Queue: "team-a", GPUs: 1, Labels: map[string]string{v1alpha1.LabelClass: v1alpha1.ClassInteractive}})
	e.MustPod(t, kubetest.PodSpec{Name: "train", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "both running", func() (bool, string) { return e.Count(t, "default", kubetest.Running) == 2, "" })
	e.WaitFor(t, "notebook stopped", func() (bool, string) {
		_, ok := e.Pods(t, "default")["notebook"]
		return !ok, ""
	})
	e.WaitFor(t, "an event says why", func() (bool, string) {
		ev := strings.Join(e.Events(t, "default", "notebook"), "\n")
		return strings.Contains(ev, "InteractiveTimeLimit: stopped after") && strings.Contains(ev, "queue team-a allows interactive workloads 2s"), ev
	})
	if !kubetest.Running(e.Pods(t, "default")["train"]) {
		t.Fatal("the training pod was stopped too")
	}
}

// One node of two GPUs. team-b borrows both with a pod a PodDisruptionBudget protects;
// team-a's in-quota pod would reclaim one, but the budget forbids the eviction: it does
// not happen, and an Event says why.
func TestEvictionHonoursPodDisruptionBudget(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 1, nil)
	e.Queue(t, "team-b", 0, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "borrower", Queue: "team-b", GPUs: 2, Labels: map[string]string{"app": "serve"}})
	e.WaitFor(t, "borrower running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["borrower"]), "" })
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "serve"}}}}
	if _, err := e.Client.PolicyV1().PodDisruptionBudgets("default").Create(e.Ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the budget observed by the disruption controller", func() (bool, string) {
		p, err := e.Client.PolicyV1().PodDisruptionBudgets("default").Get(e.Ctx, "serve", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1, fmt.Sprintf("%+v", p.Status)
	})
	e.MustPod(t, kubetest.PodSpec{Name: "owner", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "the blocked eviction reported", func() (bool, string) {
		ev := strings.Join(e.Events(t, "default", "borrower"), "\n")
		return strings.Contains(ev, "EvictionBlocked: not evicted after all: a PodDisruptionBudget does not allow it"), ev
	})
	time.Sleep(3 * time.Second)
	// Asked once, not every cycle: one Evicted (the intent, written first) and one
	// EvictionBlocked.
	if ev := strings.Join(e.Events(t, "default", "borrower"), "\n"); strings.Count(ev, "EvictionBlocked:") != 1 || strings.Count(ev, "Evicted:") != 1 {
		t.Fatalf("events on the protected pod:\n%s", ev)
	}
	pods := e.Pods(t, "default")
	if b := pods["borrower"]; !kubetest.Running(b) || b.DeletionTimestamp != nil {
		t.Fatalf("the protected pod was disrupted: %+v", b.Status)
	}
	if kubetest.Bound(pods["owner"]) {
		t.Fatal("owner bound onto GPUs the protected pod holds")
	}
}

// TestDeploymentIsInferenceInNamespaceQueue: a Deployment's pods take the queue their
// namespace names by default and the inference class (not preemptible by default).
func TestDeploymentIsInferenceInNamespaceQueue(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "serving", 2, nil)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{v1alpha1.LabelQueue: "serving"}}}
	if _, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	_ = json.Unmarshal([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"llm","namespace":"prod"},
		"spec":{"replicas":2,"selector":{"matchLabels":{"app":"llm"}},"template":{"metadata":{"labels":{"app":"llm"}},
		"spec":{"schedulerName":"allot","containers":[{"name":"vllm","image":"vllm","resources":{"limits":{"nvidia.com/gpu":1}}}]}}}}`), &d)
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	if _, err := e.Dyn.Resource(deployments).Namespace("prod").Create(e.Ctx, &unstructured.Unstructured{Object: d}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "inference replicas running in queue serving", func() (bool, string) {
		n := 0
		for _, p := range e.Pods(t, "prod") {
			if kubetest.Running(p) && p.Labels[v1alpha1.LabelQueue] == "serving" && p.Labels[v1alpha1.LabelClass] == v1alpha1.ClassInference {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d", n)
	})
}

// TestEvictedJobPodIsRecreatedWithoutFailing: Allot's Jobs ignore evictions in their failure
// count (the webhook adds the pod failure policy); an evicted pod comes back and the gang
// runs whole again.
func TestEvictedJobPodIsRecreatedWithoutFailing(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	two := int32(2)
	backoff := int32(0)
	tmpl := kubetest.PodSpec{GPUs: 1}.Pod()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{Parallelism: &two, BackoffLimit: &backoff, Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
	created, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.PodFailurePolicy == nil || len(created.Spec.PodFailurePolicy.Rules) != 1 ||
		created.Spec.PodFailurePolicy.Rules[0].Action != batchv1.PodFailurePolicyActionIgnore {
		t.Fatalf("pod failure policy %+v, want evictions ignored", created.Spec.PodFailurePolicy)
	}
	running := func() map[string]bool {
		out := map[string]bool{}
		for name, p := range e.Pods(t, "default") {
			if kubetest.Running(p) && p.DeletionTimestamp == nil {
				out[name] = true
			}
		}
		return out
	}
	e.WaitFor(t, "job running", func() (bool, string) { return len(running()) == 2, fmt.Sprint(running()) })
	before := running()
	var victim string
	for name := range before {
		victim = name
		break
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: "default"}}
	if err := e.Client.PolicyV1().Evictions("default").Evict(e.Ctx, ev); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "a new pod in the evicted one's place", func() (bool, string) {
		now := running()
		return len(now) == 2 && !now[victim], fmt.Sprint(now)
	})
	j, err := e.Client.BatchV1().Jobs("default").Get(e.Ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			t.Fatalf("the job failed after an eviction (backoffLimit 0): %s", c.Message)
		}
	}
}

// TestMetricsCountReclaimsAndWaitingPods scrapes /metrics through a reclaim. One node of
// four GPUs, team-a and team-b with quota 2 each:
//
//	team-a: Job train, gang of 4   → runs on all four (2 borrowed)
//	team-b: Job infer, gang of 2   → takes its 2 back: train's four pods are evicted
//	team-a: pod wide, 3 GPUs       → waits (2 free)
//
// (The Job controller recreates train's pods only after its failure backoff, 80 s for four
// failures at once, so they do not come back within the test.)
func TestMetricsCountReclaimsAndWaitingPods(t *testing.T) {
	e, metrics := startWithMetrics(t, 1, 4)
	e.Queue(t, "team-a", 2, nil)
	e.Queue(t, "team-b", 2, nil)
	job := func(name, queue string, n int32) {
		tmpl := kubetest.PodSpec{GPUs: 1}.Pod()
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: queue}},
			Spec: batchv1.JobSpec{Parallelism: &n, Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
		if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(job string) int {
		return e.Count(t, "default", func(p *corev1.Pod) bool {
			return p.Labels["job-name"] == job && kubetest.Running(p) && p.DeletionTimestamp == nil
		})
	}
	job("train", "team-a", 4)
	e.WaitFor(t, "train running on all four GPUs", func() (bool, string) { n := running("train"); return n == 4, fmt.Sprint(n) })
	if err := e.CreatePod(kubetest.PodSpec{Name: "stray", GPUs: 1}); err == nil {
		t.Fatal("a pod with no queue was admitted")
	}
	job("infer", "team-b", 2)
	e.WaitFor(t, "infer running, train waiting", func() (bool, string) {
		i, tr := running("infer"), running("train")
		return i == 2 && tr == 0, fmt.Sprintf("infer %d, train %d running", i, tr)
	})
	e.MustPod(t, kubetest.PodSpec{Name: "wide", Queue: "team-a", GPUs: 3})
	evicted := regexp.MustCompile(`allot_pods_evicted_total\{reason="Reclaimed"\} 4\n`)
	waiting := regexp.MustCompile(`allot_pods_unschedulable\{reason="[A-Za-z]+"\} 1\n`)
	e.WaitFor(t, "the reclaim and the waiting gang in /metrics", func() (bool, string) {
		m := scrape(t, metrics)
		for _, want := range []string{
			`allot_reclaims_total{queue="team-b"} 1`,
			`allot_queue_allocated_gpus{queue="team-b"} 2`,
			`allot_queue_allocated_gpus{queue="team-a"} 0`,
			`allot_queue_pending_gpus{queue="team-a"} 3`,
			`allot_admission_requests_total{result="allowed",webhook="mutate-jobs"} 2`,
			`allot_workload_pod_group_writes_total{action="create",result="ok"} 2`,
		} {
			if !strings.Contains(m, want) {
				return false, "no " + want + " in\n" + m
			}
		}
		if !evicted.MatchString(m) || !waiting.MatchString(m) {
			return false, "not 4 pods evicted for the reclaim, or not 1 pod unschedulable, in\n" + m
		}
		refused := regexp.MustCompile(`allot_admission_requests_total\{result="refused",webhook="(mutate|validate)-pods"\} 1\n`)
		return refused.MatchString(m), "the stray pod's refusal not counted in\n" + m
	})
}
