package scheduler

import (
	"context"
	"time"

	"github.com/allot-dev/allot/engine"
)

// notePartialGangs tells the engine since when each gang has run partly. A gang running
// partly because a whole-gang eviction or move was cut short (the scheduler that made it
// died between the requests, or one failed) has its rest stopped at once, with no grace
// period to wait out. That is seen two ways: members leaving by eviction (the API server
// marks them DisruptionTarget), or, once they are gone, an Evicted Event already written
// on a member still running (apply writes every Event before any request).
//
// It also tells the engine which members a partly running gang lost, and where they ran,
// for the reason its rest are stopped with (the pod watch notes them as they go: noteGone).
func (s *Scheduler) notePartialGangs(ctx context.Context, snap *engine.Snapshot, idx *index) {
	seen := make(map[engine.JobID]bool, len(s.partial))
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		bound := map[string]bool{}
		for _, ep := range j.Pods {
			if p := idx.pods[ep.ID]; ep.Binding != nil && p != nil {
				bound[p.Name] = true
			}
		}
		if len(bound) == 0 || len(bound) >= j.MinMember {
			continue
		}
		st, ok := s.partial[j.ID]
		if !ok {
			st = &partialGang{since: snap.Now, cutShort: idx.evicted[j.ID] || s.evictionPlanned(ctx, j, idx)}
			s.partial[j.ID] = st
		}
		j.PartialSince = st.since
		j.MembersEvicted = st.cutShort || idx.evicted[j.ID]
		j.Lost = s.gone.of(j.ID, bound)
		seen[j.ID] = true
	}
	for id := range s.partial {
		if !seen[id] {
			delete(s.partial, id)
		}
	}
	s.gone.keep(seen, s.cycleStart)
}

// partialGang is what the scheduler remembers of a gang running partly.
type partialGang struct {
	since    time.Time
	cutShort bool
}
