package stack_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
)

// The pod holding a shared GPU in the kubelet's books is Guaranteed and of the highest
// user priority (the kubelet evicts it last), and it stays while a fraction on its GPU is
// still terminating: nb-1 takes 4 s to stop (a checkpoint being saved), and until it is
// gone the reservation is not released, so the kubelet cannot hand its device to another
// pod under nb-1.
//
//	dgx-1 GPU a: nb-1 0.5 (stops slowly) + nb-2 0.5, held by allot-reservation-dgx-1-gpuA
func TestReservationHoldsUntilItsFractionsAreGone(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	slow := fraction("nb-1", "0.5")
	slow.Annotations[simnode.AnnotationStopAfter] = "4s"
	e.MustPod(t, slow)
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "both halves running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 2, fmt.Sprintf("%d running", n)
	})
	res := e.Pods(t, v1alpha1.SystemNamespace)
	if len(res) != 1 {
		t.Fatalf("reservations %v, want one", res)
	}
	var r *corev1.Pod
	for _, p := range res {
		r = p
	}
	if r.Status.QOSClass != corev1.PodQOSGuaranteed || r.Spec.PriorityClassName != scheduler.ReservationPriorityClass ||
		r.Spec.Priority == nil || *r.Spec.Priority != 1_000_000_000 {
		t.Errorf("reservation %s: QoS %s, priority class %q (%v), want Guaranteed at %s (1000000000)", r.Name, r.Status.QOSClass,
			r.Spec.PriorityClassName, r.Spec.Priority, scheduler.ReservationPriorityClass)
	}

	grace := int64(30)
	for _, name := range []string{"nb-2", "nb-1"} {
		if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		nb1 := e.Pods(t, "default")["nb-1"]
		cur := e.Pods(t, v1alpha1.SystemNamespace)[r.Name]
		if nb1 != nil && (cur == nil || cur.DeletionTimestamp != nil) {
			t.Fatalf("reservation %s released while nb-1 still terminates on its GPU", r.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.WaitFor(t, "nb-1 gone, then the reservation released", func() (bool, string) {
		nb1 := e.Pods(t, "default")["nb-1"]
		cur := e.Pods(t, v1alpha1.SystemNamespace)[r.Name]
		return nb1 == nil && (cur == nil || cur.DeletionTimestamp != nil), fmt.Sprint(nb1 != nil, cur != nil)
	})
}
