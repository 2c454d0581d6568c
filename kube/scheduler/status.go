package scheduler

import (
	"context"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/podutil"
)

// podStatuses carries waiting pods' reasons (the PodScheduled=False condition and a
// FailedScheduling Event) to writers of their own, off the cycle. Written in the cycle, one
// request after another, 1,500 pods that newly could not be placed held it about 5 s, and a
// pod that fitted waited for it to end (TestFittingPodDoesNotWaitForOthersReasons). A pod whose reason changes again
// before its write is taken has only its newest written; a write that does not land (a
// conflict with the pod's own change, the API server busy) is handed back to the next cycle,
// which writes it again if the reason still holds.
type podStatuses struct {
	mu     sync.Mutex
	wake   *sync.Cond
	order  []types.UID               // pods with a write waiting, oldest first
	latest map[types.UID]statusWrite // the newest write of each
	failed []statusWrite
	closed bool
}

type statusWrite struct {
	p   *corev1.Pod // as the cycle saw it: the write fails if the pod changed since
	msg string
}

// statusWriters is how many pods' reasons are written at once.
const statusWriters = 8

func newPodStatuses() *podStatuses {
	q := &podStatuses{latest: map[types.UID]statusWrite{}}
	q.wake = sync.NewCond(&q.mu)
	return q
}

func (q *podStatuses) put(w statusWrite) {
	q.mu.Lock()
	if _, waiting := q.latest[w.p.UID]; !waiting {
		q.order = append(q.order, w.p.UID)
	}
	q.latest[w.p.UID] = w
	q.mu.Unlock()
	q.wake.Signal()
}

// take waits for a write; false once closed.
func (q *podStatuses) take() (statusWrite, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 {
		if q.closed {
			return statusWrite{}, false
		}
		q.wake.Wait()
	}
	uid := q.order[0]
	q.order = q.order[1:]
	w := q.latest[uid]
	delete(q.latest, uid)
	return w, true
}

func (q *podStatuses) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake.Broadcast()
}

func (q *podStatuses) fail(w statusWrite) {
	q.mu.Lock()
	q.failed = append(q.failed, w)
	q.mu.Unlock()
}

// takeFailed returns the writes that did not land since the last call.
func (q *podStatuses) takeFailed() []statusWrite {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.failed
	q.failed = nil
	return f
}

// writeStatuses writes queued reasons until ctx ends, each after the binds waiting for a
// worker, as the Events are.
func (s *Scheduler) writeStatuses(ctx context.Context) {
	for {
		w, ok := s.statuses.take()
		if !ok {
			return
		}
		if !s.afterWaitingBinds(ctx) {
			return
		}
		if err := s.setUnschedulable(ctx, w.p, w.msg); err != nil {
			if apierrors.IsNotFound(err) {
				continue // gone: nothing to explain
			}
			if !apierrors.IsConflict(err) && ctx.Err() == nil {
				slog.Warn("allot scheduler: pod status", "pod", w.p.Name, "err", err)
			}
			s.statuses.fail(w)
			continue
		}
		s.events.add(s.newEvent(w.p, corev1.EventTypeWarning, "FailedScheduling", w.msg))
	}
}

// setUnschedulable writes the pod's PodScheduled=False condition with the reason; it fails
// with a conflict if the pod changed since p was read.
func (s *Scheduler) setUnschedulable(ctx context.Context, p *corev1.Pod, msg string) error {
	cp := p.DeepCopy()
	podutil.SetCondition(cp, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()})
	_, err := s.client.CoreV1().Pods(cp.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	return err
}

// writeReasons puts the engine's reason on every waiting pod (condition and Event), when
// it changes; the status writers write them off the cycle.
func (s *Scheduler) writeReasons(plan *engine.Plan, idx *index) {
	// A write that did not land is written again below if its reason still holds.
	for _, w := range s.statuses.takeFailed() {
		if s.reasons[w.p.UID] == w.msg {
			delete(s.reasons, w.p.UID)
		}
	}
	for jid, r := range plan.Pending {
		for _, p := range idx.jobs[jid] {
			if p.Spec.NodeName != "" || s.reasons[p.UID] == r.Message {
				continue
			}
			if s.isAssumed(p.UID) {
				continue
			}
			s.reasons[p.UID] = r.Message
			s.statuses.put(statusWrite{p: p, msg: r.Message})
		}
	}
}
