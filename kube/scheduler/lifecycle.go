package scheduler

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// stopOverdue deletes interactive pods that have run longer than their queue's
// interactiveTimeLimit, with an Event saying so: a notebook left open must not hold GPUs
// others wait for.
func (s *Scheduler) stopOverdue(ctx context.Context, now time.Time, pods []*corev1.Pod, queues []*v1alpha1.Queue) {
	limits := map[string]time.Duration{}
	for _, q := range queues {
		if q.Spec.InteractiveTimeLimit != nil && q.Spec.InteractiveTimeLimit.Duration > 0 {
			limits[q.Name] = q.Spec.InteractiveTimeLimit.Duration
		}
	}
	if len(limits) == 0 {
		return
	}
	for _, p := range pods {
		limit := limits[p.Labels[LabelQueue]]
		if limit == 0 || p.Spec.SchedulerName != SchedulerName || p.Labels[LabelClass] != v1alpha1.ClassInteractive ||
			p.Status.StartTime == nil || p.DeletionTimestamp != nil || terminal(p) {
			continue
		}
		ran := now.Sub(p.Status.StartTime.Time)
		if ran < limit {
			continue
		}
		err := s.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				slog.Warn("allot scheduler: interactive time limit", "pod", p.Name, "err", err)
			}
			continue
		}
		s.recorder.Eventf(p, corev1.EventTypeNormal, "InteractiveTimeLimit",
			"stopped after %s: queue %s allows interactive workloads %s", ran.Round(time.Second), p.Labels[LabelQueue], limit)
	}
}
