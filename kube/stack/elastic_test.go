package stack_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/submit"
)

// An elastic job grows and shrinks through its own count, with the real Job controller:
//
//	node-0 [4 GPUs]    team-a (quota 2): ddp, allot submit --workers 1:4, 1 GPU a worker
//	                   team-b (quota 2): infer, a gang of 2 × 1 GPU, comes and goes
//
// ddp is submitted at its minimum of one worker. The scheduler raises its Job's
// parallelism and completions (an elastic indexed Job) to 4 as the GPUs are free, each
// raise a Grew Event on the Job. When team-b's gang comes, ddp's count is lowered to 2
// first (a ScaledDown Event): the Job controller removes workers 3 and 2 itself, no pod of
// ddp is evicted (the eviction would come only after the 30 s grace), and the gang runs.
// When the gang is gone ddp grows back to 4.
func TestElasticJobGrowsAndShrinksThroughItsCount(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 2, nil)
	e.Queue(t, "team-b", 2, nil)
	objs, err := submit.Spec{Name: "ddp", Namespace: "default", Queue: "team-a", Image: "pytorch", GPUs: "1", Workers: 4, MinWorkers: 1}.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			_, err = e.Client.CoreV1().Services("default").Create(e.Ctx, o, metav1.CreateOptions{})
		case *batchv1.Job:
			if *o.Spec.Parallelism != 1 {
				t.Fatalf("allot submit --workers 1:4 made a Job of parallelism %d, want its minimum 1", *o.Spec.Parallelism)
			}
			_, err = e.Client.BatchV1().Jobs("default").Create(e.Ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	workers := func() (running []string, count int32) {
		for _, p := range e.Pods(t, "default") {
			if p.Labels["job-name"] == "ddp" && kubetest.Running(p) && p.DeletionTimestamp == nil {
				running = append(running, p.Labels[batchv1.JobCompletionIndexAnnotation])
			}
		}
		slices.Sort(running)
		j, err := e.Client.BatchV1().Jobs("default").Get(e.Ctx, "ddp", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return running, *j.Spec.Parallelism
	}
	atCount := func(what string, want []string) {
		e.WaitFor(t, what, func() (bool, string) {
			running, n := workers()
			return slices.Equal(running, want) && int(n) == len(want), fmt.Sprintf("workers %v running, parallelism %d", running, n)
		})
	}
	atCount("ddp grown from 1 worker to 4", []string{"0", "1", "2", "3"})
	events := func(kind string) []string {
		var out []string
		for _, ev := range e.Events(t, "default", "ddp") {
			if strings.HasPrefix(ev, kind+":") {
				out = append(out, ev)
			}
		}
		return out
	}
	if g := events("Grew"); len(g) == 0 || !strings.Contains(strings.Join(g, "\n"), "(from 1, at most 4)") {
		t.Errorf("Grew Events on the Job: %q", g)
	} else {
		t.Logf("%s", strings.Join(g, "\n"))
	}

	for i := range 2 {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("infer-%d", i), Queue: "team-b", GPUs: 1,
			Labels: map[string]string{v1alpha1.LabelPodGroup: "infer"}})
	}
	atCount("ddp scaled down to 2 workers, its last two removed by the Job controller", []string{"0", "1"})
	e.WaitFor(t, "team-b's gang running", func() (bool, string) {
		pods := e.Pods(t, "default")
		return kubetest.Running(pods["infer-0"]) && kubetest.Running(pods["infer-1"]), ""
	})
	// Down to 2 in one step, or two if a cycle saw one of team-b's pods before the other.
	if s := strings.Join(events("ScaledDown"), "\n"); !strings.Contains(s, "scaled down to 2 pods (from ") || !strings.Contains(s, "reclaimed by queue team-b") {
		t.Errorf("ScaledDown Events on the Job: %q", s)
	} else {
		t.Logf("%s", s)
	}
	for name, p := range e.Pods(t, "default") {
		if p.Labels["job-name"] != "ddp" {
			continue
		}
		for _, ev := range e.Events(t, "default", name) {
			if strings.HasPrefix(ev, "Evicted:") {
				t.Errorf("ddp's pod %s was evicted (%s): its Job's count was lowered, and the Job controller should have stopped it", name, ev)
			}
		}
	}

	for i := range 2 {
		if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, fmt.Sprintf("infer-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	atCount("ddp grown back to 4 workers", []string{"0", "1", "2", "3"})
}

var pytorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// A PyTorchJob's elasticPolicy read and honoured: its gang is the master and
// minReplicas workers, and the scheduler grows and shrinks it through
// pytorchReplicaSpecs.Worker.replicas, up to maxReplicas:
//
//	node-0 [4 GPUs]   team-a (quota 2): bert, master + 1 → 3 workers × 1 GPU
//	                  team-b (quota 2): two pods that come later
//
// Kubeflow's training operator does not build against Allot's pins (the newest served,
// v1.8.1, needs controller-runtime 0.17 and Kubernetes 0.29), so the test does the
// operator's part as it does it: a pod per replica, owned by the job, made up to the
// count and the highest indexes deleted past it.
func TestPyTorchJobGrowsThroughItsWorkerReplicas(t *testing.T) {
	e := start(t, 1, 4)
	e.Queue(t, "team-a", 2, nil)
	e.Queue(t, "team-b", 2, nil)
	installCRD(t, e, "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
	tmpl := func(name string) map[string]any {
		spec := gpuPodSpec(1)
		spec.Containers[0].Name = name
		spec.SchedulerName = v1alpha1.SchedulerName
		return map[string]any{"spec": mustUnstructured(&spec)}
	}
	job := create(t, e, pytorchJobs, object(pytorchJobs, "PyTorchJob", "bert", map[string]string{v1alpha1.LabelQueue: "team-a"}, map[string]any{
		"elasticPolicy": map[string]any{"minReplicas": int64(1), "maxReplicas": int64(3), "rdzvBackend": "c10d"},
		"pytorchReplicaSpecs": map[string]any{
			"Master": map[string]any{"replicas": int64(1), "template": tmpl("pytorch")},
			"Worker": map[string]any{"replicas": int64(1), "template": tmpl("pytorch")}}}))
	go standInOperator(e, job)

	pg := podGroup(t, e, "bert", 2, "team-a")
	members, _, _ := unstructured.NestedInt64(pg.Object, "spec", "elastic", "members")
	most, _, _ := unstructured.NestedInt64(pg.Object, "spec", "elastic", "maxMembers")
	// 2 as made (a master and 1 worker); the scheduler may have grown it already, and the
	// Grew Event below says from what.
	if members < 2 || most != 4 {
		t.Fatalf("PodGroup bert spec.elastic: %d of up to %d pods, want 2 (or more once grown) of up to 4 (a master and 1 of up to 3 workers)", members, most)
	}
	workers := func(what string, want int64) {
		e.WaitFor(t, what, func() (bool, string) {
			u, err := e.Dyn.Resource(pytorchJobs).Namespace("default").Get(e.Ctx, "bert", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			n, _, _ := unstructured.NestedInt64(u.Object, "spec", "pytorchReplicaSpecs", "Worker", "replicas")
			running := e.Count(t, "default", func(p *corev1.Pod) bool {
				return p.Labels["training.kubeflow.org/job-name"] == "bert" && kubetest.Running(p) && p.DeletionTimestamp == nil
			})
			pg, _ := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Get(e.Ctx, "bert", metav1.GetOptions{})
			el, _, _ := unstructured.NestedMap(pg.Object, "spec", "elastic")
			return n == want && running == int(want)+1, fmt.Sprintf("Worker.replicas %d, %d pods running; PodGroup elastic %v; Events %q", n, running, el, e.Events(t, "default", "bert"))
		})
	}
	workers("bert grown to 3 workers", 3)
	for i := range 2 {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("b-%d", i), Queue: "team-b", GPUs: 1})
	}
	workers("bert scaled down to 1 worker for team-b", 1)
	e.WaitFor(t, "team-b's pods running", func() (bool, string) {
		pods := e.Pods(t, "default")
		return kubetest.Running(pods["b-0"]) && kubetest.Running(pods["b-1"]), ""
	})
	evs := strings.Join(e.Events(t, "default", "bert"), "\n")
	// Each in one step, or two where a cycle saw one of team-b's pods before the other.
	if !strings.Contains(evs, "(from 2, at most 4)") || !strings.Contains(evs, "ScaledDown: scaled down to 2 pods (from ") {
		t.Errorf("bert's Events:\n%s", evs)
	}
	for i := range 3 {
		name := fmt.Sprintf("bert-worker-%d", i)
		if ev := strings.Join(e.Events(t, "default", name), "; "); strings.Contains(ev, "Evicted") {
			t.Errorf("%s was evicted (%s): its job's count was lowered first", name, ev)
		}
	}
}

// standInOperator does what Kubeflow's training operator does with a PyTorchJob's pods:
// one per replica (NAME-master-0, NAME-worker-I), owned by the job, made while fewer than
// the count and deleted from the highest index past it, until the test ends.
func standInOperator(e *kubetest.Env, job *unstructured.Unstructured) {
	name := job.GetName()
	owner := metav1.OwnerReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: name, UID: job.GetUID(), Controller: new(bool)}
	*owner.Controller = true
	for e.Ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		u, err := e.Dyn.Resource(pytorchJobs).Namespace("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, role := range []string{"Master", "Worker"} {
			n, _, _ := unstructured.NestedInt64(u.Object, "spec", "pytorchReplicaSpecs", role, "replicas")
			tmpl, _, _ := unstructured.NestedMap(u.Object, "spec", "pytorchReplicaSpecs", role, "template")
			var spec corev1.PodSpec
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl["spec"].(map[string]any), &spec); err != nil {
				continue
			}
			pods, err := e.Client.CoreV1().Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=" + name +
				",training.kubeflow.org/replica-type=" + strings.ToLower(role)})
			if err != nil {
				continue
			}
			have := map[int64]bool{}
			for _, p := range pods.Items {
				i, _ := strconv.ParseInt(p.Labels["training.kubeflow.org/replica-index"], 10, 64)
				if i >= n && p.DeletionTimestamp == nil {
					_ = e.Client.CoreV1().Pods("default").Delete(e.Ctx, p.Name, metav1.DeleteOptions{})
				}
				have[i] = true
			}
			for i := range n {
				if have[i] {
					continue
				}
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", name, strings.ToLower(role), i), Namespace: "default",
					OwnerReferences: []metav1.OwnerReference{owner},
					Labels: map[string]string{"training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": strings.ToLower(role),
						"training.kubeflow.org/replica-index": strconv.FormatInt(i, 10)}}, Spec: *spec.DeepCopy()}
				_, _ = e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{})
			}
		}
	}
}
