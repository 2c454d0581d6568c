package idle

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// Events the controller writes on a workload.
const (
	// ReasonIdleStopped: the workload was suspended or scaled to zero for being idle.
	ReasonIdleStopped = "IdleTimeout"
	// ReasonIdleNotStoppable: a workload idle past its timeout of a kind the controller
	// does not stop (stoppable): only said, once per idle spell.
	ReasonIdleNotStoppable = "IdleTimeoutNotStoppable"
	// ReasonIdleNotMeasured: a workload of a class its queue has an idle timeout for
	// holds GPUs whose utilisation no agent reads (MIG instances, DRA claims): it is never
	// judged idle. Said once, on the workload and on its Queue.
	ReasonIdleNotMeasured = "IdleNotMeasured"
)

// Unmeasured says what of a pod's GPUs no agent reads the utilisation of: "MIG instances"
// (NVML reads a MIG instance's engines, which the agent does not yet), "DRA claims" (the
// agent learns a claim's devices from no kubelet record), or "" when its GPUs are read.
func Unmeasured(p *corev1.Pod) string {
	switch {
	case p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning:
		return ""
	case p.Annotations[v1alpha1.AnnotationMIGInstances] != "":
		return "MIG instances"
	case len(p.Spec.ResourceClaims) > 0:
		return "DRA claims"
	}
	if _, n, _ := v1alpha1.MIGResources(p); n > 0 {
		return "MIG instances" // of the device plugin's fixed layout
	}
	return ""
}

// tellUnmeasured tells a workload, and its Queue, once, that the queue's idle timeout
// never applies to it: its GPUs are not measured.
func (c *Controller) tellUnmeasured(w *inspect.Workload, key, class string, pol policy, what string) {
	if c.toldUnmeasured[key] {
		return
	}
	c.toldUnmeasured[key] = true
	msg := fmt.Sprintf("queue %s's idleTimeout.%s does not apply to %s %s: its GPUs are %s, whose utilisation no agent reads, so it is never stopped for being idle",
		pol.queue, class, w.Kind, w.Namespace+"/"+w.Name, what)
	c.recorder.Event(ref(w), corev1.EventTypeWarning, ReasonIdleNotMeasured, msg)
	c.recorder.Event(&corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Queue", Name: pol.queue},
		corev1.EventTypeWarning, ReasonIdleNotMeasured, msg)
}

// publish writes on the workload's object since when its GPUs have been idle (allot list's
// IDLE, the dashboard), only when that changes, and removes the mark of an idle
// suspension once the workload runs again (resumed by allot resume, or scaled up by hand).
func (c *Controller) publish(ctx context.Context, w *inspect.Workload, since time.Time, idle bool, s State) {
	set := map[string]any{}
	switch {
	case idle && (w.IdleSince == nil || !w.IdleSince.Equal(since.Truncate(time.Second))):
		set[inspect.AnnotationIdleSince] = since.UTC().Format(time.RFC3339)
	case !idle && w.IdleSince != nil:
		set[inspect.AnnotationIdleSince] = nil
	}
	if w.IdleSuspended != nil && w.Status != "Suspended" && s != NoGPUs {
		set[inspect.AnnotationIdleSuspended] = nil
	}
	if len(set) > 0 {
		c.annotate(ctx, w, set)
	}
}

// annotate merges annotations into the workload's own object, checked by UID. A bare pod
// is not written: the scheduler's role has no patch on pods (a cluster-wide right to
// change any pod's labels is more than a display line is worth), so a bare pod's idleness
// is told by its Event alone.
func (c *Controller) annotate(ctx context.Context, w *inspect.Workload, set map[string]any) {
	if w.Kind == "Pod" || (w.Kind == "PodGroup" && w.UID == "") {
		return // a bare pod, or bare pods grouped by a label: no object to write
	}
	gv, err := schema.ParseGroupVersion(w.APIVersion)
	if err != nil {
		return
	}
	m, err := c.ctl.Mapper.RESTMapping(gv.WithKind(w.Kind).GroupKind(), gv.Version)
	if err != nil {
		return
	}
	meta := map[string]any{"annotations": set}
	if w.UID != "" {
		meta["uid"] = string(w.UID) // a merge patch with the uid fails on an object made again
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	_, err = c.dyn.Resource(m.Resource).Namespace(w.Namespace).Patch(ctx, w.Name, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		slog.Warn("allot idle: annotating", "workload", w.Namespace+"/"+w.Ref(), "err", err)
	}
}

// ref is the workload's own object, for its Events.
func ref(w *inspect.Workload) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: w.APIVersion, Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, UID: w.UID}
}

// stoppable tells whether the controller stops a workload of this kind and class: a
// notebook's StatefulSet (interactive), scaled to zero and resumed as it was; an inference
// Deployment or LeaderWorkerSet, scaled to zero. Every other kind is only reported: a
// RayCluster may be a RayJob's or RayService's, whose work suspending it would lose; a
// Job's, JobSet's or TrainJob's pods are batch work however labelled; a Knative or KServe
// service scales itself; a bare pod or a PodGroup of them has nothing to make them again.
func stoppable(w *inspect.Workload, class string) bool {
	gv, err := schema.ParseGroupVersion(w.APIVersion)
	if err != nil {
		return false
	}
	switch gv.WithKind(w.Kind).GroupKind() {
	case schema.GroupKind{Group: "apps", Kind: "StatefulSet"}:
		return class == v1alpha1.ClassInteractive
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}, schema.GroupKind{Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet"}:
		return class == v1alpha1.ClassInference
	}
	return false
}

// stop suspends (interactive) or scales to zero (inference) a workload idle past its
// queue's timeout, with an Event and the annotation allot describe reads. A workload of
// a kind it does not stop (stoppable) is never suspended nor deleted: it is told once per
// idle spell, with an Event.
func (c *Controller) stop(ctx context.Context, w *inspect.Workload, key, class string, idleFor time.Duration, pol policy, now time.Time) {
	timeout := pol.timeout[class]
	field := "idleTimeout." + class
	if !stoppable(w, class) {
		if c.told[key] {
			return
		}
		c.told[key] = true
		why := fmt.Sprintf("Allot stops only %s StatefulSets and %s Deployments and LeaderWorkerSets (a %s's work could be lost), so it keeps running",
			v1alpha1.ClassInteractive, v1alpha1.ClassInference, w.Kind)
		if w.Kind == "Pod" || w.Kind == "PodGroup" {
			why = fmt.Sprintf("a bare %s cannot be suspended (nothing would make it again), so it keeps running", w.Kind)
		}
		c.recorder.Eventf(ref(w), corev1.EventTypeWarning, ReasonIdleNotStoppable,
			"every GPU it holds has been under %d%% utilisation for %s, past queue %s's %s of %s; %s: submit notebooks with allot submit --interactive (a StatefulSet) to have them suspended",
			pol.threshold, inspect.Short(idleFor), pol.queue, field, inspect.Short(timeout), why)
		return
	}
	if w.Status == "Suspended" {
		return
	}
	if _, err := c.ctl.Suspend(ctx, w, false); err != nil {
		if ctx.Err() == nil {
			slog.Warn("allot idle: stopping an idle workload", "workload", w.Namespace+"/"+w.Ref(), "err", err)
		}
		return
	}
	s := inspect.IdleSuspension{At: now.UTC().Truncate(time.Second), IdleFor: metav1.Duration{Duration: idleFor.Round(time.Second)},
		Threshold: pol.threshold, Queue: pol.queue, Class: class}
	b, _ := json.Marshal(s)
	c.annotate(ctx, w, map[string]any{inspect.AnnotationIdleSuspended: string(b), inspect.AnnotationIdleSince: nil})
	c.track.Observe(key, NoGPUs, now)
	what := "suspended"
	if class == v1alpha1.ClassInference {
		what = "scaled to zero"
	}
	c.recorder.Eventf(ref(w), corev1.EventTypeNormal, ReasonIdleStopped,
		"%s after %s with every GPU it held under %d%% utilisation: queue %s's %s is %s; allot resume %s starts it again",
		what, inspect.Short(idleFor), pol.threshold, pol.queue, field, inspect.Short(timeout), w.Name)
	slog.Info("allot idle: "+what, "workload", w.Namespace+"/"+w.Ref(), "idle", idleFor, "queue", pol.queue)
}
