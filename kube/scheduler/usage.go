package scheduler

import (
	"math"
	"time"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// usageWriteEvery is how often a queue's status is written for its usage alone: usage
// changes every cycle while a queue is above quota (and while it decays), and a restart
// that reads a value this old has lost a few seconds of a measure with a half-life of days.
const usageWriteEvery = 30 * time.Second

// readUsage gives each queue of the snapshot its past use above quota as of now: what this
// term has counted, or what the Queue's status holds when that is newer (a restart, or
// another leader between two of our terms).
func (s *Scheduler) readUsage(snap *engine.Snapshot, queues []*v1alpha1.Queue) {
	byName := make(map[string]*v1alpha1.Queue, len(queues))
	for _, q := range queues {
		byName[q.Name] = q
	}
	for i := range snap.Queues {
		q := &snap.Queues[i]
		u, ok := s.usage[string(q.ID)]
		var st *v1alpha1.QueueUsage
		if obj := byName[string(q.ID)]; obj != nil {
			st = obj.Status.Usage
		}
		if st != nil && (!ok || st.LastUpdated.Time.After(u.At)) {
			u = engine.Usage{GPUSeconds: float64(st.GPUSeconds), At: st.LastUpdated.Time}
			if !ok && s.opts.UsageIdleWhileAway && snap.Now.After(u.At) {
				// The gap is idle time: decayed, and counted from now on.
				u = engine.Usage{GPUSeconds: u.Decayed(snap.Now, s.opts.UsageHalfLife), At: snap.Now}
			}
			s.usage[string(q.ID)] = u
		}
		q.Usage = u.Decayed(snap.Now, s.opts.UsageHalfLife)
	}
}

// accrueUsage counts the time since each queue's usage was last worked out at the rate the
// plan leaves it: cycles come every second, so the rate is the one that held. After a
// restart the gap since the status was written counts at today's rate, since the pods
// that run now were running then.
func (s *Scheduler) accrueUsage(snap *engine.Snapshot, plan *engine.Plan) {
	live := make(map[string]bool, len(snap.Queues))
	for _, q := range snap.Queues {
		live[string(q.ID)] = true
		u := s.usage[string(q.ID)]
		s.usage[string(q.ID)] = u.Accrue(snap.Now, engine.AboveQuota(q, plan.Queues[q.ID]), s.opts.UsageHalfLife)
	}
	for name := range s.usage {
		if !live[name] {
			delete(s.usage, name) // the queue was deleted
		}
	}
}

// usageDue says whether usage alone is worth a status write: it changed by a whole
// GPU-second and the status's copy is older than usageWriteEvery.
func usageDue(have *v1alpha1.QueueUsage, u engine.Usage) bool {
	if have == nil {
		return true
	}
	return int64(math.Round(u.GPUSeconds)) != have.GPUSeconds && u.At.Sub(have.LastUpdated.Time) >= usageWriteEvery
}
