package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
)

// An elastic workload whose PodGroup carries spec.elastic (written by Allot's workload
// controller from an elastic indexed Job or a PyTorchJob's elasticPolicy) grows and
// shrinks through its own count, not around it:
//
//   - grow: when the engine finds room for more of its members (Plan.Grow: on free GPUs,
//     within its queue's fair share or lent idle), its count is raised by that many; its
//     controller makes the pods, which the next cycles place as any waiting pod;
//   - shrink: when a reclaim, a preemption or a spot notice takes members beyond its
//     minimum, its count is lowered by them first, and their evictions wait
//     ScaleDownGrace for the controller to stop its highest-indexed pods itself (each
//     kind removes those: an elastic indexed Job the indexes at or above its new count, the
//     training operator the replicas past its new count). The beneficiary's binds wait
//     meanwhile, as for any pod still leaving.
//
// Each change is an Event on the workload saying why.

// DefaultScaleDownGrace is how long a workload asked to shrink has to stop its own pods
// before the members the plan took are evicted.
const DefaultScaleDownGrace = 30 * time.Second

// scaleAsked is how long a count this scheduler wrote is trusted to be on its way to the
// PodGroup (the workload controller copies it there) before it is asked again.
const scaleAsked = 30 * time.Second

// scaleTarget is where a kind keeps its count; the first field is read, all are written.
type scaleTarget struct {
	gvr    schema.GroupVersionResource
	fields [][]string
	// member, where the workload makes pods of more than one kind, is the label and value
	// of those its count makes: a PyTorchJob's workers, not its master.
	member [2]string
}

// scaleTargets are the kinds the workload controller marks elastic, by apiVersion and kind.
var scaleTargets = map[string]scaleTarget{
	"batch/v1/Job": {schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
		// An elastic indexed Job: both change together.
		[][]string{{"spec", "parallelism"}, {"spec", "completions"}}, [2]string{}},
	"kubeflow.org/v1/PyTorchJob": {schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"},
		[][]string{{"spec", "pytorchReplicaSpecs", "Worker", "replicas"}},
		// The training operator's label; its value is the replica type in lower case.
		[2]string{"training.kubeflow.org/replica-type", "worker"}},
}

// noteElastic marks the job as one whose workload's count the scheduler changes, and
// gives it the engine's Growth when its queue lets it grow and all the members its
// workload asks for exist: while its controller is still making (or removing) pods, it is
// not grown again.
func (idx *index) noteElastic(job *engine.Job, e *convert.Elastic, grows bool) {
	target, ok := scaleTargets[e.Owner.APIVersion+"/"+e.Owner.Kind]
	if !ok {
		return
	}
	if idx.elastic == nil {
		idx.elastic = map[engine.JobID]elasticJob{}
	}
	idx.elastic[job.ID] = elasticJob{e, job.MinMember}
	if !grows || e.MaxMembers <= e.Members || len(job.Pods) != e.Members {
		return
	}
	// A new member asks what the newest of its kind asks (a PyTorchJob's master may be
	// newer than its workers, and ask otherwise); with none of them, what one would ask is
	// not known, and the job is not grown.
	for i := len(job.Pods) - 1; i >= 0; i-- {
		if p := idx.pods[job.Pods[i].ID]; target.member[0] == "" || p != nil && p.Labels[target.member[0]] == target.member[1] {
			job.Growth = &engine.Growth{Max: e.MaxMembers - e.Members, Pod: job.Pods[i].Request}
			return
		}
	}
}

// scaleMark is a count this scheduler asked of a workload: from what the PodGroup said
// then, to what, and until when the next cycles wait for it.
type scaleMark struct {
	from, to int
	until    time.Time
}

// grow raises the count of each workload the plan says has room for more members.
func (s *Scheduler) grow(ctx context.Context, plan *engine.Plan, idx *index) {
	s.forgetScales(time.Now())
	s.amu.Lock()
	for jid, m := range s.scaled {
		if e, ok := idx.elastic[jid]; ok && e.Members != m.from {
			delete(s.scaled, jid) // the PodGroup shows the count since: a new ask is a new decision
		}
	}
	s.amu.Unlock()
	if len(plan.Grow) == 0 || !s.fence.ok() {
		return
	}
	for jid, by := range plan.Grow {
		e, ok := idx.elastic[jid]
		if !ok || by.Members < 1 {
			continue
		}
		now := time.Now()
		s.amu.Lock()
		m, asked := s.scaled[jid]
		s.amu.Unlock()
		if asked && m.from == e.Members && now.Before(m.until) {
			continue // asked already; the PodGroup does not show it yet
		}
		to := min(e.Members+by.Members, e.MaxMembers)
		ns := strings.SplitN(string(jid), "/", 2)[0]
		if err := s.scaleTo(ctx, ns, e.Elastic, to); err != nil {
			slog.Warn("allot scheduler: growing a workload", "workload", e.Owner.Kind+" "+ns+"/"+e.Owner.Name, "err", err)
			continue
		}
		s.amu.Lock()
		s.scaled[jid] = scaleMark{from: e.Members, to: to, until: now.Add(scaleAsked)}
		s.amu.Unlock()
		where := "within its queue's fair share"
		switch {
		case by.Lent == by.Members:
			where = "on idle GPUs lent over its queue's fair share"
		case by.Lent > 0:
			where = fmt.Sprintf("within its queue's fair share (%d on idle GPUs lent over it)", by.Lent)
		}
		s.recorder.Eventf(ownerRef(ns, e.Owner), corev1.EventTypeNormal, "Grew",
			"grew to %d pods (from %d, at most %d): %d more fit now %s", to, e.Members, e.MaxMembers, to-e.Members, where)
	}
}

// forgetScales drops the marks whose wait is long over.
func (s *Scheduler) forgetScales(now time.Time) {
	s.amu.Lock()
	defer s.amu.Unlock()
	for _, m := range []map[engine.JobID]scaleMark{s.scaled, s.shrunk} {
		for jid, mark := range m {
			if now.After(mark.until.Add(scaleAsked)) {
				delete(m, jid)
			}
		}
	}
}

// shrinkFirst lowers the count of each elastic workload the plan takes members from
// (beyond its minimum, none of them moved elsewhere), and returns the evictions that wait
// for its controller to stop the pods itself: all of the job's, until ScaleDownGrace has
// passed since the count was lowered. A workload whose count cannot be written is evicted
// from as before.
func (s *Scheduler) shrinkFirst(ctx context.Context, plan *engine.Plan, idx *index) map[engine.PodID]bool {
	if len(idx.elastic) == 0 || !s.fence.ok() {
		return nil
	}
	taken := map[engine.JobID][]engine.Eviction{}
	for _, ev := range plan.Evictions {
		if _, ok := idx.elastic[ev.Job]; ok {
			taken[ev.Job] = append(taken[ev.Job], ev)
		}
	}
	if len(taken) == 0 {
		return nil
	}
	moved := map[engine.PodID]bool{}
	for _, b := range plan.Binds {
		moved[b.Pod] = true
	}
	grace := s.opts.ScaleDownGrace
	if grace <= 0 {
		grace = DefaultScaleDownGrace
	}
	hold := map[engine.PodID]bool{}
	now := time.Now()
	for jid, evs := range taken {
		e := idx.elastic[jid]
		running := 0
		for _, p := range idx.jobs[jid] {
			if p.Spec.NodeName != "" {
				running++
			}
		}
		if running-len(evs) < e.minMember || running-len(evs) < 1 {
			continue // stopped whole: it starts again whole, at the count it asks
		}
		move, interrupted := false, true
		for _, ev := range evs {
			move = move || moved[ev.Pod]
			interrupted = interrupted && ev.Reason.Code == engine.ReasonInterrupted
		}
		if move {
			continue // placed again elsewhere in the same plan: a move, not a loss
		}
		// A spot notice's members had their checkpoint notice already and their node
		// goes: the count is lowered, so that they are not made again to wait, and they
		// are stopped now.
		wait := grace
		if interrupted {
			wait = 0
		}
		s.amu.Lock()
		m, asked := s.shrunk[jid]
		s.amu.Unlock()
		switch {
		case asked && now.Before(m.until):
		case asked && now.Before(m.until.Add(scaleAsked)):
			continue // the grace is over: what still runs is evicted
		default:
			ns := strings.SplitN(string(jid), "/", 2)[0]
			to := e.Members - len(evs)
			if to < max(e.minMember, 1) {
				continue
			}
			if err := s.scaleTo(ctx, ns, e.Elastic, to); err != nil {
				slog.Warn("allot scheduler: shrinking a workload", "workload", e.Owner.Kind+" "+ns+"/"+e.Owner.Name, "err", err)
				continue
			}
			s.amu.Lock()
			s.shrunk[jid] = scaleMark{from: e.Members, to: to, until: now.Add(wait)}
			delete(s.scaled, jid) // growing it again later is a new decision
			s.amu.Unlock()
			then := fmt.Sprintf("its controller has %s to stop them before they are evicted", wait)
			if interrupted {
				then = "they are stopped now"
			}
			s.recorder.Eventf(ownerRef(ns, e.Owner), corev1.EventTypeNormal, "ScaledDown",
				"scaled down to %d pods (from %d, at least %d): %s; %s", to, e.Members, e.minMember, evs[0].Reason.Message, then)
			if interrupted {
				continue
			}
		}
		for _, ev := range evs {
			hold[ev.Pod] = true
		}
	}
	return hold
}

// scaleTo writes the workload's count so that its PodGroup's members become to, on the
// object the PodGroup names (by UID: one made again under the same name is not touched),
// with its resourceVersion, so that a change made meanwhile is not overwritten.
func (s *Scheduler) scaleTo(ctx context.Context, ns string, e *convert.Elastic, to int) error {
	t := scaleTargets[e.Owner.APIVersion+"/"+e.Owner.Kind]
	if s.dyn == nil {
		return fmt.Errorf("no client for %s", t.gvr.Resource)
	}
	r := s.dyn.Resource(t.gvr).Namespace(ns)
	u, err := r.Get(ctx, e.Owner.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if u.GetUID() != e.Owner.UID {
		return fmt.Errorf("%s %s was made again under the same name", e.Owner.Kind, e.Owner.Name)
	}
	cur, found, err := unstructured.NestedInt64(u.Object, t.fields[0]...)
	if err != nil || !found {
		return fmt.Errorf("%s %s: %s not set", e.Owner.Kind, e.Owner.Name, strings.Join(t.fields[0], "."))
	}
	want := cur + int64(to-e.Members)
	if want < 1 || want == cur {
		return nil
	}
	patch := map[string]any{"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()}}
	for _, f := range t.fields {
		merge(patch, f, want)
	}
	b, _ := json.Marshal(patch)
	_, err = r.Patch(ctx, e.Owner.Name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: SchedulerName})
	return err
}

// merge sets v at path in m, making the maps on the way.
func merge(m map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// ownerRef is the workload, for its Events.
func ownerRef(ns string, o metav1.OwnerReference) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, Namespace: ns, UID: o.UID}
}
