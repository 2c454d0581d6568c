package inspect

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
)

func ctrl(kind, name string) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{Kind: kind, Name: name, UID: types.UID(kind + "-" + name), Controller: &yes}}
}

func objectMeta(name string, owners []metav1.OwnerReference, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(name), OwnerReferences: owners, Labels: labels}
}

// TestWorkloadsByTopOwner: a JobSet's pods, reached through its Jobs, are one workload
// named after the JobSet; bare pods of one PodGroup are one; a bare pod is its own; a Job
// whose pods the webhook refused shows the refusal, not a gang's count.
func TestWorkloadsByTopOwner(t *testing.T) {
	queue := map[string]string{v1alpha1.LabelQueue: "team-d"}
	grouped := map[string]string{v1alpha1.LabelQueue: "team-b", v1alpha1.LabelPodGroup: "trio"}
	allot := corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}}
	jobs := []*batchv1.Job{
		{ObjectMeta: objectMeta("llm-workers-0", ctrl("JobSet", "llm"), queue), Spec: batchv1.JobSpec{Template: allot}},
		{ObjectMeta: objectMeta("llm-workers-1", ctrl("JobSet", "llm"), queue), Spec: batchv1.JobSpec{Template: allot}},
		{ObjectMeta: objectMeta("refused", nil, queue), Spec: batchv1.JobSpec{Template: allot}},
	}
	for _, j := range jobs[:2] {
		j.UID = types.UID("Job-" + j.Name)
	}
	pods := []*corev1.Pod{
		{ObjectMeta: objectMeta("llm-workers-0-x", ctrl("Job", "llm-workers-0"), queue)},
		{ObjectMeta: objectMeta("llm-workers-1-y", ctrl("Job", "llm-workers-1"), queue)},
		{ObjectMeta: objectMeta("trio-0", nil, grouped)},
		{ObjectMeta: objectMeta("trio-1", nil, grouped)},
		{ObjectMeta: objectMeta("notebook", nil, map[string]string{v1alpha1.LabelQueue: "team-a", v1alpha1.LabelClass: "interactive"})},
	}
	ws := BuildWorkloads(Objects{Jobs: jobs, Pods: pods,
		Refusals: map[types.UID]Refusal{"refused": {Message: "gang too large", Time: time.Now()}}})
	var got []string
	for _, w := range ws {
		got = append(got, w.Ref()+" "+w.Type+" "+w.Queue+" "+w.Reason)
	}
	want := []string{"JobSet/llm distributed team-d ", "Pod/notebook interactive team-a ", "Job/refused train team-d pods refused: gang too large",
		"PodGroup/trio distributed team-b "}
	if !slices.Equal(got, want) {
		t.Fatalf("workloads\n%q\nwant\n%q", got, want)
	}
	if llm := ws[0]; len(llm.Pods) != 2 || len(llm.Owners) != 2 {
		t.Fatalf("llm has %d pods through %d Jobs, want 2 and 2", len(llm.Pods), len(llm.Owners))
	}
}

// TestWorkloadEventsAreItsOwn: llm's story holds its pods' events and those of a pod of it
// that is gone (named by its ReplicaSet's "Created pod"), never llm-pretrain's.
func TestWorkloadEventsAreItsOwn(t *testing.T) {
	w := Workload{Name: "llm", Namespace: "ml", Kind: "Deployment", UID: "d", Owners: []Ref{{Kind: "ReplicaSet", Name: "llm-5f", UID: "rs"}},
		Pods: []Pod{{Name: "llm-5f-a", UID: "pa"}}}
	ev := func(kind, name string, uid types.UID, reason, msg string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ml"}, Reason: reason, Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name, UID: uid}}
	}
	events := []*corev1.Event{
		ev("ReplicaSet", "llm-5f", "rs", "SuccessfulCreate", "Created pod: llm-5f-gone"),
		ev("Pod", "llm-5f-a", "pa", "Scheduled", "mine"),
		ev("Pod", "llm-5f-gone", "pg", "Evicted", "mine, gone"),
		ev("Pod", "llm-pretrain-0", "other", "Scheduled", "not mine"),
		ev("Job", "llm-pretrain", "j", "SuccessfulCreate", "Created pod: llm-pretrain-0"),
	}
	var got []string
	for _, e := range WorkloadEvents(events, &w) {
		got = append(got, e.Reason+" "+e.InvolvedObject.Name)
	}
	want := []string{"SuccessfulCreate llm-5f", "Scheduled llm-5f-a", "Evicted llm-5f-gone"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// A whole-GPU pod shows the devices the kubelet gave it once its node's agent recorded
// them, and Allot's preference, said as such, before; a shared pod shows its GPU as the
// scheduler bound it (its reservation's device).
func TestPodsShowTheDevicesTheyHave(t *testing.T) {
	q := map[string]string{v1alpha1.LabelQueue: "team-a"}
	pod := func(name, indices, devices, share string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: objectMeta(name, nil, q), Spec: corev1.PodSpec{NodeName: "dgx-1"}}
		p.Annotations = map[string]string{v1alpha1.AnnotationGPUs: indices}
		if devices != "" {
			p.Annotations[v1alpha1.AnnotationGPUDevices] = devices
		}
		if share != "" {
			p.Annotations[v1alpha1.AnnotationGPUShare] = share
		}
		return p
	}
	uuids := map[string][]string{"dgx-1": {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}}
	ws := BuildWorkloads(Objects{NodeUUIDs: uuids, Pods: []*corev1.Pod{
		pod("recorded", "0,1", "GPU-3,GPU-2", ""),
		pod("unrecorded", "1", "", ""),
		pod("half", "2", "", "500"),
	}})
	got := map[string]string{}
	for _, w := range ws {
		got[w.Name] = w.Pods[0].GPUs
	}
	want := map[string]string{"recorded": "2,3", "unrecorded": "1 (preferred)"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s shows GPUs %q, want %q", k, got[k], v)
		}
	}
	if !strings.HasPrefix(got["half"], "2 (") || strings.Contains(got["half"], "preferred") {
		t.Errorf("half shows GPUs %q, want GPU 2 with its share", got["half"])
	}
}

// A workload's progress is its owner's text, shown on one line: control characters (a
// terminal's escapes, new lines) become spaces and what is past 64 characters is cut.
func TestProgressIsShownAsText(t *testing.T) {
	for in, want := range map[string]string{
		"step 4500/10000":                 "step 4500/10000",
		"  45%\n":                         "45%",
		"\x1b[31mred\x1b[0m\nsecond line": " [31mred [0m second line",
		strings.Repeat("x", 70):           strings.Repeat("x", 64) + "…",
	} {
		if got := Progress(in); got != want {
			t.Errorf("Progress(%q) = %q, want %q", in, got, want)
		}
	}
}
