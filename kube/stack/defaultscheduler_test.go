package stack_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// TestDefaultSchedulerRunsOtherPodsButNotAllotsGPUs: the embedded cluster is complete. A
// pod without schedulerName: allot is bound by the upstream kube-scheduler running beside
// Allot; and kube-scheduler does not hand out GPUs Allot holds, neither a whole one nor one
// that two half-GPU pods share (its reservation pod holds it).
func TestDefaultSchedulerRunsOtherPodsButNotAllotsGPUs(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	plain := func(name string, gpus int64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if gpus > 0 {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
		}
		return p
	}
	pods := e.Client.CoreV1().Pods("default")
	if _, err := pods.Create(e.Ctx, plain("web", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "kube-scheduler binds the plain pod", func() (bool, string) {
		p, err := pods.Get(e.Ctx, "web", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "dgx-1", fmt.Sprint(err)
	})

	// Allot takes both GPUs: one whole, one shared by two halves.
	e.MustPod(t, kubetest.PodSpec{Name: "whole", Queue: "team-a", GPUs: 1})
	e.MustPod(t, fraction("nb-1", "0.5"))
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "Allot's three pods running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 4, fmt.Sprintf("%d running", n)
	})
	if _, err := pods.Create(e.Ctx, plain("cuda", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "kube-scheduler finds no GPU for its pod", func() (bool, string) {
		p, err := pods.Get(e.Ctx, "cuda", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("kube-scheduler bound a GPU pod to %s while Allot holds both GPUs", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && strings.Contains(c.Message, "Insufficient nvidia.com/gpu") {
				return true, ""
			}
		}
		return false, "no Unschedulable condition yet"
	})
	// When Allot lets a GPU go, kube-scheduler's pod gets it.
	if err := pods.Delete(e.Ctx, "whole", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "kube-scheduler binds its GPU pod once Allot's whole GPU is free", func() (bool, string) {
		p, err := pods.Get(e.Ctx, "cuda", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "dgx-1", fmt.Sprint(err)
	})
}

// TestOtherSchedulersPodsBookNothingByAllotsAnnotations: a pod of kube-scheduler's, on a GPU
// node, carrying Allot's sharing annotations (a slice of 100% of each of two GPUs) that no
// webhook of Allot's checked, holds no GPU in Allot's books: Allot's own pods still get
// both GPUs.
func TestOtherSchedulersPodsBookNothingByAllotsAnnotations(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	squat := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "squat", Namespace: "default",
		Annotations: map[string]string{v1alpha1.AnnotationGPUCompute: "100", v1alpha1.AnnotationGPUCount: "2",
			v1alpha1.AnnotationGPUs: "0,1", v1alpha1.AnnotationGPUShare: "999", v1alpha1.AnnotationGPUShareCompute: "1000"}},
		Spec: corev1.PodSpec{NodeName: "dgx-1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, squat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "two", Queue: "team-a", GPUs: 2})
	e.WaitFor(t, "Allot's 2-GPU pod running beside the annotated pod", func() (bool, string) {
		p := e.Pods(t, "default")["two"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase, " ", waitingReason(p))
	})
}
