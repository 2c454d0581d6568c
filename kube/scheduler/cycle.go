package scheduler

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Cycle takes one snapshot, asks the engine for a plan and applies it: list (listing.go),
// snapshot (snapshot.go, constraints.go), the engine, apply (apply.go, bind.go,
// sharing.go), status (status.go, queuestatus.go).
func (s *Scheduler) Cycle(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Before anything is listed: what the pod watch notes from here on may not be in this
	// cycle's snapshot yet.
	s.cycleStart = time.Now()
	if !s.fence.ok() {
		return nil // the Lease may be someone else's: write nothing
	}
	if s.stale.Load() {
		return nil // what the informers hold predates an outage
	}
	// First, so that the snapshot already has held-back shared pods whose reservation
	// reported its device on that device, and places others beside them there.
	s.resumeAwaiting(ctx)
	s.resumeMIG(ctx)
	// What poked until now is in the informers' stores already (client-go updates a store
	// before it calls the handlers), so this cycle sees it; a poke left waiting would only
	// repeat the cycle (after the first listing, 2,000 pods' arrival did, while the
	// backlog's binds were flowing).
	select {
	case <-s.wake:
	default:
	}
	in, ok := s.list(ctx)
	if !ok {
		return nil
	}
	now := s.opts.Now()
	s.stopOverdue(ctx, now, in.pods, in.queues)
	snap, idx := buildSnapshot(now, in.nodes, in.pods, in.queues, in.groups, in.topologies, &s.conv)
	s.noteInterruptions(ctx, now, snap, in.pods)
	s.reportQueueProblems(idx.queueProblems, in.queues)
	d := s.draForCycle(in.nodes)
	d.addClaims(now, snap, idx, in.pods)
	s.readUsage(snap, in.queues)
	s.countAdopted(idx)
	s.notePartialGangs(ctx, snap, idx)
	constrain(ctx, s.fit, snap, idx, in.nodes, in.pods, &s.conv)
	d.filterClaims(ctx, snap, idx)
	started := time.Now()
	plan := s.eng.Schedule(snap)
	s.accrueUsage(snap, plan)
	s.apply(ctx, plan, idx)
	s.freeStale(ctx, d)
	s.opts.Metrics.observe(time.Since(started).Seconds(), snap, plan, in.queues)
	s.countAgentless(snap)
	s.releaseReservations(ctx, snap, plan, idx)
	// Occupancy is for people and dashboards: once a second is fresh enough, and spares
	// the API server a node write per bind under a stream of submissions.
	if now := time.Now(); now.Sub(s.occAt) >= time.Second {
		s.occAt = now
		s.writeOccupancy(ctx, occupancy(snap, plan))
	}
	s.writeReasons(plan, idx)
	s.writeQueueStatus(ctx, plan, in.queues)
	s.writeGroupStatus(ctx, plan, in.podGroups)
	return nil
}

// countAdopted counts, once each, the bound pods whose devices the device plugin chose
// differently from the scheduler.
func (s *Scheduler) countAdopted(idx *index) {
	n := 0
	for _, uid := range idx.adopted {
		if !s.adopted[uid] {
			s.adopted[uid] = true
			n++
		}
	}
	s.opts.Metrics.adoptedDevices("whole", n)
	if len(s.adopted) > 4*len(idx.adopted)+1024 {
		// Forget pods long gone; one still bound is in idx.adopted and stays.
		keep := make(map[types.UID]bool, len(idx.adopted))
		for _, uid := range idx.adopted {
			keep[uid] = true
		}
		s.adopted = keep
	}
}
