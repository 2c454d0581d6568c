package bench

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// bigGangScenario places one gang of a pod a node, two GPUs each, on an empty cluster, as
// KAI-Scheduler's distributed-job scale test does (512 pods on 512 nodes): the gang is made
// while no scheduler runs, and the time is from the scheduler's start to its last binding.
var bigGangScenario = Scenario{
	name:  "big-gang",
	about: "one gang of a pod per node, two GPUs each, on an empty cluster",
	Nodes: 500,
	run:   runBigGang,
}

// gangPods makes the pods of a gang of n pods named group (allot.dev/pod-group, its size
// in allot.dev/min-member, as the webhook writes it from a workload).
func gangPods(group, role, queue string, n, gpus int) func(i int) *corev1.Pod {
	return func(i int) *corev1.Pod {
		p := scenarioPod(fmt.Sprintf("%s-%d", group, i), role, queue, gpus)
		p.Labels[v1alpha1.LabelPodGroup] = group
		p.Annotations = map[string]string{v1alpha1.AnnotationMinMember: strconv.Itoa(n)}
		return p
	}
}

func runBigGang(h *scenarioHarness) (*ScenarioReport, error) {
	n, gpus := h.opts.Nodes, min(2, h.opts.GPUs)
	if err := h.ensureScenarioQueue("gang", n*gpus, nil, nil); err != nil {
		return nil, err
	}
	rep := &ScenarioReport{Shape: fmt.Sprintf("%d nodes × %d GPUs; one gang of %d pods × %d GPUs in queue gang, made with no scheduler running",
		h.opts.Nodes, h.opts.GPUs, n, gpus), Origin: "the scheduler's start", Want: n, Created: n}
	var err error
	if rep.Create, err = h.createPods(n, "the gang's pods", gangPods("gang", "gang", "gang", n, gpus)); err != nil {
		return nil, err
	}
	h.measureScheduler()
	start, err := h.startScheduler()
	if err != nil {
		return nil, err
	}
	if err := h.waitPods("gang", podBound, n, "binding", 30*time.Minute); err != nil {
		return nil, err
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "gang", start)
	rep.Total = rep.LastBind
	return rep, nil
}
