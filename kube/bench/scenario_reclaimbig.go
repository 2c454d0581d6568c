package bench

import (
	"fmt"
	"time"
)

// reclaimBigScenario: in the cluster of setUpReclaim, with the scheduler running, one gang of
// whole nodes, half the cluster (KAI-Scheduler's test asks 2,000 GPUs of 500 nodes); the time
// is from the gang's first creation to its last binding.
var reclaimBigScenario = Scenario{
	name:  "reclaim-big",
	about: "a full cluster of borrowed GPUs; one gang of whole nodes, half the cluster, of a queue with quota",
	Nodes: 500,
	run:   runReclaimBig,
}

func runReclaimBig(h *scenarioHarness) (*ScenarioReport, error) {
	shape, err := setUpReclaim(h)
	if err != nil {
		return nil, err
	}
	n := max(1, h.opts.Nodes/2)
	rep := &ScenarioReport{Shape: shape + fmt.Sprintf("; one gang of %d pods × %d GPUs (%d GPUs) of queue reclaim, made with the scheduler running", n, h.opts.GPUs, n*h.opts.GPUs),
		Origin: "the gang's first creation", Want: n, Created: n, EvictionsNeeded: n * h.opts.GPUs}
	if err := startWarm(h); err != nil {
		return nil, err
	}
	origin := time.Now()
	if rep.Create, err = h.createPods(n, "the gang's pods", gangPods("big", "reclaimer", "reclaim", n, h.opts.GPUs)); err != nil {
		return nil, err
	}
	if err := h.waitPods("reclaimer", podBound, n, "reclaiming", 30*time.Minute); err != nil {
		return nil, err
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "reclaimer", origin)
	evictions(rep, h, "victim", origin)
	rep.Total = rep.LastBind
	return rep, nil
}
