package scheduler

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// podGroup creates a PodGroup of minMember pods in queue.
func (e *env) podGroup(t *testing.T, name, queue string, minMember int64) {
	t.Helper()
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": map[string]any{"minMember": minMember, "queue": queue}}}
	if _, err := e.dyn.Resource(podGroupsGVR).Namespace("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A gang whose old pods are still terminating while its controller has made new ones: the
// old pods are not members any more, so the new ones start together once the old ones
// have left their GPUs, never one new pod beside the leaving ones.
//
//	dgx-1: [old-0][old-1][    ][    ]   old-0, old-1 deleted, still terminating
//	gang g (minMember 2): new-0 (2 GPUs), new-1 (2 GPUs)
//	→ both wait, saying for whom (the old pods take 8 s to stop); then both bind at once
func TestTerminatingPodsAreNotGangMembers(t *testing.T) {
	e := newEnv(t, 1, 4)
	e.queue(t, "q", 4)
	e.podGroup(t, "g", "q", 2)
	defer e.startScheduler(t)()
	for _, name := range []string{"old-0", "old-1"} {
		// Their containers take 8 s to stop: a checkpoint being saved.
		e.MustPod(t, kubetest.PodSpec{Name: name, Queue: "q", GPUs: 1, Labels: map[string]string{LabelPodGroup: "g"},
			Annotations: map[string]string{simnode.AnnotationStopAfter: "8s"}})
	}
	e.waitFor(t, "the old gang runs", func() (bool, string) {
		ps := e.pods(t)
		return running(ps["old-0"]) && running(ps["old-1"]), ""
	})
	for _, name := range []string{"old-0", "old-1"} {
		if err := e.client.CoreV1().Pods("default").Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"new-0", "new-1"} {
		e.pod(t, name, "q", 2, map[string]string{LabelPodGroup: "g"})
	}
	e.waitFor(t, "the new pods wait for the old ones to leave", func() (bool, string) {
		m := reasons(e.pods(t))["new-0"]
		return m == "placed on dgx-1, waiting for default/old-0 to leave it (terminating)" ||
			m == "placed on dgx-1, waiting for default/old-1 to leave it (terminating)", m
	})
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ps := e.pods(t)
		if ps["new-0"].Spec.NodeName != "" || ps["new-1"].Spec.NodeName != "" {
			t.Fatalf("a new pod was bound beside the leaving ones: new-0 on %q, new-1 on %q", ps["new-0"].Spec.NodeName, ps["new-1"].Spec.NodeName)
		}
	}
	// Once the old pods are gone, both new ones bind, and never one alone.
	e.waitFor(t, "the new gang runs whole", func() (bool, string) {
		ps := e.pods(t)
		a, b := ps["new-0"].Spec.NodeName != "", ps["new-1"].Spec.NodeName != ""
		if a != b {
			if _, old := ps["old-0"]; old {
				t.Fatalf("one new pod bound while the old ones still terminate")
			}
		}
		return a && b, fmt.Sprint(reasons(ps))
	})
}
