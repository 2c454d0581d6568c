package stack_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// TestTopologyLevels, on a real API server with Allot's whole stack: a Topology object
// names racks; a Job annotated (on the Job itself, not its pods) to require one rack runs
// all its pods in one, even though the rack with a busy GPU had more nodes free first; a
// second such Job waits, its pods saying which rack has the most free; a pod naming a level
// the Topology does not have is refused at admission, with the levels it has.
//
//	rack r1: dgx-1 [busy . . .]  dgx-2 [. . . .]
//	rack r2: dgx-3 [. . . .]     dgx-4 [. . . .]
func TestTopologyLevels(t *testing.T) {
	e := start(t, 4, 4)
	for i, rack := range []string{"r1", "r1", "r2", "r2"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"example.com/rack":%q}}}`, rack)
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, fmt.Sprintf("dgx-%d", i+1), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	manifest := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: allot.dev/v1alpha1
kind: Topology
metadata: {name: default}
spec:
  levels:
    - {name: rack, nodeLabel: example.com/rack}
    - {name: host, nodeLabel: kubernetes.io/hostname}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Apply(t, manifest)
	e.Queue(t, "team-a", 16, nil)
	busy := kubetest.PodSpec{Name: "busy", Queue: "team-a", GPUs: 1}.Pod()
	busy.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "dgx-1"}
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, busy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "busy running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["busy"]), "" })

	job := func(name string) {
		eight := int32(8)
		tmpl := kubetest.PodSpec{GPUs: 1}.Pod()
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"},
			Annotations: map[string]string{v1alpha1.AnnotationTopologyRequired: "rack"}},
			Spec: batchv1.JobSpec{Parallelism: &eight, Completions: &eight, Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
		if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	of := func(job string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool { return p.Labels["job-name"] == job }
	}
	job("ddp")
	e.WaitFor(t, "ddp's 8 pods running in one rack", func() (bool, string) {
		nodes := map[string]int{}
		for _, p := range e.Pods(t, "default") {
			if of("ddp")(p) && kubetest.Running(p) {
				nodes[p.Spec.NodeName]++
			}
		}
		return nodes["dgx-3"]+nodes["dgx-4"] == 8, fmt.Sprintf("on %v", nodes)
	})

	job("second")
	e.WaitFor(t, "second waits, naming the rack with the most free", func() (bool, string) {
		var msgs []string
		for _, p := range e.Pods(t, "default") {
			if !of("second")(p) {
				continue
			}
			if p.Spec.NodeName != "" {
				return false, p.Name + " was bound"
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					msgs = append(msgs, c.Message)
				}
			}
		}
		want := "gang of 8 pods × 1 GPU must start together within one rack (allot.dev/topology-required); the most free in one rack is 7 GPUs (r1)"
		return len(msgs) == 8 && strings.Contains(msgs[0], want), fmt.Sprintf("%d pods say %q", len(msgs), msgs)
	})

	bad := kubetest.PodSpec{Name: "row", Queue: "team-a", GPUs: 1, Annotations: map[string]string{v1alpha1.AnnotationTopologyRequired: "row"}}
	if err := e.CreatePod(bad); err == nil || !strings.Contains(err.Error(), `allot.dev/topology-required: "row" is not a level of Topology default; levels: rack, host`) {
		t.Fatalf("a pod naming an unknown level: %v", err)
	}
}
