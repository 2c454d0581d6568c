package bench

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// fillScenario fills an empty cluster with one-GPU pods, one a GPU, as KAI-Scheduler's
// "fill the cluster" scale test does: the pods are made while no scheduler runs, beside a
// background of pods waiting in a queue that may not run anything (its limit 0, as KAI's
// test with pending tasks in the background has), and the time is from the scheduler's
// start to the last binding.
var fillScenario = Scenario{
	name:  "fill",
	about: "fill an empty cluster with one-GPU pods, a background of pods waiting in a closed queue",
	Nodes: 500,
	run:   runFill,
}

// fillBackground is the waiting pods beside the fill per 500 nodes (KAI's test has 400 at 500).
const fillBackground = 400

func runFill(h *scenarioHarness) (*ScenarioReport, error) {
	n := h.opts.Nodes * h.opts.GPUs
	background := max(1, fillBackground*h.opts.Nodes/500)
	if err := h.ensureScenarioQueue("fill", n, nil, nil); err != nil {
		return nil, err
	}
	if err := h.ensureScenarioQueue("closed", 0, new(int32), new(int32)); err != nil {
		return nil, err
	}
	rep := &ScenarioReport{Shape: fmt.Sprintf("%d nodes × %d GPUs; %d one-GPU pods in queue fill (quota %d), %d one-GPU pods waiting in queue closed (limit 0); made with no scheduler running",
		h.opts.Nodes, h.opts.GPUs, n, n, background),
		Origin: "the scheduler's start", Want: n, Created: n + background}
	var err error
	if rep.Create, err = h.createPods(background, "background pods", func(i int) *corev1.Pod {
		return scenarioPod(fmt.Sprintf("background-%d", i), "background", "closed", 1)
	}); err != nil {
		return nil, err
	}
	d, err := h.createPods(n, "fill pods", func(i int) *corev1.Pod {
		return scenarioPod(fmt.Sprintf("fill-%d", i), "fill", "fill", 1)
	})
	if err != nil {
		return nil, err
	}
	rep.Create += d
	h.measureScheduler()
	start, err := h.startScheduler()
	if err != nil {
		return nil, err
	}
	if err := h.waitPods("fill", podBound, n, "binding", 30*time.Minute); err != nil {
		return nil, err
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "fill", start)
	rep.Total = rep.LastBind
	if b := h.pods.count("background", podBound); b > 0 {
		return nil, fmt.Errorf("%d pods of the closed queue were bound", b)
	}
	return rep, nil
}
