package scheduler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The scheduler's caches hold pods and nodes without the API server's record of who set
// which field: on a production cluster that record is a third of what they would hold
// (BenchmarkAdapterCycleProduction: 1,030 MiB with it, 699 MiB without), and nothing
// here reads it. The server keeps it.
//
//	dgx-1  8 GPUs     team-a  quota 8    train  1 GPU: bound
func TestCachesLeaveOutTheFieldRecord(t *testing.T) {
	e := newEnv(t, 1, 8)
	e.queue(t, "team-a", 8)
	e.pod(t, "train", "team-a", 1, nil)
	s, err := New(e.c.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e.waitFor(t, "train bound", func() (bool, string) {
		p := e.pods(t)["train"]
		return p.Spec.NodeName != "", fmt.Sprint(p.Status.Conditions)
	})
	served := e.pods(t)["train"]
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, "dgx-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(served.ManagedFields) == 0 || len(node.ManagedFields) == 0 {
		t.Fatalf("the API server records no managers (pod %d, node %d entries): nothing to leave out", len(served.ManagedFields), len(node.ManagedFields))
	}
	e.waitFor(t, "the bound pod in the scheduler's cache", func() (bool, string) {
		o, ok, _ := s.pods.GetStore().GetByKey("default/train")
		return ok && o.(*corev1.Pod).Spec.NodeName != "", fmt.Sprint(ok)
	})
	o, _, _ := s.pods.GetStore().GetByKey("default/train")
	if m := o.(*corev1.Pod).ManagedFields; m != nil {
		t.Errorf("the cached pod holds %d field record entries, want none", len(m))
	}
	o, _, _ = s.nodes.GetStore().GetByKey("dgx-1")
	if m := o.(*corev1.Node).ManagedFields; m != nil {
		t.Errorf("the cached node holds %d field record entries, want none", len(m))
	}
}
