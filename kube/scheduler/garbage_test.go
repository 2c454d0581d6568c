package scheduler

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
)

// Garbage written where many hands write, on a real API server and past the admission
// webhook (not installed here, as an admin's kubectl or an old object would be): a node's
// GPU labels and annotations, pods' sharing annotations and class label, and a Queue the
// schema accepts (two queues each the other's parent), a PodGroup of two billion pods and a
// hand-written gang size. Each bad object is reported, naming the field, and the
// scheduler goes on scheduling everyone else; the garbled node is trusted no further than
// its nvidia.com/gpu capacity, by the scheduler and by what the CLI and the dashboard show.
func TestGarbageIsReportedAndSchedulingGoesOn(t *testing.T) {
	e := newEnv(t, 2, 4)
	e.queue(t, "q", 8)
	e.Queue(t, "loop-a", 1, map[string]any{"parent": "loop-b"})
	e.Queue(t, "loop-b", 1, map[string]any{"parent": "loop-a"})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]string{v1alpha1.LabelGPUMemory: "99999999999999999999"},
		"annotations": map[string]string{
			v1alpha1.AnnotationGPUUUIDs:       strings.Repeat("GPU-x,", 16),
			v1alpha1.AnnotationGPUUtilization: "{{{",
			v1alpha1.AnnotationOccupancy:      "not json",
		}}})
	if _, err := e.client.CoreV1().Nodes().Patch(e.ctx, "dgx-2", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "bad-share", Queue: "q", Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: "banana"}})
	e.MustPod(t, kubetest.PodSpec{Name: "bad-class", Queue: "q", GPUs: 1, Labels: map[string]string{v1alpha1.LabelClass: "batch"}})
	e.pod(t, "in-loop", "loop-a", 1, nil)
	// A PodGroup the schema accepts (minMember ≥ 1, no upper end) asking for two billion
	// pods, and a pod whose gang size was written by hand.
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "huge", "namespace": "default"}, "spec": map[string]any{"minMember": int64(2147483647), "queue": "q"}}}
	if _, err := e.dyn.Resource(podGroupsGVR).Namespace("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod(t, "in-huge", "q", 1, map[string]string{LabelPodGroup: "huge"})
	// A grace period of the right form but past what a duration holds is refused by the
	// API server: stored, it would not decode, and the typed PodGroup informer would
	// stall for every gang.
	overflow := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "forever", "namespace": "default"}, "spec": map[string]any{"minMember": int64(1), "queue": "q", "staleGracePeriod": "100000000h"}}}
	if _, err := e.dyn.Resource(podGroupsGVR).Namespace("default").Create(e.ctx, overflow, metav1.CreateOptions{}); err == nil {
		t.Fatal("a PodGroup with staleGracePeriod 100000000h was stored")
	}
	e.MustPod(t, kubetest.PodSpec{Name: "bad-min", Queue: "q", GPUs: 1,
		Labels: map[string]string{LabelPodGroup: "by-hand"}, Annotations: map[string]string{v1alpha1.AnnotationMinMember: "lots"}})
	// A pod whose DRA claim is made from a template no one has made a claim of: bound, it
	// could never start.
	claim := kubetest.PodSpec{Name: "with-claim", Queue: "q"}.Pod()
	template := "one-gpu"
	claim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template}}
	if _, err := e.client.CoreV1().Pods("default").Create(e.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"good-1", "good-2", "good-3", "good-4", "good-5", "good-6", "good-7", "good-8", "good-9"} {
		e.pod(t, name, "q", 1, nil)
	}
	defer e.startScheduler(t)()

	// Everyone else is scheduled: 8 GPUs, 4 per node, the ninth waits.
	e.waitFor(t, "8 good pods bound, 4 on each node", func() (bool, string) {
		on := map[string]int{}
		for name, p := range e.pods(t) {
			if strings.HasPrefix(name, "good-") && p.Spec.NodeName != "" {
				on[p.Spec.NodeName]++
			}
		}
		return on["dgx-1"] == 4 && on["dgx-2"] == 4, fmt.Sprint(on, " ", reasons(e.pods(t)))
	})
	reason := func(name string) string {
		p := e.pods(t)[name]
		if p.Spec.NodeName != "" {
			t.Fatalf("%s was bound to %s", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return c.Message
			}
		}
		return ""
	}
	for name, words := range map[string][]string{
		"good-9":     {"queue q is at its fair share 8/8 GPUs"},
		"bad-share":  {"pod default/bad-share", "allot.dev/gpu-fraction", `"banana" is not allowed`},
		"bad-class":  {"label allot.dev/class", `unknown class "batch"`, "train, interactive, inference"},
		"in-loop":    {"queue loop-a is in a cycle of parents (spec.parent)"},
		"in-huge":    {"PodGroup default/huge: spec.minMember: 2147483647 is not allowed", "from 1 to 100000"},
		"bad-min":    {"pod default/bad-min: annotation allot.dev/min-member", `"lots" is not allowed`},
		"with-claim": {"pod default/with-claim: spec.resourceClaims gpu: waiting for the resource claim controller to make its ResourceClaim from template one-gpu"},
	} {
		e.waitFor(t, name+" waits with its reason", func() (bool, string) {
			m := reason(name)
			for _, w := range words {
				if !strings.Contains(m, w) {
					return false, m
				}
			}
			return true, ""
		})
	}
	// What `allot top nodes` and the dashboard read of the same objects: the garbled node
	// with its 4 devices, each held by one good pod, utilisation unknown rather than wrong.
	nodes, err := inspect.Nodes(e.ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name != "dgx-2" {
			continue
		}
		if len(n.GPUs) != 4 || n.Allocated != 4 || n.MemoryMi != 0 {
			t.Fatalf("dgx-2 shown with %d GPUs, %v allocated, %d MiB each", len(n.GPUs), n.Allocated, n.MemoryMi)
		}
		for _, g := range n.GPUs {
			if g.Utilization != nil {
				t.Fatalf("GPU %d shown %d%% busy from a garbled report", g.Index, *g.Utilization)
			}
		}
	}
	// The node is reported, field by field, as events a person sees with kubectl.
	e.waitFor(t, "events on dgx-2 naming each bad field", func() (bool, string) {
		evs, err := e.client.CoreV1().Events("").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=dgx-2,reason=InvalidGPUInfo"})
		if err != nil {
			return false, err.Error()
		}
		var all []string
		for _, ev := range evs.Items {
			all = append(all, ev.Message)
		}
		text := strings.Join(all, "\n")
		for _, w := range []string{"label nvidia.com/gpu.memory", "annotation allot.dev/gpu-uuids names 17 devices", "annotation allot.dev/gpu-utilization", "annotation allot.dev/gpu-occupancy"} {
			if !strings.Contains(text, w) {
				return false, text
			}
		}
		return true, ""
	})
}

func reasons(pods map[string]*corev1.Pod) map[string]string {
	out := map[string]string{}
	for name, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				out[name] = c.Message
			}
		}
	}
	return out
}
