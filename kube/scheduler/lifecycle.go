package scheduler

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// stopOverdue deletes interactive pods that have run longer than their queue's
// interactiveTimeLimit (a notebook's StatefulSet of one it suspends instead), with an Event
// saying so: a notebook left open must not hold GPUs others wait for.
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
		if c := metav1.GetControllerOf(p); c != nil && c.Kind == "StatefulSet" && s.suspendOverdue(ctx, p, c, ran, limit) {
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

// suspendOverdue stops a notebook made as a StatefulSet of one (allot submit --interactive)
// past its time limit by scaling the StatefulSet to zero, as allot suspend does, rather
// than deleting its pod, which the StatefulSet would only make again: the notebook is kept,
// and allot resume starts it again. A StatefulSet of more than one is not scaled down: its
// other pods have not run past the limit (each is judged by its own start), so only the
// overdue pod is deleted, as a bare pod is; done false says so. done true is the pod
// handled here: the set suspended, or nothing to do (the set gone, made again, already at
// zero, or not read).
func (s *Scheduler) suspendOverdue(ctx context.Context, p *corev1.Pod, c *metav1.OwnerReference, ran, limit time.Duration) (done bool) {
	sets := s.client.AppsV1().StatefulSets(p.Namespace)
	st, err := sets.Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			// Once per StatefulSet: the limit is looked at every cycle, and a lasting
			// failure (a role without get on statefulsets) must not fill the log.
			if _, told := s.overdueUnread.LoadOrStore(c.UID, true); !told {
				slog.Warn("allot scheduler: interactive time limit: reading the pod's StatefulSet; the pod is left running",
					"pod", p.Namespace+"/"+p.Name, "statefulset", c.Name, "err", err)
			}
		}
		return true
	}
	s.overdueUnread.Delete(c.UID)
	replicas := int32(1)
	if st.Spec.Replicas != nil {
		replicas = *st.Spec.Replicas
	}
	if st.UID != c.UID || replicas == 0 {
		return true
	}
	if replicas != 1 {
		return false
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": st.UID, "resourceVersion": st.ResourceVersion,
			"annotations": map[string]string{inspect.AnnotationSuspendedReplicas: strconv.Itoa(int(replicas))}},
		"spec": map[string]any{"replicas": 0}})
	if _, err := sets.Patch(ctx, st.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: interactive time limit", "statefulset", st.Name, "err", err)
		}
		return true
	}
	s.recorder.Eventf(p, corev1.EventTypeNormal, "InteractiveTimeLimit",
		"stopped after %s: queue %s allows interactive workloads %s; StatefulSet %s suspended (allot resume %s starts it again)",
		ran.Round(time.Second), p.Labels[LabelQueue], limit, st.Name, st.Name)
	return true
}
