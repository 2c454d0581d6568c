package stack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	if s := events("ScaledDown"); len(s) != 1 || !strings.Contains(s[0], "scaled down to 2 pods (from 4, at least 1): reclaimed by queue team-b") {
		t.Errorf("ScaledDown Events on the Job: %q", s)
	} else {
		t.Logf("%s", s[0])
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
