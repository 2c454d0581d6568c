package inspect

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestNotebookStatefulSets: a notebook made as a StatefulSet of one is an interactive
// workload while it runs, is still listed once scaled to zero (suspended), and carries what
// the idle controller wrote on it: since when its GPUs are idle, why it was stopped.
func TestNotebookStatefulSets(t *testing.T) {
	labels := map[string]string{v1alpha1.LabelQueue: "team-a"}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}}
	one, zero := int32(1), int32(0)
	running := &appsv1.StatefulSet{ObjectMeta: objectMeta("nb-run", nil, labels), Spec: appsv1.StatefulSetSpec{Replicas: &one, Template: tmpl}}
	running.UID = types.UID("StatefulSet-nb-run")
	running.Annotations = map[string]string{AnnotationIdleSince: "2026-01-01T10:00:00Z"}
	stopped := &appsv1.StatefulSet{ObjectMeta: objectMeta("nb-stopped", nil, labels), Spec: appsv1.StatefulSetSpec{Replicas: &zero, Template: tmpl}}
	stopped.Annotations = map[string]string{AnnotationSuspendedReplicas: "1",
		AnnotationIdleSuspended: `{"at":"2026-01-01T12:00:00Z","idleFor":"2h0m0s","threshold":5,"queue":"team-a","class":"interactive"}`}
	pod := &corev1.Pod{ObjectMeta: objectMeta("nb-run-0", ctrl("StatefulSet", "nb-run"),
		map[string]string{v1alpha1.LabelQueue: "team-a", v1alpha1.LabelClass: v1alpha1.ClassInteractive}),
		Spec: corev1.PodSpec{NodeName: "dgx-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	ws := BuildWorkloads(Objects{Pods: []*corev1.Pod{pod}, StatefulSets: []*appsv1.StatefulSet{running, stopped}})
	if len(ws) != 2 {
		t.Fatalf("%d workloads, want both StatefulSets: %+v", len(ws), ws)
	}
	run, stop := ws[0], ws[1]
	if run.Name != "nb-run" || run.Kind != "StatefulSet" || run.Type != "interactive" || run.Status != "Running" ||
		run.IdleSince == nil || run.IdleFor(time.Date(2026, 1, 1, 11, 30, 0, 0, time.UTC)) != 90*time.Minute {
		t.Fatalf("running notebook %+v", run)
	}
	if stop.Name != "nb-stopped" || stop.Status != "Suspended" || stop.IdleSuspended == nil ||
		!strings.HasPrefix(stop.IdleSuspended.Sentence(), "suspended after 2h idle (GPU utilisation under 5%, queue team-a's idleTimeout)") {
		t.Fatalf("suspended notebook %+v %+v", stop, stop.IdleSuspended)
	}
	// A mark edited by hand into something else is left out, not trusted half-way.
	stopped.Annotations[AnnotationIdleSuspended] = "yes"
	if ws := BuildWorkloads(Objects{StatefulSets: []*appsv1.StatefulSet{stopped}}); ws[0].IdleSuspended != nil {
		t.Fatalf("a mark that does not parse was read: %+v", ws[0].IdleSuspended)
	}
}
