package engine

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// Options configures the engine. The zero value is the default placement, PlacementAllot.
type Options struct {
	Placement Placement
	// GPUPacking chooses a node's GPUs apart from how nodes are chosen (HAMi's GPU
	// scheduler policy beside its node policy); PackingDefault follows Placement.
	GPUPacking Packing
	// Seed drives the random placement policy; the same seed gives the same plans.
	Seed uint64
	// Workload is the mix of pod shapes fragmentation-aware placement plans for; empty
	// means the pods of the snapshot.
	Workload []Shape
	// MaxNodeTrials bounds how many nodes reclaim, preemption and consolidation try per
	// pending job, which keeps a cycle fast on large clusters. Zero means 64.
	MaxNodeTrials int
	// GangGrace is how long a gang may run with fewer than MinMember pods (a member died,
	// was deleted, or its node failed) before the rest are stopped so that it can start
	// again whole. Zero means DefaultGangGrace; negative never stops them.
	GangGrace time.Duration
	// UsageStrength is how much past use (Queue.Usage) tilts the division of GPUs above
	// quota among queues that want more: 0 (the default) ignores it; 1 lets a queue that
	// alone used everything get none while others want them. Quotas are never touched.
	UsageStrength float64
}

// DefaultGangGrace leaves a gang that lost a member time to get it back (its controller
// makes a new pod within a second or two, and the engine places it first), and is short
// enough that GPUs held by a gang that cannot run are not held for long.
const DefaultGangGrace = 5 * time.Second

// Engine turns snapshots into plans. It holds no state between cycles: everything it
// needs is in the snapshot, so a restarted scheduler continues where it stopped.
type Engine struct {
	opts Options
}

// New returns an engine with the given options.
func New(opts Options) *Engine {
	if opts.MaxNodeTrials <= 0 {
		opts.MaxNodeTrials = 64
	}
	if opts.GangGrace == 0 {
		opts.GangGrace = DefaultGangGrace
	}
	return &Engine{opts: opts}
}

// Schedule runs one cycle. The same snapshot always yields the same plan.
func (e *Engine) Schedule(snap *Snapshot) *Plan {
	s := newSession(snap, e.opts)
	if s.opts.Placement == PlacementFGD || s.opts.Placement == PlacementAllot {
		w := e.opts.Workload
		if len(w) == 0 {
			w = shapesOf(snap)
		}
		s.frag = newFragModel(w, snap.Nodes, s.opts.Placement == PlacementAllot)
	}
	s.computeFairShares()
	s.orderJobs()
	s.allocate(passGangs)
	s.allocate(passGrow)
	pool := s.newPool()
	s.consolidate(pool)
	s.reclaim(pool)
	s.preempt(pool)
	s.reclaimAndPreempt(pool)
	s.allocate(passIdleGangs)
	s.allocate(passIdleGrow)
	// Last: a request that only bursts keep out takes their memory back once nothing
	// else could place it, and the bursters stopped are not placed again this cycle.
	s.reclaimBursts()
	s.stopStaleGangs(snap.Now)
	s.stopInterrupted(snap.Now)
	grow := s.grow()
	p := s.plan(snap)
	p.Grow = grow
	return p
}

// stopStaleGangs is the rule for a gang found running partly (docs/design.md,
// "Scheduling rules"): one that this cycle could not complete and that has run below MinMember for
// the grace period has its remaining pods stopped, so that it starts again whole rather
// than hold GPUs it cannot use. KAI-Scheduler evicts such stale gangs the same way.
func (s *session) stopStaleGangs(now time.Time) {
	for _, j := range s.jobs {
		since := j.j.PartialSince
		if j.bound == 0 || j.bound >= j.j.MinMember {
			continue
		}
		grace := s.gangGrace(j)
		if grace < 0 {
			continue // the rule is off for this gang
		}
		lost := ""
		if len(j.j.Lost) > 0 {
			lost = " (lost: " + strings.Join(j.j.Lost, ", ") + ")"
		}
		var r Reason
		switch {
		case j.j.MembersEvicted:
			r = reasonf(ReasonGangPartial, "gang %s runs %d of its %d pods, the others evicted: the rest are stopped too, so that it starts again whole",
				j.j.ID, j.bound, j.j.MinMember)
		case !since.IsZero() && now.Sub(since) >= grace:
			r = reasonf(ReasonGangPartial, "gang %s ran %d of its %d pods for %s%s: the rest were stopped so that it starts again whole",
				j.j.ID, j.bound, j.j.MinMember, now.Sub(since).Round(time.Second), lost)
		default:
			continue
		}
		for _, p := range j.pods {
			if p.node != nil {
				s.unbind(p, r, "")
			}
		}
		j.reason = r
	}
}

// gangGrace is how long the job may run below MinMember: its own, its queue's (or the
// nearest ancestor's), else the engine's; negative: never stopped for it.
func (s *session) gangGrace(j *jobState) time.Duration {
	switch {
	case j.j.GangGrace != nil:
		return *j.j.GangGrace
	case j.q.gangGrace != nil:
		return *j.q.gangGrace
	}
	return s.opts.GangGrace
}

// orderJobs sorts each queue's jobs: priority first, then non-preemptible before
// preemptible (a notebook someone waits at goes before the team's own batch training, as
// Run:ai's interactive class does), then submission time (docs/design.md, "Scheduling
// rules").
func (s *session) orderJobs() {
	for _, q := range s.queues {
		sort.SliceStable(q.jobs, func(a, b int) bool { return jobBefore(q.jobs[a].j, q.jobs[b].j) })
	}
}

func jobBefore(a, b *Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if pa, pb := a.IsPreemptible(), b.IsPreemptible(); pa != pb {
		return pb
	}
	if !a.SubmitTime.Equal(b.SubmitTime) {
		return a.SubmitTime.Before(b.SubmitTime)
	}
	return a.ID < b.ID
}

// plan compares the session with the snapshot it started from.
func (s *session) plan(snap *Snapshot) *Plan {
	p := &Plan{Pending: map[JobID]Reason{}, Queues: make(map[QueueID]QueueStatus, len(s.queues))}
	for _, j := range s.jobs {
		moved := make([]bool, len(j.pods))
		stay, left := 0, false
		for i, ps := range j.pods {
			moved[i] = ps.orig != nil && (ps.node == nil || ps.orig.Node != ps.node.n.ID ||
				!slices.Equal(ps.orig.GPUs, ps.gpus) || !heldPart(ps.orig, ps.node).same(ps.share))
			left = left || moved[i]
			if ps.orig != nil && !moved[i] {
				stay++
			}
		}
		// An evicted pod is gone for good on Kubernetes (its controller makes a new one), so
		// a gang moved with some pods landing where they were would run partly until the
		// new ones are placed: it is moved whole instead, each pod evicted and placed again.
		var why *podState // a moved pod whose reason the rest take
		for _, ps := range j.pods {
			if ps.evictReason.Message != "" {
				why = ps
				break
			}
		}
		regroup := left && stay > 0 && stay < j.j.MinMember
		for i, ps := range j.pods {
			if regroup && ps.orig != nil && !moved[i] {
				moved[i] = true
				if ps.evictReason.Message == "" && why != nil {
					ps.evictReason, ps.evictFor = why.evictReason, why.evictFor
				}
			}
		}
		for i, ps := range j.pods {
			if moved[i] {
				p.Evictions = append(p.Evictions, Eviction{Job: j.j.ID, Pod: ps.p.ID, Reason: ps.evictReason, For: ps.evictFor})
			}
			if ps.node != nil && (ps.orig == nil || moved[i]) {
				p.Binds = append(p.Binds, Bind{Job: j.j.ID, Pod: ps.p.ID,
					Binding: ps.binding()})
			}
		}
		if j.bound < len(j.pods) {
			p.Pending[j.j.ID] = s.pendingReason(j)
		}
	}
	for _, o := range s.orphans {
		p.Pending[o.id] = o.why
	}
	for _, q := range s.queues {
		st := QueueStatus{FairShare: q.fair, Allocated: q.alloc, AllocatedNonPreemptible: q.allocNP, Requested: q.request}
		s.countJobs(q, &st)
		p.Queues[q.q.ID] = st
	}
	return p
}

func (s *session) countJobs(q *queueState, st *QueueStatus) {
	for _, j := range q.jobs {
		if j.started() {
			st.Running++
		} else {
			st.Pending++
		}
	}
	for _, c := range q.children {
		s.countJobs(c, st)
	}
}

// FairShares is the division of the snapshot's capacity by quotas and weights alone, past
// usage ignored: the yardstick against which a history-aware division is judged.
func FairShares(snap *Snapshot) map[QueueID]Resources {
	s := newSession(snap, Options{})
	s.computeFairShares()
	out := make(map[QueueID]Resources, len(s.queues))
	for _, q := range s.queues {
		out[q.q.ID] = q.fair
	}
	return out
}
