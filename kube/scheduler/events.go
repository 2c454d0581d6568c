package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// podEvents carries the Events written once per pod and decision, the Scheduled
// Event of every bind and the FailedScheduling Event of every changed reason, to writers
// of its own. client-go's recorder writes one Event at a time (about 80 a second on a busy
// 2-core API server) behind a queue of 1,000 that drops what does not fit, and loses what
// is queued when the process stops: after a backlog of 2,000 pods bound in 2.5 s, 1,023 of
// their Scheduled Events had been written 45 s later, when the process was stopped. A
// pod's describe and the dashboard's timeline read these Events, so they are written here,
// several at a time, once no bind is waiting for a worker: the binds first, their record
// right after. The rarer Events stay with the recorder.
type podEvents struct {
	queue   chan *corev1.Event
	dropped atomic.Int64
	failed  atomic.Int64 // not written after eventTries
}

// eventQueue is how many Events wait for a writer at most. Past it (more than
// that many binds while binds never stop waiting) the newest are dropped, and said so.
const eventQueue = 20000

// eventWriters is how many Events are written at once.
const eventWriters = 4

// eventTries is how many times an Event is tried before it is given up.
const eventTries = 3

func newPodEvents() *podEvents {
	return &podEvents{queue: make(chan *corev1.Event, eventQueue)}
}

// add queues an Event; it never blocks a bind worker.
func (e *podEvents) add(ev *corev1.Event) {
	select {
	case e.queue <- ev:
	default:
		if n := e.dropped.Add(1); n == 1 || n%1000 == 0 {
			slog.Warn("allot scheduler: Events dropped, more binds and reasons than the API server took Events for", "dropped", n)
		}
	}
}

// writeEvents writes queued Events until ctx ends, each after the binds waiting for a worker.
func (s *Scheduler) writeEvents(ctx context.Context) {
	for {
		var ev *corev1.Event
		select {
		case <-ctx.Done():
			return
		case ev = <-s.events.queue:
		}
		if !s.afterWaitingBinds(ctx) {
			return
		}
		// A few tries a second apart ride out a busy or restarting API server; an outage
		// longer than that loses the Event, said once in a while rather than per Event.
		var err error
		for try := 0; try < eventTries; try++ {
			if try > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
			if _, err = s.client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err == nil ||
				apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || ctx.Err() != nil {
				break
			}
		}
		if err != nil && ctx.Err() == nil {
			if n := s.events.failed.Add(1); n == 1 || n%100 == 0 {
				slog.Warn("allot scheduler: Events not written", "failed", n, "last", ev.InvolvedObject.Name, "err", err)
			}
		}
	}
}

// scheduled records a bind done, as kube-scheduler does: the pod's describe and the
// dashboard's timeline (started, resumed after a reclaim) read it.
func (s *Scheduler) scheduled(j *bindJob) {
	msg := fmt.Sprintf("assigned %s/%s to %s", j.p.Namespace, j.p.Name, j.b.Node)
	switch {
	case j.b.Share > 0:
		msg += fmt.Sprintf(", %.3g of GPU %s", float64(j.b.Share)/1000, formatIndices(j.b.GPUs))
		msg += computeNote(j.env["ALLOT_GPU_COMPUTE"], j.p.Annotations[v1alpha1.AnnotationComputeMode])
		if s.sharingUnenforced(j.b.Node) {
			msg += "; " + v1alpha1.SharingNotEnforced
		}
	case len(j.b.GPUs) > 0:
		// The kubelet's device plugin picks the devices; the node's agent records which
		// (allot.dev/gpu-devices), and every other face shows those once known.
		msg += ", preferred GPUs " + formatIndices(j.b.GPUs) + " (the device plugin picks)"
	}
	s.events.add(s.newEvent(j.p, corev1.EventTypeNormal, "Scheduled", msg))
}

// newEvent is an Event about the pod from this scheduler, as the recorder would make it.
func (s *Scheduler) newEvent(p *corev1.Pod, typ, reason, msg string) *corev1.Event {
	now := metav1.NewTime(time.Now())
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: p.UID, ResourceVersion: p.ResourceVersion},
		Reason: reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: SchedulerName}, ReportingController: SchedulerName, ReportingInstance: s.opts.Identity,
	}
}

// eventNow writes an Event at once, for the records that must land before the action
// they explain; the recorder batches and may lose its queue with the process.
func (s *Scheduler) eventNow(ctx context.Context, p *corev1.Pod, typ, reason, msg string) error {
	ev := s.newEvent(p, typ, reason, msg)
	_, err := s.client.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// afterWaitingBinds returns once no bind waits for a bind worker (false if ctx ends first):
// the record of what was decided yields to carrying it out.
func (s *Scheduler) afterWaitingBinds(ctx context.Context) bool {
	for s.bindsWaiting.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// computeNote says how a slice's compute share holds (v1alpha1.ComputeModes), and where the
// pod asked a looser mode than its node allows, that it was held to the node's.
func computeNote(mode, asked string) string {
	var out string
	switch mode {
	case v1alpha1.ComputeCapped:
		out = ", compute capped at its share"
	case v1alpha1.ComputeFair:
		out = ", compute held to its share only while others use the GPU (fair)"
	case v1alpha1.ComputeShared:
		out = ", compute not capped (shared; memory held)"
	default:
		return ""
	}
	if asked != "" && asked != mode {
		out += fmt.Sprintf(" (%s asked %s: the node allows %s at most)", v1alpha1.AnnotationComputeMode, asked, mode)
	}
	return out
}
