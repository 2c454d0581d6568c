package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/engine"
)

// One cycle's plan, as the counters must read it:
//
//	team-b/infer  2 pods waiting → placed by reclaiming train's 2 pods (one reclaim, two evictions)
//	team-a/nb     1 pod moved by consolidation for wide (one consolidation)
//	team-c/wide   4 pods, gang: 1 bound this cycle, still pending (3 pods unschedulable)
//	team-c/big    2 pods pending, too large
func TestMetricsCountJobsAndPods(t *testing.T) {
	pending := func(id engine.JobID, queue engine.QueueID, n int) engine.Job {
		j := engine.Job{ID: id, Queue: queue}
		for range n {
			j.Pods = append(j.Pods, engine.Pod{ID: engine.PodID(string(id) + "-" + string(rune('a'+len(j.Pods))))})
		}
		return j
	}
	running := pending("team-a/train", "team-a", 2)
	for i := range running.Pods {
		running.Pods[i].Binding = &engine.Binding{Node: "n1"}
	}
	snap := &engine.Snapshot{Jobs: []engine.Job{running, pending("team-b/infer", "team-b", 2), pending("team-c/wide", "team-c", 4), pending("team-c/big", "team-c", 2)},
		Queues: []engine.Queue{{ID: "team-a", Usage: 7200}, {ID: "team-b"}}}
	plan := &engine.Plan{
		Evictions: []engine.Eviction{
			{Job: "team-a/train", Pod: "team-a/train-a", Reason: engine.Reason{Code: engine.ReasonReclaimed}, For: "team-b/infer"},
			{Job: "team-a/train", Pod: "team-a/train-b", Reason: engine.Reason{Code: engine.ReasonReclaimed}, For: "team-b/infer"},
			{Job: "team-a/nb", Pod: "team-a/nb-a", Reason: engine.Reason{Code: engine.ReasonConsolidated}, For: "team-c/wide"},
		},
		Binds: []engine.Bind{{Job: "team-c/wide", Pod: "team-c/wide-a"}},
		Pending: map[engine.JobID]engine.Reason{
			"team-b/infer": {Code: engine.ReasonNotTried}, // waits for its victims to go
			"team-c/wide":  {Code: engine.ReasonGangIncomplete},
			"team-c/big":   {Code: engine.ReasonTooLarge},
		},
		Queues: map[engine.QueueID]engine.QueueStatus{},
	}
	m := NewMetrics()
	m.observe(0.01, snap, plan, nil)
	want := `
# HELP allot_consolidations_total Jobs moved to another place to free room for a waiting job.
# TYPE allot_consolidations_total counter
allot_consolidations_total 1
# HELP allot_pods_evicted_total Pods evicted, by reason: Reclaimed, Preempted, Consolidated.
# TYPE allot_pods_evicted_total counter
allot_pods_evicted_total{reason="Consolidated"} 1
allot_pods_evicted_total{reason="Reclaimed"} 2
# HELP allot_pods_unschedulable Pods without a node after the last cycle, by their job's reason code.
# TYPE allot_pods_unschedulable gauge
allot_pods_unschedulable{reason="GangIncomplete"} 3
allot_pods_unschedulable{reason="NotTried"} 2
allot_pods_unschedulable{reason="TooLarge"} 2
# HELP allot_reclaims_total Jobs placed by taking GPUs back from other queues, by the queue that took them.
# TYPE allot_reclaims_total counter
allot_reclaims_total{queue="team-b"} 1
# HELP allot_queue_usage_gpu_seconds The queue's past use of GPUs above its quota, decayed by --usage-half-life: what --usage-strength weighs.
# TYPE allot_queue_usage_gpu_seconds gauge
allot_queue_usage_gpu_seconds{queue="team-a"} 7200
allot_queue_usage_gpu_seconds{queue="team-b"} 0
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "allot_consolidations_total", "allot_pods_evicted_total",
		"allot_pods_unschedulable", "allot_reclaims_total", "allot_queue_usage_gpu_seconds"); err != nil {
		t.Fatal(err)
	}
	// The next cycle finds nothing waiting: the gauges empty, the counters keep their counts.
	m.observe(0.01, &engine.Snapshot{}, &engine.Plan{Queues: map[engine.QueueID]engine.QueueStatus{}}, nil)
	if n := testutil.CollectAndCount(m.waitPods); n != 0 {
		t.Fatalf("%d unschedulable series after a cycle with nothing waiting", n)
	}
	if v := testutil.ToFloat64(m.reclaims.WithLabelValues("team-b")); v != 1 {
		t.Fatalf("reclaims %v after a quiet cycle, want 1", v)
	}
}

// What the chart's alerts read: the age of each queue's oldest waiting job, and how long
// its oldest reclaim has waited for the job it made room for, over three cycles:
//
//	t0        team-b/infer (submitted t0-5m) waits; two of team-a's pods are taken back for it
//	t0+2m     it still waits for them to go
//	t0+3m     it runs: no series left
func TestMetricsAgeOfWaitsAndReclaims(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	infer := engine.Job{ID: "team-b/infer", Queue: "team-b", SubmitTime: t0.Add(-5 * time.Minute), Pods: []engine.Pod{{ID: "team-b/infer-a"}}}
	waiting := &engine.Plan{Pending: map[engine.JobID]engine.Reason{infer.ID: {Code: engine.ReasonNotTried}}, Queues: map[engine.QueueID]engine.QueueStatus{}}
	reclaim := *waiting
	reclaim.Evictions = []engine.Eviction{{Job: "team-a/train", Pod: "team-a/train-a", Reason: engine.Reason{Code: engine.ReasonReclaimed}, For: infer.ID}}
	m := NewMetrics()
	// Each gauge holds team-b's series alone while it waits (ToFloat64 reads the one series).
	read := func() (oldest, reclaimWait float64, series int) {
		return testutil.ToFloat64(m.oldest), testutil.ToFloat64(m.reclaimWait), testutil.CollectAndCount(m.oldest) + testutil.CollectAndCount(m.reclaimWait)
	}
	m.observe(0.01, &engine.Snapshot{Now: t0, Jobs: []engine.Job{infer}}, &reclaim, nil)
	if o, r, n := read(); o != 300 || r != 0 || n != 2 {
		t.Fatalf("at t0: oldest %v s, reclaim waiting %v s; want 300 and 0", o, r)
	}
	m.observe(0.01, &engine.Snapshot{Now: t0.Add(2 * time.Minute), Jobs: []engine.Job{infer}}, waiting, nil)
	if o, r, _ := read(); o != 420 || r != 120 {
		t.Fatalf("at t0+2m: oldest %v s, reclaim waiting %v s; want 420 and 120", o, r)
	}
	m.observe(0.01, &engine.Snapshot{Now: t0.Add(3 * time.Minute), Jobs: []engine.Job{infer}}, &engine.Plan{Queues: map[engine.QueueID]engine.QueueStatus{}}, nil)
	if n := testutil.CollectAndCount(m.oldest) + testutil.CollectAndCount(m.reclaimWait); n != 0 || len(m.reclaimedAt) != 0 {
		t.Fatalf("after the job started: %d series, %d reclaims remembered", n, len(m.reclaimedAt))
	}
}
