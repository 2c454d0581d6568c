package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/allot-dev/allot/engine"
)

// Job statuses in reports.
const (
	StatusRunning   = "Running"
	StatusPending   = "Pending"
	StatusCompleted = "Completed"
)

// MaxCycles bounds the cycles after one step. A settled cluster yields an empty plan
// (DESIGN.md 3.9); hitting the bound means the engine flaps, and the run fails loudly.
const MaxCycles = 50

// Epoch is the simulated clock's start; any fixed instant keeps runs reproducible.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// World is a simulated cluster driven by the engine with a simulated clock.
type World struct {
	eng    *engine.Engine
	now    time.Time
	nodes  []engine.Node
	queues []engine.Queue
	held   []engine.Job // work of no queue in every snapshot (Hold)
	limits map[engine.QueueID]time.Duration
	jobs   []*simJob // live jobs in submission order
	byID   map[engine.JobID]*simJob
	seq    int
	plan   *engine.Plan
	events []string
	cycles int
	// observe, if set, sees every settled state: the time and the last (empty) plan.
	observe func(now time.Time, p *engine.Plan)
	// meta feeds the placement rules (anti-affinity) of scenario files; nil without.
	meta map[engine.JobID]jobMeta
	// partial holds, per gang running fewer than MinMember pods, since when it has.
	partial   map[engine.JobID]time.Time
	gangGrace time.Duration
	// usage is each queue's past use above quota, advanced with the clock when history is
	// on (halfLife > 0): what the scheduler keeps in the Queue's status.
	usage    map[engine.QueueID]engine.Usage
	halfLife time.Duration
	// accelerators are the kinds of other vendors' devices the nodes have, in the order
	// the engine counts them (engine.Snapshot.Accelerators).
	accelerators []string
	// pools are the node pools whose GPUs are divided apart (engine.Snapshot.Pools).
	pools []string
	// ElasticSpeed makes an elastic job (one with a Growth) run at the speed of its members
	// over its full size, its duration being its run time at full size: data-parallel
	// training scaled linearly. Without it, every job runs its duration once started.
	ElasticSpeed bool
}

type simJob struct {
	job      engine.Job
	duration time.Duration
	// ran is the work done, in time at full speed, up to accrued (while running, the last
	// change of its speed; before that its start).
	ran     time.Duration
	started time.Time // zero while not running
	accrued time.Time
	// width, where above 0, is the members an elastic job runs at full speed with (World.
	// ElasticSpeed): with fewer it runs slower in proportion; speed is the current one.
	width int
	speed float64
	// grew is whether the job was ever grown (a member added to its workload).
	grew   bool
	status string
	reason string
	// firstStart is when the job first ran; preemptions counts how often it stopped;
	// completed is when it finished.
	firstStart  time.Time
	preemptions int
	completed   time.Time
}

// NewWorld builds an empty cluster.
func NewWorld(eng *engine.Engine, nodes []engine.Node, queues []engine.Queue) *World {
	w := &World{eng: eng, now: Epoch, nodes: nodes, queues: queues,
		limits: map[engine.QueueID]time.Duration{}, byID: map[engine.JobID]*simJob{},
		partial: map[engine.JobID]time.Time{}, gangGrace: engine.DefaultGangGrace}
	for _, q := range queues {
		if q.InteractiveTimeLimit > 0 {
			w.limits[q.ID] = q.InteractiveTimeLimit
		}
	}
	w.accelerators = Accelerators(nodes)
	return w
}

// DividePools divides the GPUs of these node pools apart, each by the queues' quotas of it
// (engine.Snapshot.Pools; a queue's quota of pool k at engine.PoolResource(k)).
func (w *World) DividePools(pools []string) { w.pools = pools }

// KeepHistory makes the world remember each queue's use above quota with the given
// half-life, starting from the given GPU-seconds, and hand it to the engine in every
// snapshot. The engine's Options.UsageStrength decides what it does with it.
func (w *World) KeepHistory(halfLife time.Duration, start map[engine.QueueID]float64) {
	w.halfLife = halfLife
	w.usage = map[engine.QueueID]engine.Usage{}
	for _, q := range w.queues {
		w.usage[q.ID] = engine.Usage{GPUSeconds: start[q.ID], At: w.now}
	}
}

// historyTick is how often the clock stops, with history on, for the engine to see usage
// that has grown or decayed: a real scheduler sees it every cycle, and shares drift with it.
func (w *World) historyTick() time.Duration {
	return min(max(w.halfLife/48, time.Minute), time.Hour)
}

// moveClock advances the clock, accruing each queue's use above quota as the last settled
// plan left it (allocation is constant between events).
func (w *World) moveClock(to time.Time) {
	if w.usage != nil && w.plan != nil {
		for _, q := range w.queues {
			w.usage[q.ID] = w.usage[q.ID].Accrue(to, engine.AboveQuota(q, w.plan.Queues[q.ID]), w.halfLife)
		}
	}
	w.now = to
}

// Hold adds running work of no queue that every snapshot holds and no report lists (what
// keeps a GPU in MIG mode from being given whole).
func (w *World) Hold(jobs ...engine.Job) { w.held = append(w.held, jobs...) }

// Submit adds a pending job; submissions in one step keep their order.
func (w *World) Submit(j engine.Job, duration time.Duration) {
	w.seq++
	// Submission order must survive equal timestamps: a nanosecond per job orders them.
	j.SubmitTime = w.now.Add(time.Duration(w.seq))
	if j.Growth != nil {
		g := *j.Growth // the world changes it as the job grows and shrinks
		j.Growth = &g
	}
	sj := &simJob{job: j, duration: duration, status: StatusPending}
	if w.ElasticSpeed && j.Growth != nil {
		sj.width = len(j.Pods) + j.Growth.Max
	}
	w.jobs = append(w.jobs, sj)
	w.byID[j.ID] = sj
}

// Delete removes a job, freeing what it holds.
func (w *World) Delete(id engine.JobID) {
	w.jobs = slices.DeleteFunc(w.jobs, func(j *simJob) bool { return j.job.ID == id })
	delete(w.byID, id)
	delete(w.partial, id)
}

// Fail stops one pod on its own, as a crash or a failed node would; its controller makes
// it again, so it is pending. A pod not running is left as it is.
func (w *World) Fail(id engine.PodID) {
	for _, j := range w.jobs {
		for i := range j.job.Pods {
			if p := &j.job.Pods[i]; p.ID == id && p.Binding != nil {
				p.Binding = nil
				w.events = append(w.events, fmt.Sprintf("%s failed", id))
				w.updateStatus(j)
				w.trackPartial()
			}
		}
	}
}

// Restore brings an interrupted node back (its cloud's replacement joined): it takes pods
// again.
func (w *World) Restore(id engine.NodeID) {
	for i := range w.nodes {
		if w.nodes[i].ID == id {
			w.nodes[i].Unschedulable, w.nodes[i].Interruption, w.nodes[i].InterruptAt = false, "", time.Time{}
		}
	}
}

// Interrupt gives a spot node its cloud's notice, with its checkpoint grace already over:
// nothing new is placed there, and the engine stops what runs there in the next cycle
// (engine.Node.InterruptAt), each job counting one interruption against its budget.
func (w *World) Interrupt(id engine.NodeID) {
	for i := range w.nodes {
		if w.nodes[i].ID == id {
			w.nodes[i].Unschedulable = true
			w.nodes[i].Interruption = "spot capacity taken back"
			w.nodes[i].InterruptAt = w.now
		}
	}
}

// trackPartial notes since when each gang has run fewer than MinMember pods.
func (w *World) trackPartial() {
	for _, j := range w.jobs {
		if b := bound(&j.job); b > 0 && b < j.job.MinMember && j.status != StatusCompleted {
			if _, ok := w.partial[j.job.ID]; !ok {
				w.partial[j.job.ID] = w.now
			}
		} else {
			delete(w.partial, j.job.ID)
		}
	}
}

// Snapshot is the engine's view: every job that has not ended.
func (w *World) Snapshot() *engine.Snapshot {
	s := &engine.Snapshot{Now: w.now, Nodes: w.nodes, Queues: w.queues, Accelerators: w.accelerators, Pools: w.pools}
	if w.usage != nil {
		s.Queues = slices.Clone(w.queues)
		for i := range s.Queues {
			s.Queues[i].Usage = w.usage[s.Queues[i].ID].Decayed(w.now, w.halfLife)
		}
	}
	for _, j := range w.jobs {
		if j.status != StatusCompleted {
			job := j.job
			job.StartTime = j.started
			job.PartialSince = w.partial[job.ID]
			s.Jobs = append(s.Jobs, job)
		}
	}
	s.Jobs = append(s.Jobs, w.held...)
	if w.meta != nil {
		s.Rules = rulesFor(s.Jobs, w.meta)
	}
	return s
}

// Settle runs cycles until the plan is empty.
func (w *World) Settle() error {
	for i := 0; i < MaxCycles; i++ {
		plan := w.eng.Schedule(w.Snapshot())
		w.plan = plan
		w.cycles++
		if plan.Empty() {
			w.refreshReasons()
			if w.observe != nil {
				w.observe(w.now, plan)
			}
			return nil
		}
		w.apply(plan)
	}
	return fmt.Errorf("scheduling did not settle after %d cycles at t=%s: the engine keeps changing its plan (last: %d binds, %d evictions)",
		MaxCycles, w.now.Sub(Epoch), len(w.plan.Binds), len(w.plan.Evictions))
}

// checkQuiet runs n more cycles on a settled world; any change is a flapping engine.
func (w *World) checkQuiet(n int) error {
	for i := 0; i < n; i++ {
		if p := w.eng.Schedule(w.Snapshot()); !p.Empty() {
			return fmt.Errorf("not stable: extra cycle %d after settling planned %d binds and %d evictions", i+1, len(p.Binds), len(p.Evictions))
		}
	}
	return nil
}

func (w *World) apply(p *engine.Plan) {
	interrupted := map[engine.JobID]bool{}
	for _, e := range p.Evictions {
		if pod := w.pod(e.Job, e.Pod); pod != nil {
			pod.Binding = nil
			w.events = append(w.events, fmt.Sprintf("%s evicted: %s", e.Pod, e.Reason.Message))
			if e.Reason.Code == engine.ReasonInterrupted && !interrupted[e.Job] {
				// One interruption of the job, however many of its pods it stopped: what
				// the scheduler counts on its PodGroup.
				interrupted[e.Job] = true
				w.byID[e.Job].job.Interruptions++
			}
		}
	}
	for _, b := range p.Binds {
		if pod := w.pod(b.Job, b.Pod); pod != nil {
			bind := b.Binding
			pod.Binding = &bind
			w.makeInstances(bind)
		}
	}
	w.scale(p)
	for _, j := range w.jobs {
		w.updateStatus(j)
	}
	w.trackPartial()
}

// scale does what the scheduler asks of workloads elastic through their replica count
// (engine.Job.Growth): each grows by the members the plan says fit, its new pods
// waiting; and one that lost members beyond its minimum is scaled down by them, as the
// scheduler lowers its count before the members are stopped, instead of making them
// again to wait.
func (w *World) scale(p *engine.Plan) {
	evicted := map[engine.JobID]map[engine.PodID]bool{}
	for _, e := range p.Evictions {
		if evicted[e.Job] == nil {
			evicted[e.Job] = map[engine.PodID]bool{}
		}
		evicted[e.Job][e.Pod] = true
	}
	for _, j := range w.jobs {
		g := j.job.Growth
		if g == nil {
			continue
		}
		if gone := evicted[j.job.ID]; len(gone) > 0 && bound(&j.job) >= j.job.MinMember {
			kept := j.job.Pods[:0]
			for _, pod := range j.job.Pods {
				if gone[pod.ID] && pod.Binding == nil {
					g.Max++
					w.events = append(w.events, fmt.Sprintf("%s scaled down: %s removed", j.job.ID, pod.ID))
					continue
				}
				kept = append(kept, pod)
			}
			j.job.Pods = kept
		}
		for range p.Grow[j.job.ID].Members {
			id := w.newPodID(&j.job)
			j.job.Pods = append(j.job.Pods, engine.Pod{ID: id, Request: g.Pod})
			g.Max--
			j.grew = true
			w.events = append(w.events, fmt.Sprintf("%s grew: %s added", j.job.ID, id))
		}
	}
}

// newPodID names a job's next member after its highest-indexed one.
func (w *World) newPodID(j *engine.Job) engine.PodID {
	for k := len(j.Pods); ; k++ {
		id := engine.PodID(fmt.Sprintf("%s-%d", j.ID, k))
		if !slices.ContainsFunc(j.Pods, func(p engine.Pod) bool { return p.ID == id }) {
			return id
		}
	}
}

// Use records what a running pod was measured to use of its GPU's memory, as the node
// agent reports it; a pod not running has no reading.
func (w *World) Use(id engine.PodID, bytes int64) {
	for _, j := range w.jobs {
		for i := range j.job.Pods {
			if p := &j.job.Pods[i]; p.ID == id && p.Binding != nil {
				p.Binding.MemoryUsed = bytes
			}
		}
	}
}

// pod finds a pod of a live job; a plan naming anything else is ignored, as a binder
// ignores a pod deleted since the snapshot.
func (w *World) pod(job engine.JobID, id engine.PodID) *engine.Pod {
	j := w.byID[job]
	if j == nil {
		return nil
	}
	for i := range j.job.Pods {
		if j.job.Pods[i].ID == id {
			return &j.job.Pods[i]
		}
	}
	return nil
}

func bound(j *engine.Job) int {
	n := 0
	for _, p := range j.Pods {
		if p.Binding != nil {
			n++
		}
	}
	return n
}

// updateStatus tracks run time: a job runs while at least MinMember pods are placed.
func (w *World) updateStatus(j *simJob) {
	if j.status == StatusCompleted {
		return
	}
	running := bound(&j.job) >= j.job.MinMember
	switch {
	case running && j.status != StatusRunning:
		j.status, j.started, j.accrued, j.speed = StatusRunning, w.now, w.now, w.speedOf(j)
		if j.firstStart.IsZero() {
			j.firstStart = w.now
		}
	case running:
		if s := w.speedOf(j); s != j.speed {
			w.accrue(j)
			j.speed = s
		}
	case !running && j.status == StatusRunning:
		w.accrue(j)
		j.status, j.started = StatusPending, time.Time{}
		j.preemptions++
	}
}

// speedOf is a running job's speed: 1, or for an elastic job with a width its members
// placed over it. A job runs with at least one member placed (its minimum, at least 1),
// so the speed is never 0; the floor keeps done() finite for a job that says otherwise.
func (w *World) speedOf(j *simJob) float64 {
	if j.width == 0 {
		return 1
	}
	return float64(max(min(bound(&j.job), j.width), 1)) / float64(j.width)
}

// accrue adds the work a running job did since it was last accrued, at its speed.
func (w *World) accrue(j *simJob) {
	j.ran += time.Duration(float64(w.now.Sub(j.accrued)) * j.speed)
	j.accrued = w.now
}

// done is when a running job with a duration completes at its present speed.
func (j *simJob) done() time.Time {
	return j.accrued.Add(time.Duration(float64(j.duration-j.ran) / j.speed))
}

func (w *World) refreshReasons() {
	for _, j := range w.jobs {
		if j.status == StatusCompleted {
			continue
		}
		j.reason = ""
		if r, ok := w.plan.Pending[j.job.ID]; ok {
			j.reason = r.Message
		}
	}
}

// Advance moves the clock, completing jobs whose duration is reached and stopping
// interactive jobs past their queue's limit, scheduling after every such event.
func (w *World) Advance(d time.Duration) error {
	end := w.now.Add(d)
	for {
		next, ok := w.nextEvent()
		if !ok || next.After(end) {
			w.moveClock(end)
			return w.Settle()
		}
		w.moveClock(next)
		for _, j := range w.jobs {
			w.finishIfDue(j)
		}
		if err := w.Settle(); err != nil {
			return err
		}
	}
}

// nextEvent is the earliest time a running job completes or hits its time limit.
func (w *World) nextEvent() (time.Time, bool) {
	var next time.Time
	// A gang running partly is looked at again when its grace period ends.
	for _, since := range w.partial {
		if t := since.Add(w.gangGrace); t.After(w.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, j := range w.jobs {
		for _, t := range w.deadlines(j) {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
	}
	if w.usage != nil {
		if t := w.now.Add(w.historyTick()); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	// A job waiting for spot capacity first is looked at again when it may use on-demand.
	for _, j := range w.jobs {
		if j.job.Spot == engine.SpotFirst && j.job.OnDemandAfter > 0 && j.status != StatusRunning {
			if t := j.job.SubmitTime.Add(j.job.OnDemandAfter); t.After(w.now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next, !next.IsZero()
}

func (w *World) deadlines(j *simJob) []time.Time {
	if j.status != StatusRunning {
		return nil
	}
	var out []time.Time
	if j.duration > 0 {
		out = append(out, j.done())
	}
	if l, ok := w.limits[j.job.Queue]; ok && j.job.Class == engine.ClassInteractive {
		out = append(out, j.started.Add(l))
	}
	return out
}

func (w *World) finishIfDue(j *simJob) {
	if j.status != StatusRunning {
		return
	}
	if j.duration > 0 && !w.now.Before(j.done()) {
		w.complete(j, fmt.Sprintf("completed after running %s", j.duration))
		return
	}
	if l, ok := w.limits[j.job.Queue]; ok && j.job.Class == engine.ClassInteractive && !w.now.Before(j.started.Add(l)) {
		w.complete(j, fmt.Sprintf("stopped: reached queue %s's interactive time limit of %s", j.job.Queue, l))
		w.events = append(w.events, fmt.Sprintf("%s %s", j.job.ID, j.reason))
	}
}

func (w *World) complete(j *simJob, why string) {
	w.accrue(j)
	j.status, j.started, j.reason = StatusCompleted, time.Time{}, why
	j.completed = w.now
	for i := range j.job.Pods {
		j.job.Pods[i].Binding = nil
	}
}
