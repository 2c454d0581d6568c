package bench

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/kube/scheduler"
)

// restartScenario restarts the scheduler on a large, busy cluster, the size at which
// Volcano's users saw the first binding more than eight minutes after a restart (volcano
// issue 5819: 5,000 nodes, 140,000 pods): per 5,000 nodes, 137,500 pods of another
// scheduler already running, 2,000 of Allot's bound and 500 of Allot's waiting. The times
// are from the scheduler process's start to its first binding and to the last of the
// waiting pods; its peak memory is the process's.
var restartScenario = Scenario{
	name:  "restart",
	about: "a scheduler restart on a busy cluster: 28 pods a node, most of another scheduler's",
	Nodes: 5000,
	run:   runRestart,
}

// Per 5,000 nodes.
const (
	restartPods    = 140000
	restartBound   = 2000
	restartWaiting = 500
)

func runRestart(h *scenarioHarness) (*ScenarioReport, error) {
	nodes := h.opts.Nodes
	bound := max(1, restartBound*nodes/5000)
	waiting := max(1, restartWaiting*nodes/5000)
	others := max(1, restartPods*nodes/5000-bound-waiting)
	if err := h.ensureScenarioQueue("restart", bound+waiting, nil, nil); err != nil {
		return nil, err
	}
	rep := &ScenarioReport{Shape: fmt.Sprintf("%d nodes × %d GPUs; %d pods: %d CPU pods of another scheduler running, %d one-GPU pods of Allot's bound, %d waiting, made before the scheduler starts",
		nodes, h.opts.GPUs, others+bound+waiting, others, bound, waiting), Origin: "the scheduler process's start", Want: waiting}
	// The other scheduler's pods are bound as they are made, round the nodes, and the
	// simulated kubelet runs them.
	nodeNames, err := h.client.CoreV1().Nodes().List(h.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if _, err := h.createPods(others, "other scheduler's pods", func(i int) *corev1.Pod {
		p := scenarioPod(fmt.Sprintf("other-%d", i), "other", "", 0)
		delete(p.Labels, scheduler.LabelQueue)
		p.Spec.SchedulerName = "default-scheduler"
		p.Spec.NodeName = nodeNames.Items[i%len(nodeNames.Items)].Name
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
		return p
	}); err != nil {
		return nil, err
	}
	if err := h.waitPods("other", podRunning, others, "starting the other scheduler's pods", 60*time.Minute); err != nil {
		return nil, err
	}
	if err := h.fillBound(bound, "bound", "restart", nil); err != nil {
		return nil, err
	}
	if _, err := h.createPods(waiting, "waiting pods", func(i int) *corev1.Pod {
		return scenarioPod(fmt.Sprintf("waiting-%d", i), "waiting", "restart", 1)
	}); err != nil {
		return nil, err
	}
	rep.Create, rep.Created = time.Since(began), others+bound+waiting
	h.measureScheduler()
	start, err := h.startScheduler()
	if err != nil {
		return nil, err
	}
	if err := h.waitPods("waiting", podBound, waiting, "binding", 30*time.Minute); err != nil {
		return nil, err
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "waiting", start)
	rep.Total = rep.FirstBind
	rep.TotalIs = "from the scheduler process's start to its first binding"
	rep.Notes = append(rep.Notes, fmt.Sprintf("setup (the pods made, Allot's %d bound by a scheduler then stopped): %s", bound, rep.Create.Round(time.Millisecond)))
	return rep, nil
}
