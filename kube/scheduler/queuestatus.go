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
	"github.com/allot-dev/allot/kube/convert"
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
	kinds := s.opts.Accelerators.On()
	divided := convert.DividedPools(queues)
	divided = divided[:min(len(divided), engine.MaxPools)]
	for _, q := range queues {
		st, ok := plan.Queues[engine.QueueID(q.Name)]
		if !ok {
			continue
		}
		shown := shownOf{kinds: kinds, accels: kindsShown(q, st, kinds), pools: divided, poolsShown: poolsShown(q, st, divided)}
		want := map[string]any{
			"fairShare": resources(st.FairShare, shown), "allocated": resources(st.Allocated, shown),
			"allocatedNonPreemptible": resources(st.AllocatedNonPreemptible, shown), "requested": resources(st.Requested, shown),
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
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": q.ResourceVersion}, "status": withDropped(want, q.Status)})
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
	// A group stopped by an interruption this cycle counts one more (interruptions.go),
	// kept until its status is written: a write that conflicts is tried again next cycle.
	counted := map[engine.JobID]bool{}
	for _, e := range plan.Evictions {
		if e.Reason.Code == engine.ReasonInterrupted && !counted[e.Job] {
			counted[e.Job] = true
			s.interruptedUnwritten[e.Job]++
		}
	}
	known := map[engine.JobID]bool{}
	running := map[engine.JobID]int32{}
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if g := p.Labels[LabelPodGroup]; g != "" && (p.Spec.NodeName != "" || s.isAssumed(p.UID)) && !terminal(p) && p.DeletionTimestamp == nil {
			running[engine.JobID(p.Namespace+"/"+g)]++
		}
	}
	for _, pg := range groups {
		jid := engine.JobID(pg.Namespace + "/" + pg.Name)
		known[jid] = true
		want := v1alpha1.PodGroupStatus{Phase: "Pending", Running: running[jid], Interruptions: pg.Status.Interruptions + s.interruptedUnwritten[jid]}
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
		_, err := s.allot.AllotV1alpha1().PodGroups(pg.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		switch {
		case err == nil:
			delete(s.interruptedUnwritten, jid)
		case !apierrors.IsConflict(err):
			slog.Warn("allot scheduler: pod group status", "group", jid, "err", err)
		}
	}
	for jid := range s.interruptedUnwritten {
		if !known[jid] {
			delete(s.interruptedUnwritten, jid) // a job of no PodGroup: nowhere to count it
		}
	}
}

// shownOf is what a queue's status shows besides GPUs, CPU and memory: the kinds of
// accelerator in accels (indices of kinds), and the GPUs of every pool divided apart.
type shownOf struct {
	kinds  []convert.Accelerator
	accels []int
	// pools are the pools divided apart, in the engine's order; poolsShown the indices of
	// those the queue's status shows.
	pools      []string
	poolsShown []int
}

// resources is a queue's accounting as its status shows it: GPUs as engine.Format writes
// them, CPU in millicores, memory in bytes, the devices of each kind of accelerator shown
// as GPUs are, keyed by the kind's first resource, and each divided pool's GPUs keyed
// pool.allot.dev/<pool>.
func resources(r engine.Resources, shown shownOf) map[string]any {
	out := map[string]any{
		string(GPUResource): engine.Format(engine.ResourceGPU, r[engine.ResourceGPU]),
		"cpu":               fmt.Sprintf("%dm", r[engine.ResourceCPU]),
		"memory":            fmt.Sprintf("%d", r[engine.ResourceMemory]),
	}
	for _, i := range shown.accels {
		res := engine.AcceleratorResource(i)
		out[string(shown.kinds[i].Resources[0])] = engine.Format(res, r[res])
	}
	for _, k := range shown.poolsShown {
		res := engine.PoolResource(k)
		out[v1alpha1.PoolStatusPrefix+shown.pools[k]] = engine.Format(res, r[res])
	}
	return out
}

// withDropped is the status to write as a merge patch: keys the queue's status has that
// want no longer shows (a kind of accelerator it stopped holding) are written as null, as
// a merge patch leaves a key it does not name.
func withDropped(want map[string]any, have v1alpha1.QueueStatus) map[string]any {
	out := make(map[string]any, len(want))
	for k, v := range want {
		out[k] = v
	}
	for field, list := range map[string]corev1.ResourceList{"fairShare": have.FairShare, "allocated": have.Allocated,
		"allocatedNonPreemptible": have.AllocatedNonPreemptible, "requested": have.Requested} {
		m, _ := want[field].(map[string]any)
		var patched map[string]any
		for k := range list {
			if _, kept := m[string(k)]; kept {
				continue
			}
			if patched == nil {
				patched = make(map[string]any, len(m)+1)
				for mk, mv := range m {
					patched[mk] = mv
				}
			}
			patched[string(k)] = nil
		}
		if patched != nil {
			out[field] = patched
		}
	}
	return out
}

// kindsShown are the kinds of accelerator a queue's status shows, as indices of kinds: those
// its spec gives a quota of, and those it has a share of, holds or asks for. The others
// would be a row of zeros on every queue of a cluster that has none of them.
func kindsShown(q *v1alpha1.Queue, st engine.QueueStatus, kinds []convert.Accelerator) []int {
	var out []int
	for i, k := range kinds {
		res := engine.AcceleratorResource(i)
		_, named := q.Spec.Accelerators[k.Name]
		if named || st.FairShare[res] != 0 || st.Allocated[res] != 0 || st.Requested[res] != 0 || st.AllocatedNonPreemptible[res] != 0 {
			out = append(out, i)
		}
	}
	return out
}

// poolsShown are the pools divided apart that a queue's status shows, as indices of
// divided: those its spec gives a quota of, and those it has a share of, holds or asks
// for, as kindsShown has it of kinds.
func poolsShown(q *v1alpha1.Queue, st engine.QueueStatus, divided []string) []int {
	var out []int
	for k, p := range divided {
		res := engine.PoolResource(k)
		_, named := q.Spec.GPU.Pools[p]
		if named || st.FairShare[res] != 0 || st.Allocated[res] != 0 || st.Requested[res] != 0 || st.AllocatedNonPreemptible[res] != 0 {
			out = append(out, k)
		}
	}
	return out
}

// reportQueueProblems tells, once for each new problem, what in a Queue's spec counts for
// nothing (a kind of accelerator the scheduler does not schedule): a Warning Event on the
// Queue (allot queues and kubectl describe show it) and the log. The pods of such a queue
// run as its other quotas allow; the webhook refuses such a Queue where it is installed.
func (s *Scheduler) reportQueueProblems(problems map[string]string, queues []*v1alpha1.Queue) {
	for _, q := range queues {
		msg := problems[q.Name]
		if msg == s.queueProblems[q.Name] {
			continue
		}
		if msg == "" {
			delete(s.queueProblems, q.Name)
			continue
		}
		s.queueProblems[q.Name] = msg
		slog.Warn("allot scheduler: queue spec not honoured", "queue", q.Name, "problem", msg)
		ref := &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Queue", Name: q.Name, UID: q.UID}
		s.recorder.Eventf(ref, corev1.EventTypeWarning, "UnknownAccelerator", "%s", msg)
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
