package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
)

// bindMIG binds a pod given MIG instances. An instance of a fixed layout is the device
// plugin's to hand over (the pod asks its resource): the bind records where the engine
// booked it, and the agent's record of what the kubelet gave follows. An instance Allot
// lays out must exist before the pod starts: it is asked of the node's agent, and the pod
// is held (resumeMIG) until the agent reports it, then given its MIG device.
func (s *Scheduler) bindMIG(ctx context.Context, j *bindJob) error {
	err := s.bindMIGOnce(ctx, j)
	if !errors.Is(err, errAwaitingDevice) && j.p.Annotations[v1alpha1.AnnotationMIG] != "" {
		// Bound, or failed (placed again next cycle, wished anew): either way it waits on
		// this wish no more, which would otherwise keep its slices from the node's next
		// layout until a newer wish replaced it.
		s.unwishMIG(ctx, string(j.b.Node), j.p)
	}
	return err
}

func (s *Scheduler) bindMIGOnce(ctx context.Context, j *bindJob) error {
	p, b := j.p, j.b
	o, ok, _ := s.nodes.GetStore().GetByKey(string(b.Node))
	if !ok {
		return fmt.Errorf("node %s is gone", b.Node)
	}
	kn := o.(*corev1.Node)
	node := convert.Node(kn)
	where := convert.FormatMIGInstances(&node, b)
	if where == "" {
		return fmt.Errorf("the MIG instances chosen on node %s are no longer on its devices", b.Node)
	}
	ann := map[string]string{v1alpha1.AnnotationMIGInstances: where}
	if p.Annotations[v1alpha1.AnnotationMIG] == "" {
		return s.writeBinding(ctx, p, b.Node, ann)
	}
	// Laid out by Allot: the instance must be there, with the UUID the container is
	// given; until the agent reports it, the pod is held where it was placed.
	g, start := b.GPUs[0], b.MIGStarts[0]
	if node.GPUs[g].MIG == nil {
		return fmt.Errorf("GPU %d of node %s is no longer in MIG mode", g, b.Node)
	}
	uuid := ""
	for _, in := range node.GPUs[g].MIG.Instances {
		if in.Start == start && in.Profile == b.MIG {
			uuid = in.UUID
		}
	}
	if uuid == "" {
		// Held before the wish is written: a pod of the same name found gone meanwhile
		// (a StatefulSet's pod made again) must see this one waiting, or its unwishMIG
		// would take this pod's wish off the node.
		s.amu.Lock()
		_, held := s.migAwaiting[p.UID]
		if !held {
			s.migAwaiting[p.UID] = migAwait{job: *j, since: s.opts.Now()}
		}
		s.amu.Unlock()
		if err := s.wishMIG(ctx, kn, v1alpha1.MIGWish{GPU: node.GPUs[g].UUID, Profile: b.MIG, Start: start,
			Pod: p.Namespace + "/" + p.Name, Since: s.opts.Now()}); err != nil {
			return err // bindLoop lets the pod go (migAwaiting) on any error but waiting
		}
		if !held {
			// Said once, on the pod: why it is not bound though placed.
			s.statuses.put(statusWrite{p: p, msg: fmt.Sprintf("placed on %s GPU %d, waiting for its agent to make the MIG %s instance at memory slice %d (asked %s)",
				b.Node, g, b.MIG, start, s.opts.Now().UTC().Format(time.TimeOnly))})
		}
		return errAwaitingDevice
	}
	env := map[string]string{"NVIDIA_VISIBLE_DEVICES": uuid, "ALLOT_GPU_SHARING": "mig",
		"ALLOT_GPU_SHARE": strconv.FormatFloat(float64(b.Share)/float64(engine.OneGPU), 'f', -1, 64)}
	delivered, err := deliveryAnnotations(p, kn, env, s.opts.CDIKind)
	if err != nil {
		return err
	}
	for k, v := range delivered {
		ann[k] = v
	}
	err = s.writeBinding(ctx, p, b.Node, ann)
	if err == nil {
		s.amu.Lock()
		delete(s.migAwaiting, p.UID)
		s.amu.Unlock()
	}
	return err
}

// migAwait is a pod held until its node's agent reports the MIG instance made for it.
type migAwait struct {
	job   bindJob
	since time.Time
	// queued: its instance was reported and its bind queued; not queued again.
	queued bool
}

// wishMIG adds the instance to the node's wishes for its agent, dropping wishes older
// than twice the device report timeout (a safety net: each is dropped when its pod leaves
// the wait, unwishMIG) and any earlier wish of the same pod.
func (s *Scheduler) wishMIG(ctx context.Context, n *corev1.Node, w v1alpha1.MIGWish) error {
	s.migWrite.Lock()
	defer s.migWrite.Unlock()
	s.amu.Lock()
	keep := []v1alpha1.MIGWish{w}
	for _, o := range s.wishesOn(n) {
		if o.Pod != w.Pod && s.opts.Now().Sub(o.Since) < 2*s.deviceReportTimeout() {
			keep = append(keep, o)
		}
	}
	s.migWished[n.Name] = keep
	s.amu.Unlock()
	if err := s.writeWishes(ctx, n.Name, keep); err != nil {
		return fmt.Errorf("asking node %s's agent for a MIG %s at slice %d: %w", n.Name, w.Profile, w.Start, err)
	}
	return nil
}

// unwishMIG drops the wishes of a pod that waits for its instance no more (bound,
// deleted, failed, or given up on after the device report timeout): a wish left behind
// would keep its slices from any instance the node's agent is later asked to make there
// (an overlapping layout is refused whole), until a newer wish for the node replaced it.
func (s *Scheduler) unwishMIG(ctx context.Context, node string, p *corev1.Pod) {
	o, ok, _ := s.nodes.GetStore().GetByKey(node)
	if !ok {
		return // the node is gone, and its wishes with it
	}
	s.migWrite.Lock()
	defer s.migWrite.Unlock()
	pod := p.Namespace + "/" + p.Name
	s.amu.Lock()
	for uid, a := range s.migAwaiting {
		if uid != p.UID && a.job.p.Namespace == p.Namespace && a.job.p.Name == p.Name {
			s.amu.Unlock()
			return // a pod made again under the name waits on the wish now (wishes go by name)
		}
	}
	old := s.wishesOn(o.(*corev1.Node))
	keep := slices.DeleteFunc(slices.Clone(old), func(w v1alpha1.MIGWish) bool { return w.Pod == pod })
	if len(keep) == len(old) {
		s.amu.Unlock()
		return
	}
	s.migWished[node] = keep
	s.amu.Unlock()
	if err := s.writeWishes(ctx, node, keep); err != nil {
		// The record goes back to what the node still says, so that it is not taken for
		// written; the wish then stays until a newer one for the node drops it (wishMIG,
		// after twice the device report timeout).
		s.amu.Lock()
		s.migWished[node] = old
		s.amu.Unlock()
		slog.Warn("allot scheduler: dropping a MIG wish", "node", node, "pod", pod, "err", err)
	}
}

// wishesOn is what the node's agent is asked for: what this scheduler last wrote there,
// else (none written since it started) the Node's annotation. The informer's Node may
// lag behind what was written (two pods placed on the node in one cycle; a wish just
// dropped), so the scheduler's own record wins. The caller holds amu.
func (s *Scheduler) wishesOn(n *corev1.Node) []v1alpha1.MIGWish {
	if own, ok := s.migWished[n.Name]; ok {
		return own
	}
	ws, _ := v1alpha1.ParseMIGWishes(n.Annotations[v1alpha1.AnnotationMIGWanted])
	return ws
}

// writeWishes writes the node's wishes, or takes the annotation away when none is left.
// The caller holds migWrite, so that two binds' writes land in the order they were made.
func (s *Scheduler) writeWishes(ctx context.Context, node string, ws []v1alpha1.MIGWish) error {
	var val any // null: the annotation goes
	if len(ws) > 0 {
		data, _ := json.Marshal(ws)
		val = string(data)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationMIGWanted: val}}})
	if !s.fence.ok() {
		return errNotLeader
	}
	_, err := s.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// resumeMIG binds the pods held for a MIG instance once their node reports it, and gives
// up on those whose instance did not come in time (the agent is down, or NVML refused).
func (s *Scheduler) resumeMIG(ctx context.Context) {
	s.amu.Lock()
	held := maps.Clone(s.migAwaiting)
	s.amu.Unlock()
	now := s.opts.Now()
	for uid, a := range held {
		gone := s.heldPodGone(a.job.p, uid)
		made := false
		if n, ok, _ := s.nodes.GetStore().GetByKey(string(a.job.b.Node)); ok && !gone {
			node := convert.Node(n.(*corev1.Node))
			if g := a.job.b.GPUs[0]; g < len(node.GPUs) && node.GPUs[g].MIG != nil {
				for _, in := range node.GPUs[g].MIG.Instances {
					made = made || (in.Start == a.job.b.MIGStarts[0] && in.Profile == a.job.b.MIG && in.UUID != "")
				}
			}
		}
		switch {
		case gone:
			s.dropMIGAwait(uid)
			s.unwishMIG(ctx, string(a.job.b.Node), a.job.p)
		case made && !a.queued:
			s.amu.Lock()
			a.queued = true
			s.migAwaiting[uid] = a
			s.amu.Unlock()
			if !s.queueBind(ctx, a.job) {
				return
			}
		case made:
		case now.Sub(a.since) >= s.deviceReportTimeout():
			s.dropMIGAwait(uid)
			s.unwishMIG(ctx, string(a.job.b.Node), a.job.p)
			msg := fmt.Sprintf("placed on %s, whose agent did not report the MIG %s instance at slice %d of GPU %d within %s: is allot agent running there?",
				a.job.b.Node, a.job.b.MIG, a.job.b.MIGStarts[0], a.job.b.GPUs[0], s.deviceReportTimeout())
			slog.Warn("allot scheduler: "+msg, "pod", a.job.p.Name)
			s.recorder.Event(a.job.p, corev1.EventTypeWarning, "FailedBinding", msg)
			s.amu.Lock()
			s.backoff[uid] = now.Add(bindBackoff)
			s.amu.Unlock()
		}
	}
}

// dropMIGAwait forgets a held pod and what was assumed of it.
func (s *Scheduler) dropMIGAwait(uid types.UID) {
	s.amu.Lock()
	delete(s.migAwaiting, uid)
	delete(s.assumed, uid)
	s.amu.Unlock()
}

// heldPodGone tells whether a pod held for its device was deleted (or made again, with
// another UID) meanwhile: nothing to bind.
func (s *Scheduler) heldPodGone(p *corev1.Pod, uid types.UID) bool {
	o, ok, _ := s.pods.GetStore().GetByKey(p.Namespace + "/" + p.Name)
	return !ok || o.(*corev1.Pod).UID != uid || o.(*corev1.Pod).DeletionTimestamp != nil
}
