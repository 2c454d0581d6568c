package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/submit"
)

// dispatchers is how many Jobs are dispatched at once.
const dispatchers = 16

// dispatch places the manager's Jobs that wait: one engine cycle over every ready
// worker's nodes and pods and the manager's Queues says which cluster can start each whole
// now; those are created there. The rest wait on the manager, with each cluster's obstacle.
func (m *Manager) dispatch(ctx context.Context, now time.Time, ready map[string]*worker, jobs []*batchv1.Job) {
	seen := m.seenOrigins(ready)
	var cands []candidate
	open := m.openClusters(ready)
	var waiting []*batchv1.Job
	for _, j := range jobs {
		if finished(j) || j.DeletionTimestamp != nil {
			continue
		}
		c := m.clusterOf(j)
		problem := ""
		if c == "" {
			problem = m.queueProblem(j)
		}
		switch {
		case c != "":
			if ready[c] != nil && inFlight(j, now, seen) {
				cands = append(cands, candidate{job: j, pinned: c})
			}
		case j.Spec.Suspend != nil && *j.Spec.Suspend:
			// a suspended Job stays on the manager until it is resumed
		case problem != "":
			m.noteWaiting(ctx, j, problem)
		default:
			var allowed []string
			for _, c := range open {
				if !m.conflicted(c, queueOf(j)) {
					allowed = append(allowed, c)
				}
			}
			cands = append(cands, candidate{job: j, allowed: allowed})
			waiting = append(waiting, j)
		}
	}
	if len(waiting) == 0 {
		return
	}
	nodes, pods := m.objects(ready)
	queues, topologies := m.managerQueues(), m.managerTopologies()
	u := buildUnion(now, nodes, pods, queues, topologies, cands)
	plan := u.plan(m.eng, cands)
	decided := u.decide(plan, cands)
	var undecided []*batchv1.Job
	// Each dispatch is a few requests to two API servers; a burst of submissions is
	// dispatched several at a time.
	sem := make(chan struct{}, dispatchers)
	var wg sync.WaitGroup
	for _, j := range waiting {
		d := decided[engine.JobID(j.Namespace+"/"+j.Name)]
		if d.cluster == "" {
			undecided = append(undecided, j)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.dispatchTo(ctx, now, j, ready[d.cluster], d.why)
		}()
	}
	wg.Wait()
	if len(undecided) > 0 {
		m.explainWaiting(ctx, now, undecided, cands, ready, nodes, pods, queues, topologies)
	}
}

// explainWaiting writes on each Job no cluster can start why, cluster by cluster: the
// engine's reason with the Job confined to each cluster in turn.
func (m *Manager) explainWaiting(ctx context.Context, now time.Time, undecided []*batchv1.Job, cands []candidate, ready map[string]*worker,
	nodes map[string][]*corev1.Node, pods map[string][]*corev1.Pod, queues []*v1alpha1.Queue, topologies map[string]convert.Levels) {
	reasons := map[types.UID][]string{}
	names := m.clusterNames()
	open := map[string]bool{}
	for _, c := range m.openClusters(ready) {
		open[c] = true
	}
	for _, c := range names {
		if !open[c] {
			why := m.closedWhy(c)
			for _, j := range undecided {
				reasons[j.UID] = append(reasons[j.UID], c+": "+why)
			}
			continue
		}
		pinned := make([]candidate, 0, len(cands))
		for _, cd := range cands {
			if cd.pinned == "" {
				cd.allowed = []string{c}
			}
			pinned = append(pinned, cd)
		}
		u := buildUnion(now, nodes, pods, queues, topologies, pinned)
		plan := u.plan(m.eng, pinned)
		for _, j := range undecided {
			why := "it would start here"
			if m.conflicted(c, queueOf(j)) {
				why = "its queue " + queueOf(j) + " is kept differently there (a conflict)"
			} else if r, ok := plan.Pending[engine.JobID(j.Namespace+"/"+j.Name)]; ok {
				why = r.Message
			}
			reasons[j.UID] = append(reasons[j.UID], c+": "+why)
		}
	}
	for _, j := range undecided {
		msg := "no worker cluster can start it whole now"
		if len(names) == 0 {
			msg = "no worker cluster is registered (kubectl get workerclusters)"
		} else {
			msg += ": " + strings.Join(reasons[j.UID], "; ")
		}
		m.noteWaiting(ctx, j, msg)
	}
}

// noteWaiting writes why a Job waits on its annotation (when it changes), with an Event
// when it starts waiting.
func (m *Manager) noteWaiting(ctx context.Context, j *batchv1.Job, msg string) {
	key := string(j.UID)
	m.mu.Lock()
	before, had := m.waiting[key]
	m.waiting[key] = msg
	m.mu.Unlock()
	if before == msg && j.Annotations[AnnotationWaiting] == msg {
		return
	}
	if err := m.annotate(ctx, j, map[string]any{AnnotationWaiting: msg}); err != nil {
		m.opts.Log.Warn("writing why a job waits", "job", j.Namespace+"/"+j.Name, "err", err)
	}
	// One Event when it starts waiting: the reason's figures ("3 jobs ahead") change
	// every round, and the annotation keeps the latest.
	if !had {
		m.recorder.Event(j, corev1.EventTypeNormal, "Waiting", msg)
	}
}

// dispatchTo records the choice on the manager's Job first (a manager restarted between
// the two steps finds it and makes the copy, never a second one elsewhere), then makes the
// copy on the worker.
func (m *Manager) dispatchTo(ctx context.Context, now time.Time, j *batchv1.Job, w *worker, why string) {
	// At the Job's version as read: a manager working from an older one (a replica that
	// no longer leads, an informer behind) is refused rather than dispatch it twice.
	if err := m.annotateAt(ctx, j, j.ResourceVersion, map[string]any{AnnotationCluster: w.name,
		AnnotationDispatchedAt: now.UTC().Format(time.RFC3339Nano), AnnotationWaiting: nil, AnnotationCopy: nil}); err != nil {
		if !apierrors.IsConflict(err) {
			m.opts.Log.Warn("recording a dispatch", "job", j.Namespace+"/"+j.Name, "err", err)
		}
		return
	}
	m.mu.Lock()
	m.dispatched[j.UID] = w.name
	delete(m.waiting, string(j.UID))
	m.mu.Unlock()
	m.makeCopy(ctx, j, w)
	m.recorder.Eventf(j, corev1.EventTypeNormal, "Dispatched", "dispatched to worker cluster %s: %s", w.name, why)
}

// makeCopy makes the worker's copy and records its UID on the Job; a copy that cannot be
// made says why on the Job.
func (m *Manager) makeCopy(ctx context.Context, j *batchv1.Job, w *worker) {
	uid, err := m.createCopy(ctx, j, w)
	if err != nil {
		m.opts.Log.Warn("making a job's copy on its worker", "job", j.Namespace+"/"+j.Name, "cluster", w.name, "err", err)
		m.noteWaiting(ctx, j, fmt.Sprintf("dispatched to worker cluster %s, where its copy cannot be made: %v", w.name, err))
		return
	}
	if err := m.annotate(ctx, j, map[string]any{AnnotationCopy: string(uid)}); err != nil {
		m.opts.Log.Warn("recording a job's copy", "job", j.Namespace+"/"+j.Name, "err", err)
	}
}

// createCopy makes the worker's copy of a manager's Job: its spec without the manager's
// managedBy and the selector the manager's API server gave it, labelled with its origin.
func (m *Manager) createCopy(ctx context.Context, j *batchv1.Job, w *worker) (types.UID, error) {
	if _, known := w.namespaces.Load(j.Namespace); !known {
		if err := m.ensureWorkerNamespace(ctx, w, j.Namespace); err != nil {
			return "", fmt.Errorf("namespace %s on %s: %w", j.Namespace, w.name, err)
		}
		w.namespaces.Store(j.Namespace, true)
	}
	cp := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: *j.Spec.DeepCopy()}
	for k, v := range j.Labels {
		cp.Labels[k] = v
	}
	for k, v := range j.Annotations {
		switch k {
		case AnnotationCluster, AnnotationDispatchedAt, AnnotationWaiting, corev1.LastAppliedConfigAnnotation:
		default:
			cp.Annotations[k] = v
		}
	}
	cp.Labels[LabelOrigin] = string(j.UID)
	cp.Spec.ManagedBy, cp.Spec.Selector, cp.Spec.ManualSelector = nil, nil, nil
	// The manager's Job keeps its TTL (the cluster's TTL controller removes it once the
	// copy's end is mirrored); a copy removed on its own would leave the manager unsure
	// whether it ran.
	cp.Spec.TTLSecondsAfterFinished = nil
	tl := map[string]string{}
	for k, v := range j.Spec.Template.Labels {
		if !strings.HasPrefix(k, "batch.kubernetes.io/") && k != "controller-uid" && k != "job-name" {
			tl[k] = v
		}
	}
	tl[LabelOrigin] = string(j.UID)
	if q := queueOf(j); q != "" {
		tl[v1alpha1.LabelQueue] = q
	}
	cp.Spec.Template.Labels = tl
	// The manager placed it by Allot's rules: Allot's scheduler on the worker starts it.
	if s := cp.Spec.Template.Spec.SchedulerName; s == "" || s == corev1.DefaultSchedulerName {
		cp.Spec.Template.Spec.SchedulerName = v1alpha1.SchedulerName
	}
	if err := m.copyService(ctx, j, w); err != nil {
		return "", err
	}
	made, err := w.client.BatchV1().Jobs(j.Namespace).Create(ctx, cp, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		have, gerr := w.client.BatchV1().Jobs(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{})
		if gerr != nil {
			return "", gerr
		}
		if have.Labels[LabelOrigin] != string(j.UID) {
			return "", fmt.Errorf("worker cluster %s has a Job %s/%s of its own, not this Job's copy", w.name, j.Namespace, j.Name)
		}
		return have.UID, nil
	}
	if apierrors.IsNotFound(err) {
		w.namespaces.Delete(j.Namespace) // deleted there since: made again next time
	}
	if err != nil {
		return "", err
	}
	return made.UID, nil
}

// ensureWorkerNamespace makes the Job's namespace on the worker where it is missing,
// with the Pod Security labels the manager's namespace has, so that its pods run under
// the same rules there.
func (m *Manager) ensureWorkerNamespace(ctx context.Context, w *worker, ns string) error {
	labels := map[string]string{}
	for k, v := range m.namespaceLabels(ns) {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			labels[k] = v
		}
	}
	_, err := w.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// copyService copies the headless Service a distributed Job's workers find each other by
// (allot submit --workers makes it, named and labelled after the Job) beside its copy.
func (m *Manager) copyService(ctx context.Context, j *batchv1.Job, w *worker) error {
	svc, err := m.client.CoreV1().Services(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Labels[submit.LabelWorkload] != j.Name || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil
	}
	labels := map[string]string{LabelOrigin: string(j.UID)}
	for k, v := range svc.Labels {
		labels[k] = v
	}
	cp := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: svc.Spec.Selector, Ports: svc.Spec.Ports,
			PublishNotReadyAddresses: svc.Spec.PublishNotReadyAddresses}}
	_, err = w.client.CoreV1().Services(j.Namespace).Create(ctx, cp, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// annotate merges annotations into a manager's Job (nil removes one).
func (m *Manager) annotate(ctx context.Context, j *batchv1.Job, ann map[string]any) error {
	return m.annotateAt(ctx, j, "", ann)
}

// annotateAt is annotate at that resourceVersion of the Job ("": any).
func (m *Manager) annotateAt(ctx context.Context, j *batchv1.Job, rv string, ann map[string]any) error {
	md := map[string]any{"annotations": ann}
	if rv != "" {
		md["resourceVersion"] = rv
	}
	patch, _ := json.Marshal(map[string]any{"metadata": md})
	_, err := m.client.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// clusterOf is where a manager's Job was dispatched: what this manager did, before its
// informer shows it, else the annotation.
func (m *Manager) clusterOf(j *batchv1.Job) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clusterOfLocked(j)
}

func (m *Manager) clusterOfLocked(j *batchv1.Job) string {
	if c, ok := m.dispatched[j.UID]; ok {
		return c
	}
	return j.Annotations[AnnotationCluster]
}

// pinFor is how long a dispatched Job whose pods the worker does not show yet keeps its
// room in the manager's plan: its copy is being made, or its pods are. Past it the worker
// says what there is (a copy suspended there, or whose pods are refused, holds nothing).
const pinFor = 2 * time.Minute

// inFlight says whether a dispatched Job's room is still its own though its worker shows
// none of its pods: dispatched lately, and not suspended.
func inFlight(j *batchv1.Job, now time.Time, seen map[string]bool) bool {
	if seen[string(j.UID)] || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
		return false
	}
	at, err := time.Parse(time.RFC3339Nano, j.Annotations[AnnotationDispatchedAt])
	return err != nil || now.Sub(at) < pinFor // unreadable: just dispatched, not in the informer yet
}

// seenOrigins are the manager's Jobs whose pods the workers show.
func (m *Manager) seenOrigins(ready map[string]*worker) map[string]bool {
	seen := map[string]bool{}
	for _, w := range ready {
		for _, o := range w.pods.GetStore().List() {
			if u := o.(*corev1.Pod).Labels[LabelOrigin]; u != "" {
				seen[u] = true
			}
		}
	}
	return seen
}

// openClusters are the ready workers that take new work (not paused), by name: those
// where the manager holds its lease, so that the worker's fence would stop what is sent
// there if the manager lost it.
func (m *Manager) openClusters(ready map[string]*worker) []string {
	var out []string
	now := m.opts.Now()
	for _, c := range sortedNames(ready) {
		wc, ok := m.workerCluster(c)
		if at, _ := ready[c].lease(); ok && !wc.Spec.Paused && now.Sub(at) < m.opts.LeaseDuration {
			out = append(out, c)
		}
	}
	return out
}

// closedWhy says why a registered cluster takes no work now.
func (m *Manager) closedWhy(c string) string {
	wc, ok := m.workerCluster(c)
	if ok && wc.Spec.Paused {
		return "paused (spec.paused)"
	}
	m.mu.Lock()
	rf, refused := m.refused[c]
	w := m.workers[c]
	m.mu.Unlock()
	if refused {
		return rf.message
	}
	if w == nil {
		return "not connected yet"
	}
	okay, _, msg, _, lost := w.health()
	if !okay && msg != "" {
		return fmt.Sprintf("%s (since %s)", msg, lost.UTC().Format(time.RFC3339))
	}
	if at, why := w.lease(); m.opts.Now().Sub(at) >= m.opts.LeaseDuration {
		if why == "" {
			why = "not renewed yet"
		}
		return fmt.Sprintf("the manager does not hold its lease %s/%s there (%s): the worker's fence would not stop what is sent there if the manager lost it",
			m.opts.Namespace, LeaseName, why)
	}
	return "its objects are still being read"
}

func (m *Manager) workerCluster(name string) (*v1alpha1.WorkerCluster, bool) {
	o, ok, _ := m.clusters.GetStore().GetByKey(name)
	if !ok {
		return nil, false
	}
	return o.(*v1alpha1.WorkerCluster), true
}

func (m *Manager) clusterNames() []string {
	var out []string
	for _, o := range m.clusters.GetStore().List() {
		out = append(out, o.(*v1alpha1.WorkerCluster).Name)
	}
	sort.Strings(out)
	return out
}

// objects are the ready workers' nodes and live pods, by cluster.
func (m *Manager) objects(ready map[string]*worker) (map[string][]*corev1.Node, map[string][]*corev1.Pod) {
	nodes, pods := map[string][]*corev1.Node{}, map[string][]*corev1.Pod{}
	for c, w := range ready {
		for _, o := range w.nodes.GetStore().List() {
			nodes[c] = append(nodes[c], o.(*corev1.Node))
		}
		for _, o := range w.pods.GetStore().List() {
			p := o.(*corev1.Pod)
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				pods[c] = append(pods[c], p)
			}
		}
	}
	return nodes, pods
}
