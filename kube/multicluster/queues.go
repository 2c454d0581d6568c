package multicluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// syncQueues keeps the manager's Queues on every ready worker. A worker's part of a
// queue's quota is what the manager's books leave it: the part kept there
// (spec.clusters), and of the rest of the quota what the queue's work in other clusters
// does not already use beyond their parts. So a queue's guarantee follows its work to the
// cluster it was dispatched to, and the worker's own scheduler reclaims for it there by
// the same rules, with the queue's global quota never promised twice over to work the
// manager dispatched. Its limit is the global limit less what it holds elsewhere; its
// over-quota weight the global one.
//
// A worker Queue the manager did not make, or that was changed there since the manager
// wrote it, is a conflict: reported on the manager's Queue (an Event) and never
// overwritten, and no work of that queue is dispatched to that worker meanwhile.
func (m *Manager) syncQueues(ctx context.Context, ready map[string]*worker, jobs []*batchv1.Job) {
	queues := m.managerQueues()
	uses := m.queueUses(m.opts.Now(), ready, jobs, queues)
	names := sortedNames(ready)
	for _, q := range queues {
		for _, c := range names {
			w := ready[c]
			want := localQueue(q, c, uses, names)
			m.keepQueue(ctx, w, q, want)
		}
	}
}

// keepQueue makes or updates the worker's Queue, or reports the conflict.
func (m *Manager) keepQueue(ctx context.Context, w *worker, q *v1alpha1.Queue, want v1alpha1.QueueSpec) {
	digest := specDigest(want)
	have := w.queue(q.Name)
	var conflict string
	switch {
	case have == nil:
		nq := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: q.Name, Labels: map[string]string{LabelManagedBy: m.opts.Name},
			Annotations: map[string]string{AnnotationManagerSpec: digest}}, Spec: want}
		if _, err := w.allot.AllotV1alpha1().Queues().Create(ctx, nq, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			m.opts.Log.Warn("making a queue on a worker", "cluster", w.name, "queue", q.Name, "err", err)
		}
	case have.Labels[LabelManagedBy] != m.opts.Name:
		conflict = fmt.Sprintf("worker cluster %s has its own Queue %s (no label %s=%s): the manager does not overwrite it, and dispatches none of the queue's work there",
			w.name, q.Name, LabelManagedBy, m.opts.Name)
	case specDigest(have.Spec) != have.Annotations[AnnotationManagerSpec]:
		conflict = fmt.Sprintf("Queue %s on worker cluster %s was changed there since the manager wrote it: the manager does not overwrite it, and dispatches none of the queue's work there until the change is undone or the Queue deleted",
			q.Name, w.name)
	case have.Annotations[AnnotationManagerSpec] != digest:
		cp := have.DeepCopy()
		cp.Spec = want
		cp.Annotations[AnnotationManagerSpec] = digest
		if _, err := w.allot.AllotV1alpha1().Queues().Update(ctx, cp, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			m.opts.Log.Warn("updating a queue on a worker", "cluster", w.name, "queue", q.Name, "err", err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conflicts[w.name] == nil {
		m.conflicts[w.name] = map[string]string{}
	}
	old := m.conflicts[w.name][q.Name]
	if conflict == "" {
		delete(m.conflicts[w.name], q.Name)
		return
	}
	m.conflicts[w.name][q.Name] = conflict
	if old != conflict {
		m.recorder.Event(q, corev1.EventTypeWarning, "QueueConflict", conflict)
	}
}

// conflicted says whether the worker keeps the queue differently from the manager.
func (m *Manager) conflicted(cluster, queue string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.conflicts[cluster][queue]
	return ok
}

// queueUses are the GPUs each queue's work holds or waits for in each cluster (its
// departments' count their queues'): the worker's pods of the queue, and the Jobs
// dispatched there whose pods are not seen yet.
func (m *Manager) queueUses(now time.Time, ready map[string]*worker, jobs []*batchv1.Job, queues []*v1alpha1.Queue) map[string]map[string]int64 {
	parent := map[string]string{}
	for _, q := range queues {
		parent[q.Name] = q.Spec.Parent
	}
	uses := map[string]map[string]int64{}
	add := func(q, c string, n int64) {
		for range 16 { // a department's parents, as deep as a queue tree goes
			if q == "" {
				return
			}
			if uses[q] == nil {
				uses[q] = map[string]int64{}
			}
			uses[q][c] += n
			q = parent[q]
		}
	}
	for c, w := range ready {
		seen := map[string]bool{}
		for _, o := range w.pods.GetStore().List() {
			p := o.(*corev1.Pod)
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
				continue
			}
			if o := p.Labels[LabelOrigin]; o != "" {
				seen[o] = true
			}
			add(p.Labels[v1alpha1.LabelQueue], c, podGPUs(&p.Spec))
		}
		for _, j := range jobs {
			if m.clusterOf(j) == c && !finished(j) && inFlight(j, now, seen) {
				ps, _ := candidatePods(j)
				for _, p := range ps {
					add(queueOf(j), c, podGPUs(&p.Spec))
				}
			}
		}
	}
	return uses
}

// localQueue is the manager's Queue as cluster c keeps it.
func localQueue(q *v1alpha1.Queue, c string, uses map[string]map[string]int64, clusters []string) v1alpha1.QueueSpec {
	s := *q.Spec.DeepCopy()
	s.Clusters = nil
	var parts int64
	for _, p := range q.Spec.Clusters {
		parts += int64(p.Quota)
	}
	part := int64(q.Spec.Clusters[c].Quota)
	var othersBeyond, othersUse int64
	for _, o := range clusters {
		if o == c {
			continue
		}
		u := uses[q.Name][o]
		othersUse += u
		othersBeyond += max(0, u-int64(q.Spec.Clusters[o].Quota))
	}
	global := int64(q.Spec.GPU.Quota)
	s.GPU.Quota = int32(part + max(0, global-parts-othersBeyond))
	if q.Spec.GPU.OverQuotaWeight == nil {
		w := q.Spec.GPU.Quota
		s.GPU.OverQuotaWeight = &w
	}
	if q.Spec.GPU.Limit != nil {
		l := int32(max(0, int64(*q.Spec.GPU.Limit)-othersUse))
		s.GPU.Limit = &l
		// A part kept here that the limit no longer leaves room for (the queue holds its
		// limit elsewhere) guarantees nothing: a Queue's limit is at least its quota.
		s.GPU.Quota = min(s.GPU.Quota, l)
	}
	return s
}

// podGPUs are the whole GPUs a pod asks for.
func podGPUs(s *corev1.PodSpec) int64 {
	var n int64
	for _, c := range s.Containers {
		if q, ok := c.Resources.Limits[gpuResource]; ok {
			n += q.Value()
		}
	}
	return n
}

func specDigest(s v1alpha1.QueueSpec) string {
	b, _ := json.Marshal(s)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

func sortedNames(ready map[string]*worker) []string {
	out := make([]string, 0, len(ready))
	for n := range ready {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// queueProblem says why a Job's queue may not take it, by the admission webhook's rules
// (no pod of it is made on the manager, so no webhook sees it there): a queue must be
// named and exist; one naming namespaces admits only those; one naming none admits the
// namespaces no queue claims (by spec.namespaces or as its default). "" when it may.
func (m *Manager) queueProblem(j *batchv1.Job) string {
	name := queueOf(j)
	if name == "" {
		return fmt.Sprintf("%s: no queue: set the label on the Job, or a default on namespace %s", v1alpha1.LabelQueue, j.Namespace)
	}
	var q *v1alpha1.Queue
	var claiming []string
	if d := m.namespaceLabels(j.Namespace)[v1alpha1.LabelQueue]; d != "" {
		claiming = append(claiming, d)
	}
	for _, mq := range m.managerQueues() {
		if mq.Name == name {
			q = mq
		}
		if slices.Contains(mq.Spec.Namespaces, j.Namespace) && !slices.Contains(claiming, mq.Name) {
			claiming = append(claiming, mq.Name)
		}
	}
	switch {
	case q == nil:
		return fmt.Sprintf("%s: queue %q does not exist on the manager", v1alpha1.LabelQueue, name)
	case len(q.Spec.Namespaces) > 0 && !slices.Contains(q.Spec.Namespaces, j.Namespace):
		return fmt.Sprintf("%s: namespace %q may not use queue %q; it admits namespaces %s", v1alpha1.LabelQueue, j.Namespace, name,
			strings.Join(q.Spec.Namespaces, ", "))
	case len(q.Spec.Namespaces) == 0 && len(claiming) > 0 && !slices.Contains(claiming, name):
		slices.Sort(claiming)
		return fmt.Sprintf("%s: namespace %q may not use queue %q, which admits only namespaces no queue claims: %q is %s's",
			v1alpha1.LabelQueue, j.Namespace, name, j.Namespace, strings.Join(claiming, ", "))
	}
	return ""
}
