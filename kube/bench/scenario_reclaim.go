package bench

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/kube/simnode"
)

// The reclaim scenarios share KAI-Scheduler's setup for its reclaim scale tests: the
// cluster is full of one-GPU pods of a queue with no quota and no over-quota weight (every
// GPU it holds is borrowed), and another queue, whose quota is the whole cluster, asks for
// GPUs: each it gets is reclaimed, its holder evicted through the Eviction API and stopped
// by the simulated kubelet.

// reclaimSamples is how many single reclaims reclaim-one times, one after another (KAI's
// test averages 10).
const reclaimSamples = 10

var reclaimOneScenario = Scenario{
	name:  "reclaim-one",
	about: "a full cluster of borrowed GPUs; one-GPU pods of a queue with quota, one at a time",
	Nodes: 500,
	run:   runReclaimOne,
}

// setUpReclaim makes the queues and fills the cluster with the borrowers' one-GPU pods
// (role victim, queue filler), bound by a scheduler that is then stopped. Their containers
// take the --stop-after to stop once evicted.
func setUpReclaim(h *scenarioHarness) (shape string, err error) {
	n := h.opts.Nodes * h.opts.GPUs
	if err := h.ensureScenarioQueue("filler", 0, new(int32), nil); err != nil {
		return "", err
	}
	if err := h.ensureScenarioQueue("reclaim", n, nil, nil); err != nil {
		return "", err
	}
	var annotate map[string]string
	if h.opts.StopAfter > 0 {
		annotate = map[string]string{simnode.AnnotationStopAfter: h.opts.StopAfter.String()}
	}
	if err := h.fillBound(n, "victim", "filler", annotate); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d nodes × %d GPUs full of %d one-GPU pods of queue filler (quota 0, over-quota weight 0); queue reclaim has quota %d; an evicted pod stops %s",
		h.opts.Nodes, h.opts.GPUs, n, n, stopAfterWords(h.opts.StopAfter)), nil
}

func stopAfterWords(d time.Duration) string {
	if d <= 0 {
		return "at once (the simulated kubelet does not wait out the grace period)"
	}
	return "after " + d.String() + " (within its 30s grace period)"
}

// startWarm starts the measured scheduler and waits until it has listed the cluster and
// run a cycle, as a scheduler that has been running a while.
func startWarm(h *scenarioHarness) error {
	h.measureScheduler()
	if _, err := h.startScheduler(); err != nil {
		return err
	}
	return h.probe("reclaim")
}

func runReclaimOne(h *scenarioHarness) (*ScenarioReport, error) {
	shape, err := setUpReclaim(h)
	if err != nil {
		return nil, err
	}
	rep := &ScenarioReport{Shape: shape + fmt.Sprintf("; %d one-GPU pods of queue reclaim, one after another, each once the last is bound", reclaimSamples),
		Origin: "the first reclaimer's creation", Want: reclaimSamples, EvictionsNeeded: reclaimSamples}
	if err := startWarm(h); err != nil {
		return nil, err
	}
	var origin time.Time
	for i := 0; i < reclaimSamples; i++ {
		name := fmt.Sprintf("reclaimer-%d", i)
		at := time.Now()
		if i == 0 {
			origin = at
		}
		if _, err := h.client.CoreV1().Pods("default").Create(h.ctx, scenarioPod(name, "reclaimer", "reclaim", 1), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating %s: %w", name, err)
		}
		if err := h.waitPods("reclaimer", podBound, i+1, fmt.Sprintf("reclaim %d of %d", i+1, reclaimSamples), 5*time.Minute); err != nil {
			return nil, err
		}
		bound, _ := h.pods.when("reclaimer", name, podBound)
		rep.Samples = append(rep.Samples, bound.Sub(at))
		rep.Created++
	}
	if rep.Sched, err = h.stopScheduler(); err != nil {
		return nil, err
	}
	h.timed(rep, "reclaimer", origin)
	evictions(rep, h, "victim", origin)
	var sum time.Duration
	for _, s := range rep.Samples {
		sum += s
	}
	rep.Total = sum / time.Duration(len(rep.Samples))
	rep.TotalIs = "mean of the single reclaims, each from its pod's creation to its binding"
	return rep, nil
}
