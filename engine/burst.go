package engine

import (
	"fmt"
	"slices"
	"strings"
)

// Dynamic fractions: a slice may use GPU memory past its request, up to its limit, while
// the device has it free. It is placed and counted by its request; what it uses beyond is
// a loan. A slice placed later needs its request free beside the bookings and the bursts
// (fitsPart); where the bookings leave room and only bursts are in the way, this action
// takes the loan back, as reclaim takes back GPUs lent over quota: the burster furthest
// past its request stops first, until the request fits (BurstEvict), or the request waits
// for them, told who holds its memory (BurstWait). A burster that has not run its minimum
// runtime is not stopped (burstProtection), whatever its class.

// reclaimBursts starts waiting single-slice pods whose memory bursting pods hold.
func (s *session) reclaimBursts() {
	for _, j := range s.waiting(false) {
		if !j.shares || j.reason.Code != ReasonNoFit {
			continue
		}
		pods := s.item(j, passGangs)
		if len(pods) != 1 || pods[0].p.Request.SharedDevices() != 1 {
			continue
		}
		// A request within the queue's fair share is honoured; beyond it, the pod would
		// itself be borrowing.
		if _, ok := s.admit(j, s.need(pods), gateFairShare); !ok {
			continue
		}
		s.takeBackFor(j, pods[0])
	}
}

// burster is a bound slice using memory past its request.
type burster struct {
	p    *podState
	over int64
}

// takeBackFor finds the device where the fewest bursters stand between the pod's request
// and the memory the bookings leave, and stops them (or, under BurstWait, names them in
// the pod's reason).
func (s *session) takeBackFor(j *jobState, p *podState) {
	r := p.p.Request
	var best []burster
	var bestN *nodeState
	bestG := -1
	var bestPart part
	nodes := s.nodes
	if t := j.j.Topology; t != nil && t.Required >= 0 {
		nodes = s.topologyNodes(j, nodes) // a lone pod: any node with the level's label
	}
	for _, n := range nodes {
		if !s.eligible(j, n) || !fitsHost(n, r.CPU, r.Memory, 1) || !s.ruleFits(p, n) {
			continue
		}
		for g := range n.n.GPUs {
			dev := &n.n.GPUs[g]
			if dev.MIG != nil || !j.deviceOK(dev) {
				continue
			}
			pt, ok := partOn(r, dev)
			b := n.books[g]
			if !ok || b.burst == 0 || b.mem+pt.mem > dev.Memory || b.compute+pt.compute > OneGPU ||
				(n.n.MaxSharers > 0 && int(b.sharers) >= n.n.MaxSharers) {
				continue // nothing lent here, or the bookings alone leave no room
			}
			short := b.mem + b.burst + pt.mem - dev.Memory
			if short <= 0 {
				continue // it fits as it is; placement failed for another reason
			}
			var on []burster
			for _, q := range n.pods {
				if q.share.over > 0 && len(q.gpus) == 1 && q.gpus[0] == g {
					on = append(on, burster{q, q.share.over})
				}
			}
			slices.SortFunc(on, func(a, b burster) int {
				if a.over != b.over {
					return int(b.over - a.over) // furthest past its request first
				}
				return strings.Compare(string(a.p.p.ID), string(b.p.p.ID))
			})
			var take []burster
			stopping := map[*jobState]int{}
			for _, q := range on {
				if short <= 0 {
					break
				}
				// The loan is revocable whatever the burster's class (a limit past the
				// request is the pod's own choice), but stopping it stops its request's
				// work too: it has the minimum runtime that would keep it from this job
				// otherwise, its queue's reclaim minimum against another queue's request,
				// its preemption minimum against its own queue's.
				if !s.keepUnshielded(j, burstProtection(j, q.p.job))(unit{job: q.p.job}) {
					continue
				}
				// A gang's member stops only where its gang keeps its minimum without it
				// and without the members already chosen.
				j := q.p.job
				if j.j.MinMember > 1 && j.bound-stopping[j] <= j.j.MinMember {
					continue
				}
				stopping[j]++
				take = append(take, q)
				short -= q.p.share.mem + q.over // stopped, it frees its request and its burst
			}
			if short <= 0 && (best == nil || len(take) < len(best)) {
				best, bestN, bestG, bestPart = take, n, g, pt
			}
		}
	}
	if best == nil {
		return
	}
	where := fmt.Sprintf("%s GPU %d", bestN.n.ID, bestG)
	if j.q.q.BurstPolicy == BurstWait {
		var names []string
		for _, b := range best {
			names = append(names, fmt.Sprintf("%s (%s past its request)", b.p.p.ID, Format(ResourceMemory, b.over)))
		}
		// More exact than the shortage placement found (it saw only the memory free now).
		j.reason = reasonf(ReasonBurst, "the GPU memory it asks on %s is lent to pods bursting past their requests: %s; queue %s waits for it to be given back (burstPolicy: wait)",
			where, strings.Join(names, ", "), j.q.q.ID)
		return
	}
	cp := s.checkpoint()
	for _, b := range best {
		why := reasonf(ReasonBurst, "it used %s of GPU memory on %s, %s past its request of %s, and job %s's request needed it back (memory past a request is lent while free)",
			Format(ResourceMemory, b.p.share.mem+b.over), where, Format(ResourceMemory, b.over), Format(ResourceMemory, b.p.share.mem), j.j.ID)
		s.unbind(b.p, why, j.j.ID)
		b.p.job.stopped = true
	}
	if !fitsPart(bestN, bestG, bestPart, bestN.books) {
		s.rollback(cp)
		for _, b := range best {
			b.p.job.stopped = false
		}
		return
	}
	s.bind(p, bestN, []int{bestG}, bestPart)
	// Admission used the request's estimated cost; a memory request costs a larger share
	// of a smaller device. With the real cost the queue must still be within its limits,
	// its non-preemptible quota and its fair share, or nothing is stopped for it.
	if !s.queueRulesHold(j) || !s.withinFairShare(j) {
		s.rollback(cp)
		for _, b := range best {
			b.p.job.stopped = false
		}
		return
	}
	s.commits++
}

// withinFairShare reports whether the job's queue and its ancestors end within their fair
// shares of the job's resource.
func (s *session) withinFairShare(j *jobState) bool {
	for q := j.q; q != nil; q = q.parent {
		if s.fairShareGated(q, j.res) && q.alloc[j.res] > q.fair[j.res] {
			return false
		}
	}
	return true
}

// burstProtection is the minimum runtime that shields a burster from a request: reclaim's
// where the request is another queue's, preemption's where it is the burster's own.
func burstProtection(needs, burster *jobState) int {
	if needs.q == burster.q {
		return protectPreempt
	}
	return protectReclaim
}
