package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/allot-dev/allot/engine"
)

// apply evicts, then binds. A bind onto a node that lost a pod in this plan waits for the
// next cycle: the evicted pod still holds its devices until it is gone.
func (s *Scheduler) apply(ctx context.Context, plan *engine.Plan, idx *index) {
	planned := s.opts.Now()
	evictedOn, evicted, ok := s.evict(ctx, plan, idx)
	if !ok {
		return
	}
	s.grow(ctx, plan, idx)
	// A bind waits while its node still has a pod leaving (evicted now or terminating):
	// the engine counted that pod's devices as free, but the kubelet has not released
	// them. A gang binds whole or waits whole: when one of its binds must wait for the
	// next cycle, so do the others, or the gang would run partly until then.
	waits := map[engine.JobID]bool{}
	waitingFor := map[engine.JobID][]string{} // what each job's reason may say it waits for
	for _, b := range plan.Binds {
		leaving, ok := idx.leaving(b.Binding)
		if evictedOn[b.Binding.Node] || evicted[b.Pod] || ok {
			waits[b.Job] = true
		}
		if _, pending := plan.Pending[b.Job]; ok && !pending && !evicted[b.Pod] {
			waitingFor[b.Job] = append(waitingFor[b.Job], fmt.Sprintf("placed on %s, waiting for %s to leave it (terminating)", b.Binding.Node, leaving))
		}
	}
	if len(waitingFor) > 0 {
		leavingNow := map[string]bool{}
		for _, held := range idx.releasing {
			for _, who := range held {
				leavingNow[who] = true
			}
		}
		for jid, msgs := range waitingFor {
			plan.Pending[jid] = engine.Reason{Code: engine.ReasonNoFit, Message: s.stillWaitingFor(jid, msgs, idx, leavingNow)}
		}
	}
	for _, b := range plan.Binds {
		p := idx.pods[b.Pod]
		// A pod the plan moves (a consolidation, a reclaim that re-places its victim) is
		// evicted here, and an evicted pod is gone for good: its controller makes a new
		// one, which the next cycle places.
		if p == nil || waits[b.Job] || p.DeletionTimestamp != nil {
			continue
		}
		s.amu.Lock()
		until, waiting := s.backoff[p.UID]
		if waiting && time.Now().Before(until) {
			s.amu.Unlock()
			continue
		}
		delete(s.backoff, p.UID)
		s.amu.Unlock()
		// Assume first, then bind in the background: the next cycle already counts these
		// devices as taken and can start while the API calls are in flight.
		j := bindJob{p: p, b: b.Binding, planned: planned}
		if b.Binding.Share > 0 && b.Binding.MIG == "" && len(b.Binding.GPUs) > 0 && len(p.Spec.ResourceClaims) == 0 {
			if n := idx.nodes[b.Binding.Node]; n != nil {
				j.env = shareEnv(p, n, j.b, s.opts.SharingRoot)
			}
		}
		s.amu.Lock()
		s.assumed[p.UID] = j.b
		s.amu.Unlock()
		delete(s.reasons, p.UID)
		if !s.queueBind(ctx, j) {
			return
		}
	}
}

// stillWaitingFor picks the reason of a job placed where pods are still leaving: the one
// it was last given while the pod it names is still leaving, else the last (the pod evicted
// last, likely to leave last). Named anew each cycle, a gang of 250 pods placed on the nodes
// of 2,000 victims named another victim as they went, and every change is a status write
// and an Event per pod (3,428 and 4,054 in allot bench --scenario reclaim-big), competing
// with the kubelet's stops it waits for; a one-GPU pod among 800 placed anew each cycle on
// the devices of 800 victims leaving was told of another each time (1,012 status writes
// for 800 pods, reclaim-all at 100 nodes). The reason may then name a node the job is no
// longer placed on, never a pod that is not leaving.
func (s *Scheduler) stillWaitingFor(jid engine.JobID, msgs []string, idx *index, leavingNow map[string]bool) string {
	for _, p := range idx.jobs[jid] {
		if last, ok := s.reasons[p.UID]; ok {
			if who, ok := waitingToLeave(last); ok && leavingNow[who] {
				return last
			}
			break
		}
	}
	return msgs[len(msgs)-1]
}

// waitingToLeave tells whether msg is a reason apply gave (placed, waiting for a pod to
// leave) and which pod it names.
func waitingToLeave(msg string) (who string, ok bool) {
	const waiting, leave = ", waiting for ", " to leave it (terminating)"
	if !strings.HasPrefix(msg, "placed on ") || !strings.HasSuffix(msg, leave) {
		return "", false
	}
	_, who, ok = strings.Cut(strings.TrimSuffix(msg, leave), waiting)
	return who, ok
}
