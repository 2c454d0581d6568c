package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// The status stage for Allot's own objects: each Queue's accounting and each PodGroup's
// phase, as the plan leaves them. Both are written only when they change, a Queue at most
// once a second.

// writeQueueStatus writes each queue's fair share, allocation, requests, counts and past
// use on its status. It is sent as a merge patch of the whole status, resting on the
// resourceVersion the cycle read (as an update would), so that the quantities keep the
// form people read in kubectl get queues ("2.5" GPUs, where a typed update would write
// "2500m").
func (s *Scheduler) writeQueueStatus(ctx context.Context, plan *engine.Plan, queues []*v1alpha1.Queue) {
	for _, q := range queues {
		st, ok := plan.Queues[engine.QueueID(q.Name)]
		if !ok {
			continue
		}
		want := map[string]any{
			"fairShare": resources(st.FairShare), "allocated": resources(st.Allocated),
			"allocatedNonPreemptible": resources(st.AllocatedNonPreemptible), "requested": resources(st.Requested),
			"running": int64(st.Running), "pending": int64(st.Pending), "usage": nil}
		usage, counted := s.usage[q.Name]
		if counted {
			want["usage"] = map[string]any{"gpuSeconds": int64(math.Round(usage.GPUSeconds)), "lastUpdated": usage.At.UTC().Format(time.RFC3339)}
		}
		var cur v1alpha1.QueueStatus
		if statusEqual(q.Status, want, &cur) && !(counted && usageDue(q.Status.Usage, usage)) {
			continue
		}
		// At most one write a second per queue: under a stream of binds its counts change
		// every cycle, and the cycle that follows (one comes at least every Interval) writes the rest.
		if now := time.Now(); now.Sub(s.queueWritten[q.Name]) < time.Second {
			continue
		} else {
			s.queueWritten[q.Name] = now
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": q.ResourceVersion}, "status": want})
		if err == nil {
			_, err = s.allot.AllotV1alpha1().Queues().Patch(ctx, q.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		}
		if err != nil && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: queue status", "queue", q.Name, "err", err)
		}
	}
}

// writeGroupStatus records each PodGroup's phase, running pods and reason as the plan
// leaves them.
func (s *Scheduler) writeGroupStatus(ctx context.Context, plan *engine.Plan, groups []*v1alpha1.PodGroup) {
	if len(groups) == 0 {
		return // no PodGroup objects: skip the walk over every pod
	}
	running := map[engine.JobID]int32{}
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if g := p.Labels[LabelPodGroup]; g != "" && (p.Spec.NodeName != "" || s.isAssumed(p.UID)) && !terminal(p) && p.DeletionTimestamp == nil {
			running[engine.JobID(p.Namespace+"/"+g)]++
		}
	}
	for _, pg := range groups {
		jid := engine.JobID(pg.Namespace + "/" + pg.Name)
		want := v1alpha1.PodGroupStatus{Phase: "Pending", Running: running[jid]}
		if min := pg.Spec.MinMember; running[jid] >= min && min > 0 {
			want.Phase = "Running"
		}
		if r, ok := plan.Pending[jid]; ok {
			want.Reason = r.Message
		}
		if pg.Status == want {
			continue
		}
		cp := pg.DeepCopy()
		cp.Status = want
		if _, err := s.allot.AllotV1alpha1().PodGroups(pg.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: pod group status", "group", jid, "err", err)
		}
	}
}

// resources is a queue's accounting as its status shows it: GPUs as engine.Format writes
// them, CPU in millicores, memory in bytes.
func resources(r engine.Resources) map[string]any {
	return map[string]any{
		string(GPUResource): engine.Format(engine.ResourceGPU, r[engine.ResourceGPU]),
		"cpu":               fmt.Sprintf("%dm", r[engine.ResourceCPU]),
		"memory":            fmt.Sprintf("%d", r[engine.ResourceMemory]),
	}
}

// statusEqual compares the status the queue has with the one to write (its usage is
// compared by usageDue).
func statusEqual(have v1alpha1.QueueStatus, want map[string]any, scratch *v1alpha1.QueueStatus) bool {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(want, scratch); err != nil {
		return false
	}
	eq := func(a, b corev1.ResourceList) bool {
		if len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
				return false
			}
		}
		return true
	}
	return have.Running == scratch.Running && have.Pending == scratch.Pending && eq(have.FairShare, scratch.FairShare) &&
		eq(have.Allocated, scratch.Allocated) && eq(have.AllocatedNonPreemptible, scratch.AllocatedNonPreemptible) &&
		eq(have.Requested, scratch.Requested)
}
