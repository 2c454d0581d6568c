package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// A gang found running partly, one member deleted by hand (no controller makes it
// again): the other is stopped after the grace period, with an Event saying why, so that
// the gang's GPUs are not held by a gang that cannot run.
//
//	dgx-1: [g-0][g-1]   gang g (minMember 2); g-1 deleted
//	→ g-0 runs alone for the grace period (5 s), then is evicted: "gang default/g ran 1 of its 2 pods…"
func TestPartlyRunningGangIsStoppedAfterGrace(t *testing.T) {
	e := newEnv(t, 1, 2)
	e.queue(t, "q", 2)
	e.podGroup(t, "g", "q", 2)
	defer e.startScheduler(t)()
	for _, name := range []string{"g-0", "g-1"} {
		e.pod(t, name, "q", 1, map[string]string{LabelPodGroup: "g"})
	}
	e.waitFor(t, "the gang runs", func() (bool, string) {
		ps := e.pods(t)
		return running(ps["g-0"]) && running(ps["g-1"]), ""
	})
	zero := int64(0)
	if err := e.client.CoreV1().Pods("default").Delete(e.ctx, "g-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	e.waitFor(t, "g-0 stopped", func() (bool, string) {
		p, ok := e.pods(t)["g-0"]
		return !ok || p.DeletionTimestamp != nil, ""
	})
	if took := time.Since(deleted); took < 4*time.Second {
		t.Fatalf("g-0 was stopped %s after its partner went, before the grace period", took)
	}
	e.waitFor(t, "an Evicted event says why", func() (bool, string) {
		evs := e.Events(t, "default", "g-0")
		for _, m := range evs {
			if strings.Contains(m, "gang default/g ran 1 of its 2 pods for") && strings.Contains(m, "the rest were stopped so that it starts again whole") {
				return true, ""
			}
		}
		return false, strings.Join(evs, "\n")
	})
}

// A whole-gang eviction cut short: the scheduler wrote the Evicted Events of both members
// and died after evicting one. The next scheduler stops the other at once, without waiting
// out the grace period.
func TestGangEvictionCutShortIsFinished(t *testing.T) {
	e := newEnv(t, 1, 2)
	e.queue(t, "q", 2)
	e.podGroup(t, "g", "q", 2)
	stop := e.startScheduler(t)
	for _, name := range []string{"g-0", "g-1"} {
		e.pod(t, name, "q", 1, map[string]string{LabelPodGroup: "g"})
	}
	e.waitFor(t, "the gang runs", func() (bool, string) {
		ps := e.pods(t)
		return running(ps["g-0"]) && running(ps["g-1"]), ""
	})
	stop()
	// What the dead scheduler left: both Events, one pod gone.
	s, err := New(e.c.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"g-0", "g-1"} {
		if err := s.eventNow(e.ctx, e.pods(t)[name], corev1.EventTypeNormal, "Evicted", "reclaimed by queue other"); err != nil {
			t.Fatal(err)
		}
	}
	zero := int64(0)
	if err := e.client.CoreV1().Pods("default").Delete(e.ctx, "g-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	defer e.startScheduler(t)()
	e.waitFor(t, "g-1 stopped", func() (bool, string) {
		p, ok := e.pods(t)["g-1"]
		return !ok || p.DeletionTimestamp != nil, ""
	})
	if took := time.Since(restarted); took > 3*time.Second {
		t.Fatalf("g-1 stopped %s after the restart: the grace period was waited out", took)
	}
}

// A node dies under a gang: it goes NotReady with the unreachable taint, and its pod is
// deleted as the taint-eviction controller would. The gang's PodGroup gives it 8 s to be
// whole again (not the scheduler's 5 s). A replacement that tolerates every taint is not
// put on the dead node; with no room elsewhere it waits, and after the 8 s the survivor is
// stopped with an Event naming the member lost and its node, so that the owner restarts
// the gang whole.
//
//	dgx-1: [g-0 2 GPUs]   dgx-2: [g-1 2 GPUs] ✗ NotReady
//	→ g-1 deleted; g-1b (tolerates all) waits, never on dgx-2
//	→ at 8 s g-0 is evicted: "… (lost: g-1 on dgx-2) …"
func TestGangOnADeadNodeRestartsWhole(t *testing.T) {
	e := newEnv(t, 2, 2)
	e.queue(t, "q", 4)
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "g", "namespace": "default"},
		"spec":     map[string]any{"minMember": int64(2), "queue": "q", "staleGracePeriod": "8s"}}}
	if _, err := e.dyn.Resource(podGroupsGVR).Namespace("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer e.startScheduler(t)()
	for _, name := range []string{"g-0", "g-1"} {
		e.pod(t, name, "q", 2, map[string]string{LabelPodGroup: "g"})
	}
	e.waitFor(t, "the gang runs", func() (bool, string) {
		ps := e.pods(t)
		return running(ps["g-0"]) && running(ps["g-1"]), ""
	})
	dead := e.pods(t)["g-1"].Spec.NodeName
	survivor := "g-0"
	if e.pods(t)["g-0"].Spec.NodeName == dead {
		survivor = "g-1"
	}
	lost := map[string]string{"g-0": "g-1", "g-1": "g-0"}[survivor]
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, dead, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if node, err = e.client.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := e.client.CoreV1().Pods("default").Delete(e.ctx, lost, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	replacement := kubetest.PodSpec{Name: "g-1b", Queue: "q", GPUs: 2, Labels: map[string]string{LabelPodGroup: "g"}}.Pod()
	replacement.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	if _, err := e.client.CoreV1().Pods("default").Create(e.ctx, replacement, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, survivor+" stopped", func() (bool, string) {
		ps := e.pods(t)
		if n := ps["g-1b"].Spec.NodeName; n != "" {
			t.Fatalf("g-1b bound to %s, whose node is %s", n, map[bool]string{true: "NotReady", false: "full"}[n == dead])
		}
		p, ok := ps[survivor]
		return !ok || p.DeletionTimestamp != nil, ""
	})
	if took := time.Since(gone); took < 7*time.Second {
		t.Fatalf("%s was stopped %s after %s went, before the PodGroup's 8 s", survivor, took.Round(100*time.Millisecond), lost)
	}
	e.waitFor(t, "an Evicted event naming the lost member", func() (bool, string) {
		evs := e.Events(t, "default", survivor)
		for _, m := range evs {
			if strings.Contains(m, "gang default/g ran 1 of its 2 pods for") && strings.Contains(m, "(lost: "+lost+" on "+dead+")") {
				return true, ""
			}
		}
		return false, strings.Join(evs, "\n")
	})
}
