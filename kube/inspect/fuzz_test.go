package inspect

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// FuzzBuildNodes: what `allot top nodes` and the dashboard show of a node, whatever its
// GPU count, labels, utilisation report and its pods' placement annotations say: never a
// panic, at most 64 devices, each between idle and full, utilisation 0–100 or unknown.
func FuzzBuildNodes(f *testing.F) {
	f.Add("8", "81920", "10,20,30,40,50,60,70,80", "0,1", "", "3", "500")
	f.Add("-1", "x", "{{{", "", "", "", "")
	f.Add("1e12", "-5", "101", "7,7,7", "2000", "99", "-1")
	f.Fuzz(func(t *testing.T, gpus, memMi, util, idx1, share1, idx2, share2 string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{v1alpha1.LabelGPUMemory: memMi},
			Annotations: map[string]string{v1alpha1.AnnotationGPUUtilization: util}}}
		if q, err := resource.ParseQuantity(gpus); err == nil {
			n.Status.Allocatable = corev1.ResourceList{corev1.ResourceName(v1alpha1.GPUResource): q}
		}
		pod := func(name, idx, share string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
				Annotations: map[string]string{v1alpha1.AnnotationGPUs: idx, v1alpha1.AnnotationGPUShare: share}},
				Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		}
		out := BuildNodes([]*corev1.Node{n}, []*corev1.Pod{pod("a", idx1, share1), pod("b", idx2, share2)})
		for _, node := range out {
			if len(node.GPUs) > 64 || node.MemoryMi < 0 {
				t.Fatalf("%d GPUs, %d MiB", len(node.GPUs), node.MemoryMi)
			}
			for _, g := range node.GPUs {
				if g.Used < 0 || g.Used > 1 || g.FreeMi < 0 {
					t.Fatalf("GPU %d used %v, %d MiB free", g.Index, g.Used, g.FreeMi)
				}
				if u := g.Utilization; u != nil && (*u < 0 || *u > 100) {
					t.Fatalf("GPU %d at %d%%", g.Index, *u)
				}
			}
		}
	})
}
