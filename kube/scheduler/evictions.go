package scheduler

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/engine"
)

// evict has the API server evict the pods the plan takes away, each after an Event saying
// why. It returns the nodes that lose a pod and the pods evicted (binds onto those nodes
// wait: apply); false when the Lease may no longer be ours, and nothing more of the plan
// may be carried out. Each eviction is assumed from its plan on (assumed evictions, as
// binds are): until the informer shows its pod terminating, the next cycles count that
// pod as leaving. The requests are made within the cycle: made in the background, the
// cycles that ran meanwhile (a pod's every change wakes one) took 6.0 s of CPU against
// 1.4 s, on the two cores the API server shares, and the reclaim took 32.7 s against 23.3 s
// (allot bench --scenario reclaim-all --nodes 100, one run each on a loaded machine).
func (s *Scheduler) evict(ctx context.Context, plan *engine.Plan, idx *index) (evictedOn map[engine.NodeID]bool, evicted map[engine.PodID]bool, ok bool) {
	evictedOn = map[engine.NodeID]bool{}
	evicted = map[engine.PodID]bool{}
	var planned []eviction
	// Members of elastic workloads are stopped by their own controller first (scale.go);
	// binds onto their devices wait all the same.
	held := s.shrinkFirst(ctx, plan, idx)
	s.amu.Lock()
	for _, e := range plan.Evictions {
		p := idx.pods[e.Pod]
		if p == nil {
			continue
		}
		evicted[e.Pod] = true
		evictedOn[engine.NodeID(p.Spec.NodeName)] = true
		if held[e.Pod] {
			continue
		}
		// One request per pod: until the informer shows it terminating, the next cycles
		// may plan the same eviction again.
		if at, ok := s.evicting[p.UID]; ok && time.Since(at) < evictionResend {
			continue
		}
		planned = append(planned, eviction{p, e.Reason.Message, e.Job})
	}
	s.amu.Unlock()
	if len(planned) == 0 {
		return evictedOn, evicted, true
	}
	if !s.fence.ok() {
		return evictedOn, evicted, false // not sure to hold the Lease: nothing of this plan
	}
	now := s.opts.Now()
	s.amu.Lock()
	for _, e := range planned {
		s.evicting[e.p.UID] = time.Now()
		s.evicted[e.p.UID] = now // assumed, until the request fails
	}
	s.amu.Unlock()
	s.carryOut(ctx, planned)
	return evictedOn, evicted, s.fence.ok()
}

// eviction is one pod to evict, why, and the job it takes the pod from.
type eviction struct {
	p   *corev1.Pod
	why string
	job engine.JobID
}

// forget drops an eviction not carried out: the pod runs on, and the next cycle that still
// plans it asks again (after evictionRetry where it failed, else at once).
func (s *Scheduler) forget(p *corev1.Pod, retryIn time.Duration) {
	s.amu.Lock()
	defer s.amu.Unlock()
	delete(s.evicted, p.UID)
	if retryIn > 0 {
		s.evicting[p.UID] = time.Now().Add(retryIn - evictionResend)
	} else {
		delete(s.evicting, p.UID)
	}
}

// stillEvicting restarts the clocks of an eviction in flight (evictionResend,
// evictionAssumeFor) as it goes out: 800 at once took 28 s to write on a loaded API server
// (allot bench --scenario reclaim-all --nodes 100), and counted from the plan the last
// ones were planned and asked for again before their first request was even sent.
func (s *Scheduler) stillEvicting(p *corev1.Pod) {
	s.amu.Lock()
	defer s.amu.Unlock()
	if _, ok := s.evicted[p.UID]; ok {
		s.evicted[p.UID] = s.opts.Now()
		s.evicting[p.UID] = time.Now()
	}
}

// carryOut writes one cycle's evictions, a job at a time: every Event of the job's pods,
// then their eviction requests. The jobs go through two stages at once, evictWorkers
// requests in flight in each: a job whose Events are all written has its pods evicted while
// later jobs' Events are still being written, so the victims start leaving (and the
// kubelet's writes start) at the cycle's first job, not after its last Event.
func (s *Scheduler) carryOut(ctx context.Context, planned []eviction) {
	// Within a job the Events come before any request: a scheduler that dies part-way leaves
	// a record of why each pod went, never an unexplained loss, and the next leader reads on
	// a gang's running pods that its eviction was cut short.
	// Many requests at once, as binds go: each is a write the API server makes durable
	// before it answers, and one after another a reclaim of 400 one-GPU pods took 43 s
	// (allot bench --scenario reclaim-all --nodes 50).
	written := make([]bool, len(planned))
	jobs, jobOf := byJob(planned)
	left := make([]int, len(jobs)) // Events of each job not yet answered
	for j, members := range jobs {
		left[j] = len(members)
	}
	var mu sync.Mutex
	ready := make(chan int, len(planned)) // pods whose job's Events are all answered
	var evicting sync.WaitGroup
	evicting.Add(1)
	go func() {
		defer evicting.Done()
		inParallelFrom(ready, min(evictWorkers, len(planned)), func(i int) { s.request(ctx, planned[i], written[i]) })
	}()
	// The Events go job after job, so that each job's are answered as soon as can be.
	order := slices.Concat(jobs...)
	inParallel(len(order), func(k int) {
		i := order[k]
		if s.fence.ok() {
			if err := s.eventNow(ctx, planned[i].p, corev1.EventTypeNormal, "Evicted", planned[i].why); err != nil {
				slog.Warn("allot scheduler: evict: event not written, pod not evicted", "pod", planned[i].p.Namespace+"/"+planned[i].p.Name, "err", err)
			} else {
				written[i] = true
				s.stillEvicting(planned[i].p) // a large batch waits its turn: count from the request
			}
		}
		mu.Lock()
		j := jobOf[i]
		left[j]--
		done := left[j] == 0
		mu.Unlock()
		if done {
			for _, i := range jobs[j] {
				ready <- i
			}
		}
	})
	close(ready)
	evicting.Wait()
}

// byJob groups the planned evictions by the job they take pods from, in the plan's order:
// each job's indices into planned, and each eviction's job.
func byJob(planned []eviction) (jobs [][]int, jobOf []int) {
	at := map[engine.JobID]int{}
	jobOf = make([]int, len(planned))
	for i, e := range planned {
		j, ok := at[e.job]
		if !ok {
			j = len(jobs)
			at[e.job] = j
			jobs = append(jobs, nil)
		}
		jobs[j] = append(jobs[j], i)
		jobOf[i] = j
	}
	return jobs, jobOf
}

// request asks the API server to evict e's pod, once its Event is written, and keeps what
// the answer says: the pod leaving, or running on and asked again later.
func (s *Scheduler) request(ctx context.Context, e eviction, written bool) {
	p, why := e.p, e.why
	if !written || !s.fence.ok() {
		// Not sure to hold the Lease, or no record of why: not evicted.
		s.forget(p, 0)
		return
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Annotations: s.leaderMark(nil)},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
	err := s.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
	if apierrors.IsConflict(err) && s.stillThere(ctx, p) {
		// The API server answers Conflict for a pod of the name that is another pod,
		// but also where it did not evict (a PodDisruptionBudget's status contended
		// past its retries, a finished pod's precondition): a pod still there, not
		// leaving, is running, and taken for leaving it would free its queue's share
		// and devices in the engine's books for evictionAssumeFor.
		s.forget(p, evictionRetry)
		slog.Info("allot scheduler: evict: conflict, the pod is still running; asked again later", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	switch {
	case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Evicted, or already gone (a pod of the same name is another pod): assumed
		// until the informer shows it terminating or gone. A cycle in between that
		// counted it as running would see its queue still holding it and, placing a
		// gang anew on that partial picture, pick further victims (2,304 evicted for
		// a gang of 2,000 GPUs: allot bench --scenario reclaim-big).
		s.stillEvicting(p)
	case apierrors.IsTooManyRequests(err):
		// Asked again only after evictionResend, so that a budget that holds for long
		// does not add an Evicted and an EvictionBlocked Event every cycle.
		s.amu.Lock()
		delete(s.evicted, p.UID)
		s.amu.Unlock()
		s.recorder.Eventf(p, corev1.EventTypeWarning, "EvictionBlocked", "not evicted after all: a PodDisruptionBudget does not allow it (%s)", why)
	default:
		s.forget(p, evictionRetry)
		s.recorder.Eventf(p, corev1.EventTypeWarning, "EvictionFailed", "not evicted after all: %v", err)
		slog.Warn("allot scheduler: evict", "pod", p.Name, "err", err)
	}
}

// stillThere tells whether pod p itself (by UID) is still in the API server and not
// leaving; an error reading it says no, as the eviction's own answer did.
func (s *Scheduler) stillThere(ctx context.Context, p *corev1.Pod) bool {
	cur, err := s.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	return err == nil && cur.UID == p.UID && cur.DeletionTimestamp == nil
}

// evictWorkers is how many of a cycle's eviction requests (and, before them, their Events)
// are in flight at once.
const evictWorkers = 32

// inParallel calls f for 0..n-1, evictWorkers at a time, and returns when all are done.
func inParallel(n int, f func(i int)) {
	next := make(chan int)
	go func() {
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
	}()
	inParallelFrom(next, min(evictWorkers, n), f)
}

// inParallelFrom calls f for each value from next, workers at a time, and returns once
// next is closed and every call has returned.
func inParallelFrom(next <-chan int, workers int, f func(i int)) {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// evictionPlanned tells whether a running pod of the job carries an Evicted Event from us
// written since it started: an eviction decided and not carried out.
func (s *Scheduler) evictionPlanned(ctx context.Context, j *engine.Job, idx *index) bool {
	for _, ep := range j.Pods {
		p := idx.pods[ep.ID]
		if ep.Binding == nil || p == nil || p.Status.StartTime == nil {
			continue
		}
		evs, err := s.client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=Evicted"})
		if err != nil {
			continue
		}
		for _, ev := range evs.Items {
			if ev.Source.Component == SchedulerName && !ev.LastTimestamp.Before(p.Status.StartTime) {
				return true
			}
		}
	}
	return false
}

// evictionResend is how long an eviction request stands before the same eviction, still
// planned (the pod not yet seen terminating), is requested again.
const evictionResend = 30 * time.Second

// evictionAssumeFor is how long an accepted eviction counts as the pod terminating while
// the informer does not show it so; past it the pod is taken as running again (and, still
// planned, evicted again: evictionResend).
const evictionAssumeFor = evictionResend

// asEvicted is p as the API server made it on accepting its eviction at at: terminating,
// its grace period running, and marked as disrupted. The snapshot then counts it as
// leaving: its devices free to the engine but not to binds (index.leaving), its queue no
// longer holding it, its gang marked as losing a member by eviction.
func asEvicted(p *corev1.Pod, at time.Time) *corev1.Pod {
	q := p.DeepCopy()
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if q.Spec.TerminationGracePeriodSeconds != nil {
		grace = *q.Spec.TerminationGracePeriodSeconds
	}
	dt := metav1.NewTime(at.Add(time.Duration(grace) * time.Second))
	q.DeletionTimestamp = &dt
	q.DeletionGracePeriodSeconds = &grace
	q.Status.Conditions = append(q.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(at)})
	return q
}

// evictionRetry is how soon an eviction that failed (not refused by a budget) is tried again.
const evictionRetry = 5 * time.Second
