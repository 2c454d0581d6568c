package scheduler

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// The interruption stage: a node whose cloud says it goes soon (a spot notice, read by
// kube/convert as engine.Node.Interruption) takes no new pods; each of Allot's pods there is
// told when it will be stopped (allot.dev/interruption, readable through the downward API,
// and an Event), so that a training loop can checkpoint; once that time has passed the
// engine stops what runs there (engine.Node.InterruptAt), and the PodGroup of each job it
// stopped counts one interruption (writeGroupStatus).

// DefaultInterruptionGrace is how long after a notice Allot stops the pods of the node:
// time to checkpoint, before each pod's own termination grace. Clouds give about two
// minutes' notice of a spot interruption.
const DefaultInterruptionGrace = time.Minute

// interruptions holds, per node, when its notice was first seen. Touched only by cycles.
type interruptions map[engine.NodeID]time.Time

// noteInterruptions sets each noticed node's InterruptAt (the notice's first sight plus
// the grace) and tells the pods there, once each; it forgets nodes no longer noticed.
func (s *Scheduler) noteInterruptions(ctx context.Context, now time.Time, snap *engine.Snapshot, pods []*corev1.Pod) {
	grace := s.opts.InterruptionGrace
	if grace <= 0 {
		grace = DefaultInterruptionGrace
	}
	// The nodes noticed, each with its node for the pods' notices below.
	noticed := map[engine.NodeID]*engine.Node{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if n.Interruption == "" {
			continue
		}
		noticed[n.ID] = n
		first, ok := s.interrupts[n.ID]
		if !ok {
			first = now
			s.interrupts[n.ID] = now
			slog.Info("allot scheduler: node goes soon: its pods are stopped after the grace", "node", n.ID, "why", n.Interruption, "at", first.Add(grace))
		}
		n.InterruptAt = first.Add(grace)
	}
	for id := range s.interrupts {
		if noticed[id] == nil {
			delete(s.interrupts, id)
		}
	}
	if len(noticed) == 0 {
		return
	}
	for _, p := range pods {
		n := noticed[engine.NodeID(p.Spec.NodeName)]
		if n == nil || p.Spec.SchedulerName != SchedulerName || p.DeletionTimestamp != nil || terminal(p) || v1alpha1.IsReservation(p) {
			continue
		}
		when := n.InterruptAt.UTC().Format(time.RFC3339)
		if p.Annotations[v1alpha1.AnnotationInterruption] == when {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID,
			"annotations": map[string]string{v1alpha1.AnnotationInterruption: when}}})
		if _, err := s.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				slog.Warn("allot scheduler: telling a pod its node goes", "pod", p.Namespace+"/"+p.Name, "err", err)
			}
			continue
		}
		s.recorder.Eventf(p, corev1.EventTypeWarning, "InterruptionNotice",
			"node %s goes soon (%s): save your work; the pod is stopped at %s (annotation %s)", p.Spec.NodeName, n.Interruption, when, v1alpha1.AnnotationInterruption)
	}
}
