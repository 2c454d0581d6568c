package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/api/v1alpha1"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/localcluster"
)

// The tests write Allot's objects as a person's kubectl would, untyped.
var (
	queuesGVR    = v1alpha1.Queues
	podGroupsGVR = v1alpha1.PodGroups
)

// env is a real API server with simulated GPU nodes and their kubelet (kubetest), with
// the short names these tests use.
type env struct {
	*kubetest.Env
	ctx    context.Context
	client kubernetes.Interface
	dyn    dynamic.Interface
	c      *localcluster.Cluster
}

func newEnv(t *testing.T, nodes, gpus int) *env {
	t.Helper()
	k := kubetest.Start(t, nodes, gpus)
	return &env{Env: k, ctx: k.Ctx, client: k.Client, dyn: k.Dyn, c: k.Cluster}
}

// startScheduler runs a scheduler until the returned stop is called.
func (e *env) startScheduler(t *testing.T) (stop func()) {
	t.Helper()
	return e.run(t, Options{Interval: 200 * time.Millisecond})
}

// run runs a scheduler with opts until the returned stop is called.
func (e *env) run(t *testing.T, opts Options) (stop func()) {
	t.Helper()
	s, err := New(e.c.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		if err := s.Run(ctx); err != nil {
			t.Logf("scheduler stopped: %v", err)
		}
		close(done)
	}()
	return func() { cancel(); <-done }
}

func (e *env) queue(t *testing.T, name string, quota int64) { t.Helper(); e.Queue(t, name, quota, nil) }

func (e *env) pod(t *testing.T, name, queue string, gpus int64, labels map[string]string) {
	t.Helper()
	e.MustPod(t, kubetest.PodSpec{Name: name, Queue: queue, GPUs: gpus, Labels: labels})
}

func (e *env) waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	e.WaitFor(t, what, cond)
}

func (e *env) pods(t *testing.T) map[string]*corev1.Pod { t.Helper(); return e.Pods(t, "default") }

// count is how many pods satisfy pred.
func (e *env) count(t *testing.T, pred func(*corev1.Pod) bool) int {
	n := 0
	for _, p := range e.pods(t) {
		if pred(p) {
			n++
		}
	}
	return n
}

var bound, running = kubetest.Bound, kubetest.Running

// noDoubleBooking fails if two live pods hold one device.
func noDoubleBooking(t *testing.T, pods map[string]*corev1.Pod) {
	t.Helper()
	held := map[string]string{}
	for name, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		gpus := convert.Indices(p.Annotations[AnnotationGPUs])
		if int64(len(gpus)) != podGPUs(p) {
			t.Fatalf("pod %s on %s holds %d GPUs but its %s annotation is %q", name, p.Spec.NodeName, podGPUs(p), AnnotationGPUs, p.Annotations[AnnotationGPUs])
		}
		for _, g := range gpus {
			k := fmt.Sprintf("%s/%d", p.Spec.NodeName, g)
			if other, ok := held[k]; ok {
				t.Fatalf("GPU %s held by %s and %s", k, other, name)
			}
			held[k] = name
		}
	}
}

func TestPodsBindAndQueueStatus(t *testing.T) {
	e := newEnv(t, 1, 8)
	defer e.startScheduler(t)()
	e.queue(t, "team-a", 4)
	for i := 0; i < 4; i++ {
		e.pod(t, fmt.Sprintf("a-%d", i), "team-a", 1, nil)
	}
	e.waitFor(t, "4 pods running", func() (bool, string) {
		n := e.count(t, running)
		return n == 4, fmt.Sprintf("%d running", n)
	})
	noDoubleBooking(t, e.pods(t))
	e.waitFor(t, "queue status", func() (bool, string) {
		q, err := e.dyn.Resource(queuesGVR).Get(e.ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		alloc, _, _ := unstructured.NestedString(q.Object, "status", "allocated", string(GPUResource))
		running, _, _ := unstructured.NestedInt64(q.Object, "status", "running")
		return alloc == "4" && running == 4, fmt.Sprintf("allocated %q running %d", alloc, running)
	})
}

func TestGangThatDoesNotFitWaitsWhole(t *testing.T) {
	e := newEnv(t, 1, 4)
	defer e.startScheduler(t)()
	e.queue(t, "team-a", 4)
	e.pod(t, "busy", "team-a", 2, nil)
	e.waitFor(t, "busy running", func() (bool, string) { return running(e.pods(t)["busy"]), "" })
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "gang", "namespace": "default"}, "spec": map[string]any{"minMember": int64(3), "queue": "team-a"}}}
	if _, err := e.dyn.Resource(podGroupsGVR).Namespace("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		e.pod(t, fmt.Sprintf("gang-%d", i), "team-a", 1, map[string]string{LabelPodGroup: "gang"})
	}
	e.waitFor(t, "reason on every gang pod", func() (bool, string) {
		pods := e.pods(t)
		for i := 0; i < 3; i++ {
			p := pods[fmt.Sprintf("gang-%d", i)]
			if p.Spec.NodeName != "" {
				t.Fatalf("gang pod %s bound while the gang cannot fit", p.Name)
			}
			found := false
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "gang of 3 pods") {
					found = true
				}
			}
			if !found {
				return false, fmt.Sprintf("%s: %+v", p.Name, p.Status.Conditions)
			}
		}
		return true, ""
	})
	e.waitFor(t, "pod group status", func() (bool, string) {
		g, err := e.dyn.Resource(podGroupsGVR).Namespace("default").Get(e.ctx, "gang", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase, _, _ := unstructured.NestedString(g.Object, "status", "phase")
		reason, _, _ := unstructured.NestedString(g.Object, "status", "reason")
		return phase == "Pending" && strings.Contains(reason, "only 2 fit now"), phase + ": " + reason
	})
}

func TestOwnerReclaimsFromBorrower(t *testing.T) {
	e := newEnv(t, 1, 4)
	defer e.startScheduler(t)()
	e.queue(t, "team-a", 2)
	e.queue(t, "team-b", 2)
	for i := 0; i < 4; i++ {
		e.pod(t, fmt.Sprintf("a-%d", i), "team-a", 1, nil)
	}
	e.waitFor(t, "team-a borrows all 4", func() (bool, string) {
		n := e.count(t, running)
		return n == 4, fmt.Sprintf("%d running", n)
	})
	e.pod(t, "b-0", "team-b", 1, nil)
	e.waitFor(t, "b-0 runs after reclaim", func() (bool, string) {
		pods := e.pods(t)
		return running(pods["b-0"]), fmt.Sprintf("b-0 %+v", pods["b-0"].Status.Conditions)
	})
	if _, ok := e.pods(t)["a-3"]; ok {
		t.Errorf("the newest borrower pod a-3 was not the one evicted")
	}
	noDoubleBooking(t, e.pods(t))
}

func TestRestartDoesNotDoubleBook(t *testing.T) {
	e := newEnv(t, 2, 4)
	e.queue(t, "team-a", 8)
	stop := e.startScheduler(t)
	for i := 0; i < 3; i++ {
		e.pod(t, fmt.Sprintf("first-%d", i), "team-a", 2, nil)
	}
	e.waitFor(t, "first wave bound", func() (bool, string) {
		n := e.count(t, bound)
		return n == 3, fmt.Sprintf("%d bound", n)
	})
	stop()
	for i := 0; i < 3; i++ {
		e.pod(t, fmt.Sprintf("second-%d", i), "team-a", 1, nil)
	}
	defer e.startScheduler(t)()
	e.waitFor(t, "8 GPUs in use after restart", func() (bool, string) {
		n := e.count(t, bound)
		return n == 5, fmt.Sprintf("%d bound", n)
	})
	pods := e.pods(t)
	noDoubleBooking(t, pods)
	if pods["second-2"].Spec.NodeName != "" && pods["second-0"].Spec.NodeName != "" && pods["second-1"].Spec.NodeName != "" {
		t.Fatalf("8 GPUs hold 3×2 + 3×1 pods")
	}
}

// TestBatchJobBinds: a batch Job of 4 one-GPU pods in a queue is bound (the embedded Job
// controller creates the pods) and the queue's status shows 4 allocated.
func TestBatchJobBinds(t *testing.T) {
	e := newEnv(t, 1, 8)
	defer e.startScheduler(t)()
	e.queue(t, "team-a", 4)
	four := int32(4)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default"},
		Spec: batchv1.JobSpec{Parallelism: &four, Completions: &four, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelQueue: "team-a"}},
			Spec: corev1.PodSpec{SchedulerName: SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "train", Image: "pytorch",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")}}}}}}}}
	if _, err := e.client.BatchV1().Jobs("default").Create(e.ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "the Job's 4 pods run", func() (bool, string) {
		n := e.count(t, func(p *corev1.Pod) bool { return running(p) && p.Labels["job-name"] == "train" })
		return n == 4, fmt.Sprintf("%d running", n)
	})
	e.waitFor(t, "queue status 4 allocated", func() (bool, string) {
		q, err := e.dyn.Resource(queuesGVR).Get(e.ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		alloc, _, _ := unstructured.NestedString(q.Object, "status", "allocated", string(GPUResource))
		return alloc == "4", alloc
	})
	noDoubleBooking(t, e.pods(t))
}

// TestTwoReplicasWithLeaderElection: two schedulers run; one holds the Lease and schedules,
// and nothing is double-booked.
func TestTwoReplicasWithLeaderElection(t *testing.T) {
	e := newEnv(t, 1, 4)
	e.queue(t, "team-a", 4)
	for _, id := range []string{"replica-1", "replica-2"} {
		s, err := New(e.c.Config, Options{Interval: 200 * time.Millisecond, LeaderElection: true, Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.Run(e.ctx) }()
	}
	for i := 0; i < 6; i++ {
		e.pod(t, fmt.Sprintf("p-%d", i), "team-a", 1, nil)
	}
	e.waitFor(t, "4 of 6 pods bound", func() (bool, string) {
		n := e.count(t, bound)
		return n == 4, fmt.Sprintf("%d bound", n)
	})
	noDoubleBooking(t, e.pods(t))
	lease, err := e.client.CoordinationV1().Leases("kube-system").Get(e.ctx, "allot-scheduler", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || !strings.HasPrefix(*lease.Spec.HolderIdentity, "replica-") {
		t.Fatalf("lease: %v %+v", err, lease)
	}
}
