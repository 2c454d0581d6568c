package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Metrics are the scheduler's Prometheus series: one prefix, base units, counters ending
// in _total, and labels of low cardinality (queues and reason codes, never pods).
type Metrics struct {
	Registry *prometheus.Registry

	cycle     prometheus.Histogram
	bound     prometheus.Counter
	bindFails prometheus.Counter
	evicted   *prometheus.CounterVec
	reclaims  *prometheus.CounterVec
	consolid  prometheus.Counter
	waiting   *prometheus.GaugeVec
	waitPods  *prometheus.GaugeVec
	quota     *prometheus.GaugeVec
	fairShare *prometheus.GaugeVec
	allocated *prometheus.GaugeVec
	pending   *prometheus.GaugeVec
	usage     *prometheus.GaugeVec
	adopted   *prometheus.CounterVec
	timeouts  prometheus.Counter
	// What the chart's alerts read (deploy/helm/allot/templates/alerts.yaml): how long a
	// queue's oldest job has waited, how long its oldest reclaim has waited for its job to
	// start, and the GPU nodes without a live agent.
	oldest      *prometheus.GaugeVec
	reclaimWait *prometheus.GaugeVec
	noAgent     prometheus.Gauge
	// reclaimedAt is when each job still waiting was first given room by a reclaim.
	reclaimedAt map[engine.JobID]time.Time
}

// NewMetrics registers the series, with the Go runtime's and the process's, on a registry
// of their own.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	queue := []string{"queue"}
	m := &Metrics{Registry: r,
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "allot_scheduling_cycle_duration_seconds",
			Help: "Time from snapshot to applied plan, per scheduling cycle.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		bound:     prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_pods_scheduled_total", Help: "Pods bound to a node."}),
		bindFails: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_pod_bind_failures_total", Help: "Binds the API server refused."}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_pods_evicted_total",
			Help: "Pods evicted, by reason: Reclaimed, Preempted, Consolidated."}, []string{"reason"}),
		reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_reclaims_total",
			Help: "Jobs placed by taking GPUs back from other queues, by the queue that took them."}, queue),
		consolid: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_consolidations_total",
			Help: "Jobs moved to another place to free room for a waiting job."}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_jobs_unschedulable",
			Help: "Jobs waiting after the last cycle, by reason code."}, []string{"reason"}),
		waitPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_pods_unschedulable",
			Help: "Pods without a node after the last cycle, by their job's reason code."}, []string{"reason"}),
		quota: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_quota_gpus",
			Help: "GPUs guaranteed to the queue."}, queue),
		fairShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_fair_share_gpus",
			Help: "The queue's fair share of GPUs in the last cycle."}, queue),
		allocated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_allocated_gpus",
			Help: "GPUs the queue's running pods hold."}, queue),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_pending_gpus",
			Help: "GPUs the queue's waiting pods ask for."}, queue),
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_usage_gpu_seconds",
			Help: "The queue's past use of GPUs above its quota, decayed by --usage-half-life: what --usage-strength weighs."}, queue),
		adopted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_device_choices_adopted_total",
			Help: "Pods whose devices the node's device plugin chose differently from the scheduler's preference (whole: the pod's own GPUs; shared: the reservation of the GPU it shares), as the node's agent reported them. The scheduler's books follow the device plugin."}, []string{"kind"}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_device_report_timeouts_total",
			Help: "Shared pods not bound because the node's agent did not report their GPU's reservation device in time."}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_oldest_pending_seconds",
			Help: "How long the queue's longest-waiting job has waited since it was submitted, after the last cycle (no series while none waits)."}, queue),
		reclaimWait: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_queue_reclaim_waiting_seconds",
			Help: "How long the queue's oldest reclaim has waited for the job it made room for to start: since the first pods were taken back for it (no series while none waits)."}, queue),
		noAgent: prometheus.NewGauge(prometheus.GaugeOpts{Name: "allot_gpu_nodes_without_agent",
			Help: "GPU nodes whose allot agent's Lease is missing or ran out, after the last cycle."}),
		reclaimedAt: map[engine.JobID]time.Time{},
	}
	r.MustRegister(m.cycle, m.bound, m.bindFails, m.evicted, m.reclaims, m.consolid, m.waiting, m.waitPods, m.quota, m.fairShare, m.allocated, m.pending, m.usage, m.adopted, m.timeouts,
		m.oldest, m.reclaimWait, m.noAgent)
	return m
}

// observe records one cycle's plan on the snapshot it was made from.
func (m *Metrics) observe(seconds float64, snap *engine.Snapshot, plan *engine.Plan, queues []*v1alpha1.Queue) {
	if m == nil {
		return
	}
	m.cycle.Observe(seconds)
	// A reclaim or a consolidation evicts several pods for one job: count the jobs too.
	reclaimedFor := map[engine.JobID]bool{}
	moved := map[engine.JobID]bool{}
	for _, e := range plan.Evictions {
		m.evicted.WithLabelValues(e.Reason.Code.String()).Inc()
		switch e.Reason.Code {
		case engine.ReasonReclaimed:
			reclaimedFor[e.For] = true
		case engine.ReasonConsolidated:
			moved[e.Job] = true
		}
	}
	m.consolid.Add(float64(len(moved)))
	m.waiting.Reset()
	m.waitPods.Reset()
	m.oldest.Reset()
	m.reclaimWait.Reset()
	for j := range reclaimedFor {
		if _, ok := m.reclaimedAt[j]; !ok {
			m.reclaimedAt[j] = snap.Now
		}
	}
	// Only a cycle with waiting jobs or a reclaim needs the jobs themselves (their pods,
	// the reclaimer's queue): spare the walk over every job otherwise.
	if len(plan.Pending) > 0 || len(reclaimedFor) > 0 || len(m.reclaimedAt) > 0 {
		m.observeJobs(snap, plan, reclaimedFor)
	}
	m.observeQueues(snap, plan, queues)
}

// observeJobs counts the reclaims by the reclaiming job's queue, and the waiting jobs and
// their pods without a node by reason.
func (m *Metrics) observeJobs(snap *engine.Snapshot, plan *engine.Plan, reclaimedFor map[engine.JobID]bool) {
	bound := map[engine.JobID]int{}
	for _, b := range plan.Binds {
		bound[b.Job]++
	}
	oldest, reclaimWait := map[engine.QueueID]time.Duration{}, map[engine.QueueID]time.Duration{}
	waitingReclaims := map[engine.JobID]bool{}
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		if reclaimedFor[j.ID] {
			m.reclaims.WithLabelValues(string(j.Queue)).Inc()
		}
		r, ok := plan.Pending[j.ID]
		if !ok {
			continue
		}
		if !j.SubmitTime.IsZero() {
			oldest[j.Queue] = max(oldest[j.Queue], snap.Now.Sub(j.SubmitTime))
		}
		if at, ok := m.reclaimedAt[j.ID]; ok {
			waitingReclaims[j.ID] = true
			reclaimWait[j.Queue] = max(reclaimWait[j.Queue], snap.Now.Sub(at))
		}
		m.waiting.WithLabelValues(r.Code.String()).Inc()
		waiting := -bound[j.ID]
		for _, p := range j.Pods {
			if p.Binding == nil {
				waiting++
			}
		}
		m.waitPods.WithLabelValues(r.Code.String()).Add(float64(max(0, waiting)))
	}
	// A reclaim ends when its job runs (or goes): only those still waiting are kept.
	for id := range m.reclaimedAt {
		if !waitingReclaims[id] {
			delete(m.reclaimedAt, id)
		}
	}
	for q, d := range oldest {
		m.oldest.WithLabelValues(string(q)).Set(d.Seconds())
	}
	for q, d := range reclaimWait {
		m.reclaimWait.WithLabelValues(string(q)).Set(d.Seconds())
	}
}

// observeQueues sets the per-queue gauges from the plan's accounting.
func (m *Metrics) observeQueues(snap *engine.Snapshot, plan *engine.Plan, queues []*v1alpha1.Queue) {
	gpus := func(r engine.Resources) float64 { return float64(r[engine.ResourceGPU]) / float64(engine.OneGPU) }
	// Queues that went away stop being reported.
	m.quota.Reset()
	m.fairShare.Reset()
	m.allocated.Reset()
	m.pending.Reset()
	m.usage.Reset()
	for _, q := range snap.Queues {
		m.usage.WithLabelValues(string(q.ID)).Set(q.Usage)
	}
	for _, q := range queues {
		st, ok := plan.Queues[engine.QueueID(q.Name)]
		if !ok {
			continue
		}
		m.quota.WithLabelValues(q.Name).Set(float64(q.Spec.GPU.Quota))
		m.fairShare.WithLabelValues(q.Name).Set(gpus(st.FairShare))
		m.allocated.WithLabelValues(q.Name).Set(gpus(st.Allocated))
		m.pending.WithLabelValues(q.Name).Set(max(0, gpus(st.Requested)-gpus(st.Allocated)))
	}
}

func (m *Metrics) bindDone(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.bindFails.Inc()
		return
	}
	m.bound.Inc()
}

// adoptedDevices counts pods whose recorded devices differ from the scheduler's choice.
func (m *Metrics) adoptedDevices(kind string, n int) {
	if m != nil && n > 0 {
		m.adopted.WithLabelValues(kind).Add(float64(n))
	}
}

// reportTimedOut counts a shared pod whose reservation's device was not reported in time.
func (m *Metrics) reportTimedOut() {
	if m != nil {
		m.timeouts.Inc()
	}
}

// agents records how many GPU nodes have no live agent.
func (m *Metrics) agents(withoutAgent int) {
	if m != nil {
		m.noAgent.Set(float64(withoutAgent))
	}
}
