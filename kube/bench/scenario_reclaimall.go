package bench

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// reclaimAllScenario: in the cluster of setUpReclaim, as many one-GPU pods of queue reclaim
// as the cluster has GPUs, made while no scheduler runs: every GPU is reclaimed (KAI-Scheduler's
// test reclaims its 4,000). The time is from the scheduler's start to the last binding.
var reclaimAllScenario = Scenario{
	name:  "reclaim-all",
	about: "a full cluster of borrowed GPUs; as many one-GPU pods of a queue with quota, all reclaimed",
	Nodes: 500,
	run:   runReclaimAll,
}

func runReclaimAll(h *scenarioHarness) (*ScenarioReport, error) {
	shape, err := setUpReclaim(h)
	if err != nil {
		return nil, err
	}
	n := h.opts.Nodes * h.opts.GPUs
	rep := &ScenarioReport{Shape: shape + fmt.Sprintf("; %d one-GPU pods of queue reclaim, made with no scheduler running", n),
		Origin: "the scheduler's start", Want: n, Created: n, EvictionsNeeded: n}
	if rep.Create, err = h.createPods(n, "reclaimers", func(i int) *corev1.Pod {
		return scenarioPod(fmt.Sprintf("reclaimer-%d", i), "reclaimer", "reclaim", 1)
	}); err != nil {
		return nil, err
	}
	h.measureScheduler()
	start, err := h.startScheduler()
	if err != nil {
		return nil, err
	}
	if err := h.waitPods("reclaimer", podBound, n, "reclaiming", 60*time.Minute); err != nil {
		return nil, err
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "reclaimer", start)
	evictions(rep, h, "victim", start)
	rep.Total = rep.LastBind
	return rep, nil
}
