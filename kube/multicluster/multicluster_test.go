package multicluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/simnode"
)

// TestManagerDispatchesAcrossClusters runs three real control planes: a manager with no
// nodes, and two workers with Allot's stack on simulated GPU nodes.
//
//	manager ── w1: w1-a100-1, w1-a100-2        8 × A100 each
//	       └── w2: w2-a100-1                   8 × A100
//	               w2-h100-1                   4 × H100
//
// Queues team-a and team-b (8 GPUs each) are the manager's, kept on both workers. The
// parts run in order, each leaving the workers empty of the manager's work.
func TestManagerDispatchesAcrossClusters(t *testing.T) {
	r := newRig(t, map[string][]simnode.Spec{
		"w1": {{Prefix: "w1-a100", Count: 2, GPUs: 8}},
		"w2": {{Prefix: "w2-a100", Count: 1, GPUs: 8}, {Prefix: "w2-h100", Count: 1, GPUs: 4, GPUType: "H100-SXM5-80GB", GPUMemoryMi: 81920}},
	}, testOptions)
	r.manager.Queue(t, "team-a", 8, nil)
	r.manager.Queue(t, "team-b", 8, nil)
	r.waitReady(t, map[string]int32{"w1": 16, "w2": 12})

	t.Run("a bad kubeconfig is refused naming the cluster", func(t *testing.T) {
		r.register(t, "broken", "this is not a kubeconfig")
		r.waitCondition(t, "broken", multicluster.ReasonBadKubeconfig, "worker cluster broken")
		wc := &v1alpha1.WorkerCluster{ObjectMeta: metav1.ObjectMeta{Name: "nosecret"}, Spec: v1alpha1.WorkerClusterSpec{
			KubeconfigSecret: v1alpha1.SecretKey{Namespace: "allot-system", Name: "absent"}}}
		if _, err := r.manager.Allot.AllotV1alpha1().WorkerClusters().Create(r.manager.Ctx, wc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.waitCondition(t, "nosecret", multicluster.ReasonSecretMissing, "Secret allot-system/absent")
		for _, n := range []string{"broken", "nosecret"} {
			if err := r.manager.Allot.AllotV1alpha1().WorkerClusters().Delete(r.manager.Ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("to the cluster with the GPU model", func(t *testing.T) {
		j := job("h100", "team-a", 1, 2, nil)
		j.Spec.Template.Annotations = map[string]string{v1alpha1.AnnotationGPUTypes: "H100-SXM5-80GB", simnode.AnnotationDuration: "4s"}
		// A TTL of 0 stays the manager's: a copy removed the moment it ends would leave the
		// manager never knowing it ran.
		j.Spec.TTLSecondsAfterFinished = ptr.To(int32(0))
		r.submit(t, j)
		cluster, nodes := r.runningIn(t, "h100", 1)
		if cluster != "w2" || !strings.HasPrefix(nodes[0], "w2-h100") {
			t.Fatalf("an H100 job went to %s, %v; the only H100s are w2's", cluster, nodes)
		}
		r.manager.WaitFor(t, "the worker's Complete status on the manager's Job, then the Job gone by its TTL", func() (bool, string) {
			j, err := r.manager.Client.BatchV1().Jobs("team").Get(r.manager.Ctx, "h100", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			if jobComplete(j) && j.Status.Succeeded == 1 {
				return false, "complete; its TTL not yet applied"
			}
			return false, fmt.Sprintf("succeeded %d, conditions %v, waiting %q", j.Status.Succeeded, j.Status.Conditions, j.Annotations[multicluster.AnnotationWaiting])
		})
		r.manager.WaitFor(t, "the copy removed with it", func() (bool, string) {
			n := r.copies(t, "h100")
			return n == 0, fmt.Sprintf("%d copies", n)
		})
	})

	t.Run("a queue that does not admit the Job's namespace", func(t *testing.T) {
		r.manager.Queue(t, "closed", 4, map[string]any{"namespaces": []any{"elsewhere"}})
		r.submit(t, job("wrong-queue", "closed", 1, 1, nil))
		r.manager.WaitFor(t, "wrong-queue waiting on the manager, naming the label", func() (bool, string) {
			j := r.managerJob(t, "wrong-queue")
			w := j.Annotations[multicluster.AnnotationWaiting]
			return j.Annotations[multicluster.AnnotationCluster] == "" && strings.Contains(w, v1alpha1.LabelQueue) && strings.Contains(w, "elsewhere"), w
		})
		if n := r.copies(t, "wrong-queue"); n != 0 {
			t.Fatalf("wrong-queue has %d copies", n)
		}
		r.remove(t, "wrong-queue")
	})

	t.Run("to the cluster with 8 GPUs free on one node, not 8 scattered", func(t *testing.T) {
		// w1's own admin runs two pods of a queue of its own, one on each node: w1 has 8
		// GPUs free, 4 on each node; w2 has 8 free on one node (and 4 H100s).
		w1 := r.workers["w1"]
		w1.Queue(t, "local", 0, nil)
		for i, n := range []string{"w1-a100-1", "w1-a100-2"} {
			p := kubetest.PodSpec{Name: fmt.Sprintf("local-%d", i), Queue: "local", GPUs: 4}.Pod()
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": n}
			if _, err := w1.Client.CoreV1().Pods("default").Create(w1.Ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		w1.WaitFor(t, "w1's own pods running", func() (bool, string) {
			n := w1.Count(t, "default", kubetest.Running)
			return n == 2, fmt.Sprintf("%d running", n)
		})
		r.submit(t, job("eight", "team-a", 1, 8, nil))
		cluster, nodes := r.runningIn(t, "eight", 1)
		if cluster != "w2" || nodes[0] != "w2-a100-1" {
			t.Fatalf("an 8-GPU pod went to %s %v; only w2-a100-1 has 8 free on one node", cluster, nodes)
		}
		r.remove(t, "eight")
	})

	t.Run("a gang whole on one worker, or waiting with each cluster's obstacle", func(t *testing.T) {
		// Free now: w1 4 + 4 (its own pods hold the rest), w2 8 + 4. Three pods of 4 fit
		// only on w2; four fit nowhere whole, though five would fit across both.
		r.submit(t, job("three", "team-a", 3, 4, nil))
		cluster, nodes := r.runningIn(t, "three", 3)
		if cluster != "w2" {
			t.Fatalf("a gang of 3 × 4 GPUs went to %s (%v); only w2 holds it whole", cluster, nodes)
		}
		r.remove(t, "three")
		r.submit(t, job("four", "team-b", 4, 4, nil))
		r.manager.WaitFor(t, "the gang of 4 waiting on the manager with both clusters' reasons", func() (bool, string) {
			j := r.managerJob(t, "four")
			w := j.Annotations[multicluster.AnnotationWaiting]
			return j.Annotations[multicluster.AnnotationCluster] == "" && strings.Contains(w, "w1: ") && strings.Contains(w, "w2: "), w
		})
		r.remove(t, "four")
		if err := w1Pods(r).DeleteCollection(r.manager.Ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a global quota honoured and reclaimed across clusters", func(t *testing.T) {
		// team-a borrows every GPU of both clusters (28, over its quota of 8); team-b's
		// 8-GPU job then gets its quota back in one cluster, by that worker's own reclaim
		// under the quotas the manager keeps there.
		for i := range 7 {
			r.submit(t, job(fmt.Sprintf("a-%d", i), "team-a", 1, 4, nil))
		}
		r.manager.WaitFor(t, "team-a's 7 jobs running across both clusters", func() (bool, string) {
			return r.running(t, "a-") == 7, fmt.Sprintf("%d running", r.running(t, "a-"))
		})
		r.submit(t, job("b", "team-b", 1, 8, nil))
		cluster, _ := r.runningIn(t, "b", 1)
		t.Logf("team-b's job runs on %s", cluster)
		evs, err := r.workers[cluster].Client.CoreV1().Events("team").List(r.manager.Ctx, metav1.ListOptions{FieldSelector: "reason=Evicted"})
		if err != nil {
			t.Fatal(err)
		}
		evicted := 0
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "team-b") {
				evicted++
			}
		}
		if evicted == 0 {
			t.Fatalf("team-b runs on %s with no reclaim there", cluster)
		}
		// team-a's quota is global: its local quota in the cluster team-b took is what its
		// work elsewhere leaves of 8, that is none.
		q, err := r.workers[cluster].Allot.AllotV1alpha1().Queues().Get(r.manager.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if q.Spec.GPU.Quota != 0 || q.Labels[multicluster.LabelManagedBy] != "allot-manager" {
			t.Fatalf("team-a on %s: quota %d, labels %v; want 0, kept by the manager", cluster, q.Spec.GPU.Quota, q.Labels)
		}
		names := []string{"b"}
		for i := range 7 {
			names = append(names, fmt.Sprintf("a-%d", i))
		}
		r.remove(t, names...)
	})

	t.Run("a global limit honoured across clusters", func(t *testing.T) {
		q, err := r.manager.Allot.AllotV1alpha1().Queues().Get(r.manager.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eight := int32(8)
		q.Spec.GPU.Limit = &eight
		if _, err := r.manager.Allot.AllotV1alpha1().Queues().Update(r.manager.Ctx, q, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.submit(t, job("first", "team-a", 1, 8, nil))
		cluster, _ := r.runningIn(t, "first", 1)
		r.submit(t, job("second", "team-a", 1, 4, nil))
		r.manager.WaitFor(t, "second waiting on the manager at team-a's limit, with room on both clusters", func() (bool, string) {
			j := r.managerJob(t, "second")
			w := j.Annotations[multicluster.AnnotationWaiting]
			return j.Annotations[multicluster.AnnotationCluster] == "" && strings.Count(w, "limit") == 2, w
		})
		// Each worker's limit is what the global one leaves after the other's use.
		for c, want := range map[string]int32{cluster: 8, other(cluster): 0} {
			wq, err := r.workers[c].Allot.AllotV1alpha1().Queues().Get(r.manager.Ctx, "team-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if wq.Spec.GPU.Limit == nil || *wq.Spec.GPU.Limit != want {
				t.Fatalf("team-a's limit on %s: %v, want %d", c, wq.Spec.GPU.Limit, want)
			}
		}
		r.remove(t, "first", "second")
		q, _ = r.manager.Allot.AllotV1alpha1().Queues().Get(r.manager.Ctx, "team-a", metav1.GetOptions{})
		q.Spec.GPU.Limit = nil
		if _, err := r.manager.Allot.AllotV1alpha1().Queues().Update(r.manager.Ctx, q, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a worker's own change to a kept queue is reported, not overwritten", func(t *testing.T) {
		w2 := r.workers["w2"]
		q, err := w2.Allot.AllotV1alpha1().Queues().Get(w2.Ctx, "team-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q.Spec.Priority = 7
		if _, err := w2.Allot.AllotV1alpha1().Queues().Update(w2.Ctx, q, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.manager.WaitFor(t, "a QueueConflict Event on the manager's team-b", func() (bool, string) {
			ev := strings.Join(r.manager.Events(t, "", "team-b"), "\n")
			return strings.Contains(ev, "QueueConflict") && strings.Contains(ev, "w2"), ev
		})
		r.submit(t, job("b-conflict", "team-b", 1, 1, nil))
		cluster, _ := r.runningIn(t, "b-conflict", 1)
		if cluster != "w1" {
			t.Fatalf("team-b's job went to %s, whose team-b queue is in conflict", cluster)
		}
		got, _ := w2.Allot.AllotV1alpha1().Queues().Get(w2.Ctx, "team-b", metav1.GetOptions{})
		if got.Spec.Priority != 7 {
			t.Fatalf("the manager overwrote w2's change: priority %d", got.Spec.Priority)
		}
		r.remove(t, "b-conflict")
		if err := w2.Allot.AllotV1alpha1().Queues().Delete(w2.Ctx, "team-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a worker lost: its job placed again, never running twice", func(t *testing.T) {
		r.submit(t, job("moved", "team-a", 1, 2, nil))
		r.submit(t, job("stays", "team-a", 1, 2, map[string]string{multicluster.AnnotationRedispatch: "never"}))
		from, _ := r.runningIn(t, "moved", 1)
		if c, _ := r.runningIn(t, "stays", 1); c != from {
			// Both are small and the manager packs them; if not, the test still holds for "moved".
			t.Logf("stays runs on %s, moved on %s", c, from)
		}
		watch := r.watchTwice(t, "moved")
		r.proxies[from].setCut(true)
		r.manager.WaitFor(t, "moved taken back from "+from, func() (bool, string) {
			c := r.managerJob(t, "moved").Annotations[multicluster.AnnotationCluster]
			return c != from, "on " + c
		})
		to, _ := r.runningIn(t, "moved", 1)
		if to == from {
			t.Fatalf("moved still on %s", to)
		}
		ev := strings.Join(r.manager.Events(t, "team", "moved"), "\n")
		if !strings.Contains(ev, "WorkerLost") {
			t.Fatalf("no WorkerLost Event on moved:\n%s", ev)
		}
		if c := r.managerJob(t, "stays").Annotations[multicluster.AnnotationCluster]; c == from {
			w := r.managerJob(t, "stays").Annotations[multicluster.AnnotationWaiting]
			if !strings.Contains(w, "not dispatched again") {
				t.Fatalf("stays (redispatch: never) on lost %s says %q", from, w)
			}
		}
		r.proxies[from].setCut(false)
		r.manager.WaitFor(t, "moved's old copy on "+from+" deleted once it answers", func() (bool, string) {
			js, err := r.workers[from].Client.BatchV1().Jobs("team").List(r.manager.Ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, j := range js.Items {
				if j.Name == "moved" && j.DeletionTimestamp == nil {
					return false, "still there"
				}
			}
			return true, ""
		})
		if both := watch(); both != "" {
			t.Fatal(both)
		}
		r.remove(t, "moved", "stays")
	})

	t.Run("a manager restart loses nothing and dispatches nothing twice", func(t *testing.T) {
		r.submit(t, job("before", "team-a", 1, 2, nil))
		c, _ := r.runningIn(t, "before", 1)
		uid := podUID(t, r.workers[c], "before")
		r.halt()
		r.submit(t, job("during", "team-b", 1, 2, nil))
		r.start(t)
		r.runningIn(t, "during", 1)
		r.runningIn(t, "before", 1)
		if now := podUID(t, r.workers[c], "before"); now != uid {
			t.Fatalf("before's pod was replaced across the manager's restart: %s, then %s", uid, now)
		}
		for _, n := range []string{"before", "during"} {
			if c := r.copies(t, n); c != 1 {
				t.Fatalf("%s has %d copies across the workers", n, c)
			}
		}
		r.remove(t, "before", "during")
	})
}

func w1Pods(r *rig) interface {
	DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, list metav1.ListOptions) error
} {
	return r.workers["w1"].Client.CoreV1().Pods("default")
}

func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// waitReady waits until each worker is Ready with its GPUs counted.
func (r *rig) waitReady(t *testing.T, gpus map[string]int32) {
	t.Helper()
	r.manager.WaitFor(t, "the workers ready", func() (bool, string) {
		var notes []string
		ok := true
		for n, want := range gpus {
			wc, err := r.manager.Allot.AllotV1alpha1().WorkerClusters().Get(r.manager.Ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ready := len(wc.Status.Conditions) > 0 && wc.Status.Conditions[0].Status == metav1.ConditionTrue
			notes = append(notes, fmt.Sprintf("%s ready %v gpus %d", n, ready, wc.Status.GPUs))
			ok = ok && ready && wc.Status.GPUs == want
		}
		return ok, strings.Join(notes, "; ")
	})
}

// waitCondition waits for a WorkerCluster's Ready condition with that reason and a message
// holding what.
func (r *rig) waitCondition(t *testing.T, name, reason, what string) {
	t.Helper()
	r.manager.WaitFor(t, name+" refused: "+reason, func() (bool, string) {
		wc, err := r.manager.Allot.AllotV1alpha1().WorkerClusters().Get(r.manager.Ctx, name, metav1.GetOptions{})
		if err != nil || len(wc.Status.Conditions) == 0 {
			return false, fmt.Sprint(err)
		}
		c := wc.Status.Conditions[0]
		return c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, what), c.Reason + ": " + c.Message
	})
}

// running counts the manager's Jobs named prefix… running on any worker.
func (r *rig) running(t *testing.T, prefix string) int {
	n := 0
	for _, w := range r.workers {
		for _, p := range w.Pods(t, "team") {
			if strings.HasPrefix(p.Labels["job-name"], prefix) && kubetest.Running(p) && p.DeletionTimestamp == nil {
				n++
			}
		}
	}
	return n
}

// copies counts the workers' copies of a Job.
func (r *rig) copies(t *testing.T, name string) int {
	n := 0
	for _, w := range r.workers {
		js, err := w.Client.BatchV1().Jobs("team").List(r.manager.Ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js.Items {
			if j.Name == name && j.DeletionTimestamp == nil {
				n++
			}
		}
	}
	return n
}

// watchTwice samples every 100 ms which workers run a pod of the Job (read directly on each
// worker, not through the manager); the returned function stops it and says whether it
// ever ran on two at once.
func (r *rig) watchTwice(t *testing.T, name string) func() string {
	stop := make(chan struct{})
	var mu sync.Mutex
	var both string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var in []string
			for c, w := range r.workers {
				ps, err := w.Client.CoreV1().Pods("team").List(r.manager.Ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
				if err != nil {
					continue
				}
				for _, p := range ps.Items {
					if kubetest.Running(&p) {
						in = append(in, c+"/"+p.Name)
					}
				}
			}
			if len(in) > 1 {
				mu.Lock()
				both = fmt.Sprintf("%s ran in two places at once at %s: %v", name, time.Now().Format(time.RFC3339Nano), in)
				mu.Unlock()
			}
		}
	}()
	return func() string {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return both
	}
}

func other(c string) string {
	if c == "w1" {
		return "w2"
	}
	return "w1"
}

// podUID is the UID of the Job's running pod on a worker.
func podUID(t *testing.T, w *kubetest.Env, job string) string {
	t.Helper()
	for _, p := range w.Pods(t, "team") {
		if p.Labels["job-name"] == job && kubetest.Running(p) {
			return string(p.UID)
		}
	}
	t.Fatalf("no running pod of %s", job)
	return ""
}
