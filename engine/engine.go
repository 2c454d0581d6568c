package engine

import (
	"slices"
	"sort"
)

// Options configures the engine. The zero value is the default placement, PlacementAllot.
type Options struct {
	Placement Placement
	// Seed drives the random placement policy; the same seed gives the same plans.
	Seed uint64
	// Workload is the mix of pod shapes fragmentation-aware placement plans for; empty
	// means the pods of the snapshot.
	Workload []Shape
	// MaxNodeTrials bounds how many nodes reclaim, preemption and consolidation try per
	// pending job, which keeps a cycle fast on large clusters. Zero means 64.
	MaxNodeTrials int
}

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
		s.frag = newFragModel(w)
		s.frag.packed = s.opts.Placement == PlacementAllot
	}
	s.computeFairShares()
	s.orderJobs()
	s.allocate(passGangs)
	s.allocate(passGrow)
	pool := s.newPool()
	s.consolidate(pool)
	s.reclaim(pool)
	s.preempt(pool)
	s.allocate(passIdleGangs)
	s.allocate(passIdleGrow)
	return s.plan(snap)
}

// orderJobs sorts each queue's jobs: priority first, then submission time (DESIGN.md 3.2).
func (s *session) orderJobs() {
	for _, q := range s.queues {
		sort.SliceStable(q.jobs, func(a, b int) bool { return jobBefore(q.jobs[a].j, q.jobs[b].j) })
	}
}

func jobBefore(a, b *Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
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
				!slices.Equal(ps.orig.GPUs, ps.gpus) || ps.orig.Share != ps.share)
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
					Binding: Binding{Node: ps.node.n.ID, GPUs: ps.gpus, Share: ps.share}})
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
