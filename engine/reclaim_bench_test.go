package engine

import (
	"fmt"
	"testing"
	"time"
)

// reclaimCluster is the setup of allot bench's reclaim scenarios (KAI-Scheduler's reclaim
// scale tests) as the engine sees it: nodes × 8 GPUs all held by one-GPU jobs of queue
// filler (no quota, no over-quota weight: every GPU borrowed), and queue reclaim, whose
// quota is the whole cluster, with the given jobs waiting.
func reclaimCluster(nodes int, waiting []Job) *Snapshot {
	s := benchCluster(nodes, 1)
	zero := 0.0
	s.Queues = []Queue{
		{ID: "filler", Resources: [numResources]QueueResource{{Quota: 0, OverQuotaWeight: &zero}}},
		{ID: "reclaim", Resources: [numResources]QueueResource{{Quota: int64(nodes*8) * int64(OneGPU)}}},
	}
	for i := 0; i < nodes*8; i++ {
		s.Jobs = append(s.Jobs, Job{ID: JobID(fmt.Sprintf("victim-%05d", i)), Queue: "filler", MinMember: 1,
			SubmitTime: s.Now.Add(-2 * time.Hour), StartTime: s.Now.Add(-time.Hour),
			Pods: []Pod{{ID: PodID(fmt.Sprintf("victim-%05d-0", i)), Request: PodRequest{GPUs: 1},
				Binding: &Binding{Node: s.Nodes[i/8].ID, GPUs: []int{i % 8}}}}})
	}
	for i := range waiting {
		waiting[i].Queue, waiting[i].SubmitTime = "reclaim", s.Now.Add(time.Duration(i)*time.Millisecond)
	}
	s.Jobs = append(s.Jobs, waiting...)
	return s
}

// oneGPUJobs makes n waiting one-GPU jobs.
func oneGPUJobs(n int) []Job {
	jobs := make([]Job, n)
	for i := range jobs {
		jobs[i] = Job{ID: JobID(fmt.Sprintf("reclaimer-%05d", i)), MinMember: 1,
			Pods: []Pod{{ID: PodID(fmt.Sprintf("reclaimer-%05d-0", i)), Request: PodRequest{GPUs: 1}}}}
	}
	return jobs
}

// BenchmarkReclaimOne: the cycle that reclaims one GPU on 500 full nodes (allot bench
// --scenario reclaim-one).
func BenchmarkReclaimOne(b *testing.B) {
	scheduleMeasured(b, reclaimCluster(500, oneGPUJobs(1)))
}

// BenchmarkReclaimAll: the cycle that reclaims all 4,000 GPUs of 500 full nodes for 4,000
// one-GPU jobs (allot bench --scenario reclaim-all).
func BenchmarkReclaimAll(b *testing.B) {
	scheduleMeasured(b, reclaimCluster(500, oneGPUJobs(4000)))
}

// BenchmarkReclaimBig: the cycle that reclaims 250 whole nodes of 500 for one gang of 250
// pods × 8 GPUs (allot bench --scenario reclaim-big).
func BenchmarkReclaimBig(b *testing.B) {
	gang := Job{ID: "big", MinMember: 250}
	for p := 0; p < 250; p++ {
		gang.Pods = append(gang.Pods, Pod{ID: PodID(fmt.Sprintf("big-%03d", p)), Request: PodRequest{GPUs: 8}})
	}
	scheduleMeasured(b, reclaimCluster(500, []Job{gang}))
}
