package multicluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// mirror keeps each dispatched Job and its copy in step: the copy's status on the
// manager's Job, the manager's suspend on the copy, and the worker's reason while its pods
// wait. A copy whose Job is gone from the manager, or was dispatched again elsewhere, is
// deleted (with an Event on the Job, when there is one).
func (m *Manager) mirror(ctx context.Context, ready map[string]*worker, jobs []*batchv1.Job) {
	byUID := make(map[types.UID]*batchv1.Job, len(jobs))
	for _, j := range jobs {
		byUID[j.UID] = j
	}
	// Each is a write or two; after a burst of dispatches, a thousand copies change at once.
	sem := make(chan struct{}, dispatchers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for c, w := range ready {
		copies := w.dispatchedJobs()
		waitingPods := pendingReasons(w)
		for origin, cp := range copies {
			j := byUID[types.UID(origin)]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if j == nil || m.clusterOf(j) != c {
					m.removeCopy(ctx, w, cp, j)
					return
				}
				m.keepInStep(ctx, w, j, cp, waitingPods[origin])
			}()
		}
		for _, j := range jobs {
			if m.clusterOf(j) != c || finished(j) || j.DeletionTimestamp != nil {
				continue
			}
			if _, ok := copies[string(j.UID)]; ok {
				continue
			}
			if j.Annotations[AnnotationCopy] == "" {
				// Dispatched here and no copy made: the manager stopped between its two
				// steps (creating it again is harmless: an existing copy is found).
				m.makeCopy(ctx, j, w)
				continue
			}
			// A copy was made and is gone from the worker (deleted there, or removed by a
			// TTL before its end was mirrored): it may have run, so it is not made again.
			at, _ := time.Parse(time.RFC3339Nano, j.Annotations[AnnotationDispatchedAt])
			if m.opts.Now().Sub(at) > copyLag {
				m.noteWaiting(ctx, j, fmt.Sprintf("its copy on worker cluster %s (UID %s) is gone from there; it is not made again, since it may have run: delete this Job, or submit it again",
					c, j.Annotations[AnnotationCopy]))
			}
		}
	}
}

// copyLag is how long a copy just made may be missing from the worker's informer before
// it is taken to be gone.
const copyLag = 30 * time.Second

// keepInStep mirrors one copy.
func (m *Manager) keepInStep(ctx context.Context, w *worker, j, cp *batchv1.Job, waiting string) {
	want := j.Spec.Suspend != nil && *j.Spec.Suspend
	have := cp.Spec.Suspend != nil && *cp.Spec.Suspend
	if want != have || cp.Annotations[AnnotationFenced] != "" {
		if err := setSuspend(ctx, w.client, cp, want, ""); err != nil {
			m.opts.Log.Warn("passing suspend to a copy", "job", j.Namespace+"/"+j.Name, "cluster", w.name, "err", err)
		} else if cp.Annotations[AnnotationFenced] != "" && !want {
			m.recorder.Eventf(j, corev1.EventTypeNormal, "Resumed", "worker cluster %s answers the manager again: its copy, suspended by the worker's fence, runs again", w.name)
		}
	}
	if !apiequality.Semantic.DeepEqual(j.Status, cp.Status) {
		up := j.DeepCopy()
		up.Status = *cp.Status.DeepCopy()
		if _, err := m.client.BatchV1().Jobs(j.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			m.opts.Log.Warn("mirroring a job's status", "job", j.Namespace+"/"+j.Name, "cluster", w.name, "err", err)
		}
	}
	msg := ""
	if waiting != "" {
		msg = "on worker cluster " + w.name + ": " + waiting
	}
	if msg != j.Annotations[AnnotationWaiting] {
		var v any = msg
		if msg == "" {
			v = nil
		}
		if err := m.annotate(ctx, j, map[string]any{AnnotationWaiting: v}); err != nil {
			m.opts.Log.Warn("mirroring why a job waits", "job", j.Namespace+"/"+j.Name, "err", err)
		}
	}
}

// removeCopy deletes a worker's copy that is no longer the manager's choice.
func (m *Manager) removeCopy(ctx context.Context, w *worker, cp *batchv1.Job, j *batchv1.Job) {
	if cp.DeletionTimestamp != nil {
		return
	}
	bg := metav1.DeletePropagationBackground
	err := w.client.BatchV1().Jobs(cp.Namespace).Delete(ctx, cp.Name, metav1.DeleteOptions{PropagationPolicy: &bg,
		Preconditions: &metav1.Preconditions{UID: &cp.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		m.opts.Log.Warn("deleting a copy", "job", cp.Namespace+"/"+cp.Name, "cluster", w.name, "err", err)
		return
	}
	if svc, err := w.client.CoreV1().Services(cp.Namespace).Get(ctx, cp.Name, metav1.GetOptions{}); err == nil && svc.Labels[LabelOrigin] == cp.Labels[LabelOrigin] {
		_ = w.client.CoreV1().Services(cp.Namespace).Delete(ctx, cp.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &svc.UID}})
	}
	if j != nil {
		m.recorder.Eventf(j, corev1.EventTypeNormal, "CopyDeleted", "deleted its copy on worker cluster %s: it was dispatched again to %s while %s did not answer",
			w.name, orNone(m.clusterOf(j)), w.name)
	}
}

// handleLost dispatches again the Jobs of a worker that has not answered for LostAfter
// (by then its fence suspended them there), unless a Job says it must not run again;
// that one waits, saying so.
func (m *Manager) handleLost(ctx context.Context, now time.Time, jobs []*batchv1.Job) {
	lost := map[string]time.Time{}
	m.mu.Lock()
	// A Job on a cluster no longer registered (its WorkerCluster deleted, also while the
	// manager was down) is on a lost worker from when the manager first saw it gone: the
	// manager renews no lease there, so the worker's fence stops its copy in time.
	registered := map[string]bool{}
	for _, n := range m.clusterNames() {
		registered[n] = true
	}
	referenced := map[string]bool{}
	for _, j := range jobs {
		c := m.clusterOfLocked(j)
		if c == "" || finished(j) {
			continue
		}
		referenced[c] = true
		if _, seen := m.down[c]; !seen && !registered[c] {
			m.down[c] = now
		}
	}
	for c, since := range m.down {
		if !registered[c] && !referenced[c] {
			delete(m.down, c)
		} else if now.Sub(since) >= m.opts.LostAfter {
			lost[c] = since
		}
	}
	m.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	for _, j := range jobs {
		c := m.clusterOf(j)
		since, isLost := lost[c]
		if !isLost || finished(j) {
			continue
		}
		if j.Annotations[AnnotationRedispatch] == "never" {
			m.noteWaiting(ctx, j, fmt.Sprintf("worker cluster %s has not answered since %s; not dispatched again elsewhere (%s: never)",
				c, since.UTC().Format(time.RFC3339), AnnotationRedispatch))
			continue
		}
		if err := m.annotateAt(ctx, j, j.ResourceVersion, map[string]any{AnnotationCluster: nil, AnnotationDispatchedAt: nil, AnnotationCopy: nil}); err != nil {
			m.opts.Log.Warn("taking a job back from a lost worker", "job", j.Namespace+"/"+j.Name, "err", err)
			continue
		}
		m.mu.Lock()
		m.dispatched[j.UID] = ""
		m.mu.Unlock()
		m.recorder.Eventf(j, corev1.EventTypeWarning, "WorkerLost",
			"worker cluster %s has not answered since %s (over %s): dispatched again; its copy there, suspended by the worker's fence once the manager's lease ran out, is deleted when it answers",
			c, since.UTC().Format(time.RFC3339), m.opts.LostAfter)
	}
}

// pendingReasons are, by origin, the worker scheduler's reason for the first pod of each
// dispatched Job that waits.
func pendingReasons(w *worker) map[string]string {
	out := map[string]string{}
	for _, o := range w.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		origin := p.Labels[LabelOrigin]
		if origin == "" || p.Spec.NodeName != "" || out[origin] != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				out[origin] = strings.TrimSpace(c.Message)
			}
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "no cluster yet"
	}
	return s
}
