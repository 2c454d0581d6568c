package engine

import (
	"fmt"
	"time"
)

// Spot capacity: nodes a cloud may take back with notice (spot, preemptible VMs), and
// which jobs may use them. The caller reads a node's capacity type from its labels and a
// job's policy from its pods and queue; the engine decides where each job may go from
// them and the snapshot's time, so that "spot first, on-demand after 10 minutes" is the
// same plan for the same snapshot. Notices of interruption reach the engine as nodes that
// take no new pods (Node.Unschedulable); stopping what runs there is the caller's.

// SpotPolicy is which capacity a job may use.
type SpotPolicy int

const (
	// SpotAllowed: spot and on-demand nodes alike.
	SpotAllowed SpotPolicy = iota
	// SpotNever: on-demand nodes only.
	SpotNever
	// SpotFirst: spot nodes only, until Job.OnDemandAfter has passed since the job's
	// submission (Alibaba's "spot first, on-demand after a maximum wait"); then any node.
	// With OnDemandAfter zero, spot nodes only.
	SpotFirst
)

var spotPolicyNames = [...]string{"allowed", "never", "first"}

func (p SpotPolicy) String() string {
	if int(p) < len(spotPolicyNames) {
		return spotPolicyNames[p]
	}
	return fmt.Sprintf("SpotPolicy(%d)", int(p))
}

// ParseSpotPolicy reads "allowed", "never" or "first" (empty: allowed).
func ParseSpotPolicy(s string) (SpotPolicy, error) {
	if s == "" {
		return SpotAllowed, nil
	}
	for i, n := range spotPolicyNames {
		if n == s {
			return SpotPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not a spot policy: allowed, never or first", s)
}

// capacity is where a job may run now, by capacity type.
type capacity int

const (
	capacityAny capacity = iota
	capacityOnDemand
	capacitySpot
)

// spotCapacity resolves the job's policy at the snapshot's time: a job interrupted more
// often than its budget runs on on-demand capacity only; one whose spot-first window has
// not passed, on spot only.
func spotCapacity(j *Job, now time.Time) capacity {
	if pastBudget(j) {
		return capacityOnDemand
	}
	switch j.Spot {
	case SpotNever:
		return capacityOnDemand
	case SpotFirst:
		if j.OnDemandAfter == 0 || now.Before(onDemandFrom(j)) {
			return capacitySpot
		}
	}
	return capacityAny
}

// pastBudget tells whether spot capacity was taken from under the job more often than its
// budget allows.
func pastBudget(j *Job) bool {
	return j.InterruptionBudget != nil && j.Interruptions > *j.InterruptionBudget
}

// onDemandFrom is when a job of spot policy first may use on-demand capacity too.
func onDemandFrom(j *Job) time.Time { return j.SubmitTime.Add(j.OnDemandAfter) }

// spotBars tells whether the job's capacity rules the node out.
func (j *jobState) spotBars(n *nodeState) bool {
	switch j.capacity {
	case capacityOnDemand:
		return n.n.Spot
	case capacitySpot:
		return !n.n.Spot
	}
	return false
}

// spotReason says why the nodes the job could otherwise use are ruled out by its
// capacity; barred is how many.
func (s *session) spotReason(j *jobState, barred int) Reason {
	nodes := plural(barred, "node")
	switch {
	case pastBudget(j.j):
		return reasonf(ReasonConstraint, "was interrupted on spot capacity %s, past its budget of %d: it runs on on-demand capacity only, and the %s it may use otherwise are spot",
			plural(j.j.Interruptions, "time"), *j.j.InterruptionBudget, nodes)
	case j.capacity == capacityOnDemand:
		return reasonf(ReasonConstraint, "may not run on spot capacity (spot policy never), and the %s it may use otherwise are spot", nodes)
	case j.j.OnDemandAfter > 0:
		left := onDemandFrom(j.j).Sub(s.now).Round(time.Second)
		return reasonf(ReasonConstraint, "runs on spot capacity first, on-demand after %s of waiting (%s left), and the %s it may use otherwise are on-demand",
			j.j.OnDemandAfter, left, nodes)
	}
	return reasonf(ReasonConstraint, "runs on spot capacity only, and the %s it may use otherwise are on-demand", nodes)
}

// onSpot tells whether the pods all run on spot capacity.
func onSpot(pods []*podState) bool {
	for _, p := range pods {
		if p.node == nil || !p.node.n.Spot {
			return false
		}
	}
	return len(pods) > 0
}

// spotNote says, beside a reason the nodes the job may use give, that its capacity keeps
// it from the others: "" where it may use any.
func (s *session) spotNote(j *jobState) string {
	switch {
	case pastBudget(j.j):
		return fmt.Sprintf("on-demand capacity only: interrupted on spot %s, past its budget of %d", plural(j.j.Interruptions, "time"), *j.j.InterruptionBudget)
	case j.capacity == capacityOnDemand:
		return "on-demand capacity only: spot policy never"
	case j.capacity == capacitySpot && j.j.OnDemandAfter > 0:
		return fmt.Sprintf("spot capacity only for %s more", onDemandFrom(j.j).Sub(s.now).Round(time.Second))
	case j.capacity == capacitySpot:
		return "spot capacity only"
	}
	return ""
}

// stopInterrupted stops what runs on nodes whose interruption is due: the pods there, or
// the whole job where it would keep fewer than its minimum without them. It runs last,
// as stopStaleGangs does: what it stops is placed again in a later cycle, by its
// controller's new pods.
func (s *session) stopInterrupted(now time.Time) {
	due := map[*nodeState]bool{}
	for _, n := range s.nodes {
		if n.n.Interruption != "" && !n.n.InterruptAt.IsZero() && !now.Before(n.n.InterruptAt) {
			due[n] = true
		}
	}
	if len(due) == 0 {
		return
	}
	for _, j := range s.jobs {
		on, where := 0, ""
		for _, p := range j.pods {
			if p.node != nil && due[p.node] {
				on++
				if where == "" {
					where = fmt.Sprintf("node %s goes (%s)", p.node.n.ID, p.node.n.Interruption)
				}
			}
		}
		if on == 0 {
			continue
		}
		whole := j.bound-on < j.j.MinMember
		var r Reason
		if whole {
			r = reasonf(ReasonInterrupted, "%s: stopped after its checkpoint notice; %s starts again whole elsewhere", where, j.j.ID)
		} else {
			r = reasonf(ReasonInterrupted, "%s: stopped after its checkpoint notice; %s runs on with %d of its pods", where, j.j.ID, j.bound-on)
		}
		for _, p := range j.pods {
			if p.node != nil && (whole || due[p.node]) {
				s.unbind(p, r, "")
			}
		}
	}
}
