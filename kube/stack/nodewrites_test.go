package stack_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// The GPUs' load changes every second (a training pod's busy share swings 30% ↔ 80%) on a
// node whose agent reports each second. The agent carries it on its own Lease: no write
// reaches the Node for it, where every Node watcher of the cluster would receive it. The
// test logs the Node writes it saw per minute, and those carrying load: 0 and 0 here; at
// c4b97c8, before this change, the same run (reading the load from the Node) logged 60 and
// 60, one per report.
func TestLoadIsNotWrittenToTheNode(t *testing.T) {
	e, _, _ := startWithAgents(t, 1, 2, "")
	e.Queue(t, "team-a", 2, nil)
	spec := kubetest.PodSpec{Name: "train", Queue: "team-a", GPUs: 1, Annotations: map[string]string{simnode.AnnotationUtilization: "30"}}
	e.MustPod(t, spec)
	e.WaitFor(t, "train running", func() (bool, string) {
		p := e.Pods(t, "default")["train"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase)
	})
	lease := func() string {
		l, err := e.Client.CoordinationV1().Leases(v1alpha1.SystemNamespace).Get(e.Ctx, v1alpha1.AgentLeaseName("dgx-1"), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return l.Annotations[v1alpha1.AnnotationGPUUtilization]
	}
	n, err := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.Client.CoreV1().Nodes().Watch(e.Ctx, metav1.ListOptions{FieldSelector: "metadata.name=dgx-1", ResourceVersion: n.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const window = 10 * time.Second
	seen := map[string]bool{}
	deadline := time.Now().Add(window)
	for i := 0; time.Now().Before(deadline); i++ {
		busy := []string{"30", "80"}[i%2]
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, simnode.AnnotationUtilization, busy)
		if _, err := e.Client.CoreV1().Pods("default").Patch(e.Ctx, "train", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		seen[lease()] = true
	}
	writes, loadWrites := 0, 0
	prev := n
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				continue
			}
			cur := ev.Object.(*corev1.Node)
			writes++
			for _, k := range []string{v1alpha1.AnnotationGPUUtilization, v1alpha1.AnnotationGPUMemoryUsed} {
				if cur.Annotations[k] != prev.Annotations[k] {
					loadWrites++
					break
				}
			}
			prev = cur
		case <-time.After(200 * time.Millisecond):
			done = true
		}
	}
	perMinute := func(n int) float64 { return float64(n) * float64(time.Minute) / float64(window) }
	t.Logf("node writes per minute: %.0f, of them carrying load: %.0f (agent interval 1 s, %s window); loads on the Lease: %d distinct",
		perMinute(writes), perMinute(loadWrites), window, len(seen))
	if loadWrites > 0 {
		t.Errorf("%d Node writes carried the GPUs' load in %s", loadWrites, window)
	}
	if len(seen) < 2 {
		t.Errorf("the Lease carried %d distinct loads while it swung: %v", len(seen), seen)
	}
}
