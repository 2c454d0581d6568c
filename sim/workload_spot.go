package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/allot-dev/allot/engine"
)

// SpotStudy makes the last SpotNodes nodes of a workload study spot capacity: each is taken
// back at random (InterruptionsPerDay, a Poisson process per node), its work stopped as
// the scheduler stops it on a notice whose grace is over (a gang whole, an elastic job
// shrunk), and replaced by its cloud Downtime later. Prices are per GPU-hour, paid while a
// node is there. Jobs use spot as Policy says.
type SpotStudy struct {
	SpotNodes           int
	InterruptionsPerDay float64
	Downtime            time.Duration
	OnDemandPrice       float64
	SpotPrice           float64
	Policy              engine.SpotPolicy
	OnDemandAfter       time.Duration
}

// SpotOutcome is what the nodes cost and how often spot capacity was taken back.
type SpotOutcome struct {
	SpotNodes     int     `json:"spotNodes"`
	Interruptions int     `json:"interruptions"`
	Cost          float64 `json:"cost"`
	Policy        string  `json:"policy"`
}

// Completion is the time from submission to the end of the jobs that finished.
type Completion struct {
	Done int    `json:"done"`
	P50  string `json:"p50"`
	P95  string `json:"p95"`
	Mean string `json:"mean"`
}

func completion(w *World) Completion {
	var ds []time.Duration
	var sum time.Duration
	for _, j := range w.jobs {
		if !j.completed.IsZero() {
			d := j.completed.Sub(j.job.SubmitTime)
			ds = append(ds, d)
			sum += d
		}
	}
	c := Completion{Done: len(ds), P50: percentile(ds, 0.5), P95: percentile(ds, 0.95), Mean: "-"}
	if len(ds) > 0 {
		c.Mean = (sum / time.Duration(len(ds))).Round(time.Minute).String()
	}
	return c
}

// spotRun drives a study's spot nodes: their interruptions and returns, in time order,
// and what the nodes cost.
type spotRun struct {
	s      *SpotStudy
	w      *World
	gpus   int
	events []spotEvent // sorted by time
	next   int
	// away is since when each interrupted node has been gone; awayHours sums the spot
	// node-hours not paid for.
	away          map[engine.NodeID]time.Time
	awayHours     float64
	interruptions int
	nodes         int
}

type spotEvent struct {
	at      time.Time
	node    engine.NodeID
	restore bool
}

func newSpotRun(o WorkloadOptions, w *World, rng *rand.Rand) *spotRun {
	r := &spotRun{s: o.Spot, w: w, gpus: o.GPUsPerNode, nodes: o.Nodes, away: map[engine.NodeID]time.Time{}}
	if r.s == nil {
		return r
	}
	end := Epoch.Add(o.Duration)
	for i := o.Nodes - r.s.SpotNodes; i < o.Nodes; i++ {
		w.nodes[i].Spot = true
		if r.s.InterruptionsPerDay <= 0 {
			continue
		}
		// A node's interruptions: a Poisson process while it is there; its replacement
		// joins after the downtime and may be taken back in its turn.
		for at := Epoch; ; {
			at = at.Add(time.Duration(rng.ExpFloat64() / r.s.InterruptionsPerDay * float64(24*time.Hour)))
			if at.After(end) {
				break
			}
			r.events = append(r.events, spotEvent{at: at, node: w.nodes[i].ID})
			at = at.Add(r.s.Downtime)
			r.events = append(r.events, spotEvent{at: at, node: w.nodes[i].ID, restore: true})
		}
	}
	slices.SortStableFunc(r.events, func(a, b spotEvent) int { return a.at.Compare(b.at) })
	return r
}

// policy gives a job the study's spot policy.
func (r *spotRun) policy(j *engine.Job) {
	if r.s != nil {
		j.Spot, j.OnDemandAfter = r.s.Policy, r.s.OnDemandAfter
	}
}

// until plays the interruptions and returns due before t.
func (r *spotRun) until(t time.Time) error {
	for ; r.next < len(r.events) && r.events[r.next].at.Before(t); r.next++ {
		e := r.events[r.next]
		if err := r.w.Advance(e.at.Sub(r.w.now)); err != nil {
			return err
		}
		if e.restore {
			r.awayHours += e.at.Sub(r.away[e.node]).Hours()
			delete(r.away, e.node)
			r.w.Restore(e.node)
		} else {
			r.away[e.node] = e.at
			r.interruptions++
			r.w.Interrupt(e.node)
		}
		if err := r.w.Settle(); err != nil {
			return fmt.Errorf("spot node %s at %s: %w", e.node, e.at.Sub(Epoch), err)
		}
	}
	return nil
}

// outcome is the cost of the run that ended at end: on-demand nodes all along, spot nodes
// while they were there.
func (r *spotRun) outcome(end time.Time) *SpotOutcome {
	if r.s == nil {
		return nil
	}
	for _, since := range r.away {
		r.awayHours += end.Sub(since).Hours()
	}
	hours := end.Sub(Epoch).Hours()
	g := float64(r.gpus)
	onDemand := float64(r.nodes-r.s.SpotNodes) * hours * g
	spot := (float64(r.s.SpotNodes)*hours - r.awayHours) * g
	return &SpotOutcome{SpotNodes: r.s.SpotNodes, Interruptions: r.interruptions, Policy: r.s.Policy.String(),
		Cost: onDemand*r.s.OnDemandPrice + spot*r.s.SpotPrice}
}

func (s *SpotStudy) validate(nodes int) error {
	switch {
	case s.SpotNodes < 0 || s.SpotNodes > nodes:
		return fmt.Errorf("--spot-nodes %d is not allowed: 0 to the %d nodes", s.SpotNodes, nodes)
	case s.InterruptionsPerDay < 0:
		return fmt.Errorf("--interruptions-per-day %g is not allowed: 0 or more per spot node", s.InterruptionsPerDay)
	case s.Downtime < 0:
		return fmt.Errorf("--spot-downtime %s is not allowed: 0 or more", s.Downtime)
	case s.OnDemandPrice < 0 || s.SpotPrice < 0:
		return fmt.Errorf("--price-on-demand and --price-spot must be 0 or more per GPU-hour")
	}
	return nil
}
