package scheduler

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A reservation pod holds a shared GPU in the kubelet's books while fractions use it. If
// the kubelet evicted it under node pressure (a BestEffort pod of no priority goes first),
// it would hand the device to the next pod asking for one while the fractions still run on
// it. So a reservation is Guaranteed (requests equal to limits for CPU and memory, tiny
// as a pause container needs) and of the highest priority a user's class may have, which
// the kubelet ranks last among pods within their requests when it must evict.

// ReservationPriorityClass is the PriorityClass of reservation pods.
const ReservationPriorityClass = "allot-reservation"

// reservationPriority is the highest value a PriorityClass outside the system's may take:
// no workload outranks a reservation.
const reservationPriority = 1_000_000_000

// reservationResources: what a pause container needs, requested as its limit
// (Guaranteed QoS), and the one GPU it holds.
func reservationResources() corev1.ResourceRequirements {
	r := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10m"),
		corev1.ResourceMemory: resource.MustParse("16Mi"),
		GPUResource:           resource.MustParse("1"),
	}
	return corev1.ResourceRequirements{Requests: r, Limits: r.DeepCopy()}
}

// reservationPriorityClass is the class: it never preempts anything (a reservation is
// bound straight to its node, where its GPU is free).
func reservationPriorityClass() *schedulingv1.PriorityClass {
	never := corev1.PreemptNever
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ReservationPriorityClass,
		Labels: map[string]string{"app.kubernetes.io/managed-by": SchedulerName}},
		Value: reservationPriority, PreemptionPolicy: &never,
		Description: "Allot's reservation pods, which hold a GPU shared by fractions in the kubelet's books: evicted last, preempting nothing."}
}

// ensureReservationClass makes the class if it is missing and says whether reservations
// may name it. Without it (no right to make it, and the chart's not installed), they are
// made without one, and that is said.
func (s *Scheduler) ensureReservationClass(ctx context.Context) bool {
	classes := s.client.SchedulingV1().PriorityClasses()
	if _, err := classes.Get(ctx, ReservationPriorityClass, metav1.GetOptions{}); err == nil {
		return true
	}
	_, err := classes.Create(ctx, reservationPriorityClass(), metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return true
	}
	slog.Warn("allot scheduler: reservation pods get no priority class: the kubelet may evict them under node pressure before the fractions sharing their GPU",
		"priorityClass", ReservationPriorityClass, "err", err)
	return false
}
