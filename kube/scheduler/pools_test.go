package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// Quotas per node pool on the embedded cluster:
//
//	h100-1 [4 × H100]  pool h100     team-a: h100 2, a100 2
//	a100-1 [4 × A100]  pool a100     team-b: h100 2, a100 2
//
// team-b borrows the whole h100 pool and runs within its quota on a100; team-a's h100
// pods take their quota back in h100 alone, team-b's a100 pods untouched; a pod that
// lists "h100,a100" runs on a100 while h100 has no room for it; each queue's status shows
// each pool apart.
func TestQuotasPerNodePool(t *testing.T) {
	e := &env{Env: kubetest.StartNodes(t,
		simnode.Spec{Prefix: "h100", Count: 1, GPUs: 4, GPUType: "H100-80GB-HBM3", GPUMemoryMi: 81920, Labels: map[string]string{v1alpha1.LabelNodePool: "h100"}},
		simnode.Spec{Prefix: "a100", Count: 1, GPUs: 4, Labels: map[string]string{v1alpha1.LabelNodePool: "a100"}})}
	e.ctx, e.client, e.dyn, e.c = e.Ctx, e.Client, e.Dyn, e.Cluster
	defer e.startScheduler(t)()
	pools := map[string]any{"quota": 0, "pools": map[string]any{"h100": map[string]any{"quota": 2}, "a100": map[string]any{"quota": 2}}}
	e.Queue(t, "team-a", 0, map[string]any{"gpu": pools})
	e.Queue(t, "team-b", 0, map[string]any{"gpu": pools})
	podIn := func(name, queue, selector string, annotations map[string]string) {
		t.Helper()
		p := kubetest.PodSpec{Name: name, Queue: queue, GPUs: 1, Annotations: annotations}.Pod()
		if selector != "" {
			p.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: selector}
		}
		if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 4; i++ {
		podIn(fmt.Sprintf("b-h100-%d", i), "team-b", "h100", nil)
	}
	podIn("b-a100-0", "team-b", "a100", nil)
	podIn("b-a100-1", "team-b", "a100", nil)
	e.waitFor(t, "team-b holds all of h100 and its quota of a100", func() (bool, string) {
		n := e.count(t, running)
		return n == 6, fmt.Sprintf("%d running", n)
	})
	a100Before := map[string]string{}
	for name, p := range e.pods(t) {
		if strings.HasPrefix(name, "b-a100-") {
			a100Before[name] = string(p.UID)
		}
	}

	podIn("a-h100-0", "team-a", "h100", nil)
	podIn("a-h100-1", "team-a", "h100", nil)
	e.waitFor(t, "team-a's h100 pods run, reclaimed from team-b's h100 pods", func() (bool, string) {
		pods := e.pods(t)
		return running(pods["a-h100-0"]) && running(pods["a-h100-1"]), fmt.Sprintf("a-h100-0 on %q, a-h100-1 on %q", pods["a-h100-0"].Spec.NodeName, pods["a-h100-1"].Spec.NodeName)
	})
	pods := e.pods(t)
	for name, uid := range a100Before {
		if p := pods[name]; p == nil || string(p.UID) != uid || !running(p) || p.DeletionTimestamp != nil {
			t.Errorf("team-b's %s in pool a100 was touched by a reclaim in pool h100", name)
		}
	}
	for _, name := range []string{"a-h100-0", "a-h100-1"} {
		if n := pods[name].Spec.NodeName; n != "h100-1" {
			t.Errorf("%s runs on %s, not in pool h100", name, n)
		}
	}

	// h100 is full, each team at its quota of 2 there; a100 has 2 free GPUs.
	podIn("a-either", "team-a", "", map[string]string{v1alpha1.AnnotationNodePools: "h100,a100"})
	e.waitFor(t, "a pod listing h100 then a100 runs on a100", func() (bool, string) {
		p := e.pods(t)["a-either"]
		return running(p) && p.Spec.NodeName == "a100-1", fmt.Sprintf("on %q", p.Spec.NodeName)
	})
	noDoubleBooking(t, e.pods(t))

	e.waitFor(t, "each queue's status shows each pool apart", func() (bool, string) {
		var got []string
		ok := true
		for queue, want := range map[string]map[string]string{
			"team-a": {"pool.allot.dev/h100": "2", "pool.allot.dev/a100": "1", "nvidia.com/gpu": "0"},
			"team-b": {"pool.allot.dev/h100": "2", "pool.allot.dev/a100": "2", "nvidia.com/gpu": "0"},
		} {
			q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, queue, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for k, v := range want {
				have := q.Status.Allocated[corev1.ResourceName(k)]
				if have.String() != v {
					ok = false
				}
				got = append(got, fmt.Sprintf("%s %s=%s", queue, k, have.String()))
			}
		}
		return ok, strings.Join(got, ", ")
	})
}
