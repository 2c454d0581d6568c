package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// benchCluster builds nodes of 8 GPUs (two NVLink islands of 4) and queues whose quotas
// sum to the cluster.
func benchCluster(nodes, queues int) *Snapshot {
	s := &Snapshot{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := 0; i < nodes; i++ {
		n := Node{ID: NodeID(fmt.Sprintf("node-%05d", i)), CPU: 128000, Memory: 1 << 40}
		for g := 0; g < 8; g++ {
			n.GPUs = append(n.GPUs, GPU{Model: "H100", Memory: 80 << 30, Island: g / 4})
		}
		s.Nodes = append(s.Nodes, n)
	}
	quota := int64(nodes*8/queues) * int64(OneGPU)
	for i := 0; i < queues; i++ {
		s.Queues = append(s.Queues, Queue{ID: QueueID(fmt.Sprintf("team-%02d", i)),
			Resources: [numResources]QueueResource{{Quota: quota}}})
	}
	return s
}

// mixJob draws the benchmark mix: 60% one GPU, 15% 2-4 GPUs, 15% fractions, 10% gangs.
func mixJob(r *rand.Rand, i, queues int, at time.Time) Job {
	j := Job{ID: JobID(fmt.Sprintf("job-%06d", i)), Queue: QueueID(fmt.Sprintf("team-%02d", r.IntN(queues))),
		Priority: int32(r.IntN(3)), SubmitTime: at.Add(time.Duration(i) * time.Millisecond), MinMember: 1}
	req := PodRequest{CPU: 4000, Memory: 32 << 30}
	pods := 1
	switch k := r.IntN(100); {
	case k < 60:
		req.GPUs = 1
	case k < 75:
		req.GPUs = 2 + r.IntN(3)
	case k < 90:
		req.GPUFraction = MilliGPU(100 * (1 + r.IntN(9)))
	default:
		req.GPUs = 1 + r.IntN(2)
		pods = 2 + r.IntN(3)
		j.MinMember = pods
	}
	if r.IntN(10) == 0 {
		j.Class = ClassInteractive
	}
	for p := 0; p < pods; p++ {
		j.Pods = append(j.Pods, Pod{ID: PodID(fmt.Sprintf("%s-%d", j.ID, p)), Request: req})
	}
	return j
}

// BenchmarkCycleFromEmpty: one cycle on 1,000 nodes × 8 GPUs, 20 queues, 10,000 pending
// jobs (whole, fractional and gang). Target: under 0.5 s.
func BenchmarkCycleFromEmpty(b *testing.B) {
	s := benchCluster(1000, 20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		s.Jobs = append(s.Jobs, mixJob(r, i, 20, s.Now))
	}
	eng := New(Options{})
	b.ResetTimer()
	var p *Plan
	for i := 0; i < b.N; i++ {
		p = eng.Schedule(s)
	}
	b.StopTimer()
	reportPlan(b, p)
}

// BenchmarkCycleLoaded: one cycle on 5,000 nodes with 40,000 running pods and 1,000
// pending jobs. The running pods leave some teams over their fair share, so reclaim has
// work to do. Target: under 1 s and under 1 GiB.
func BenchmarkCycleLoaded(b *testing.B) {
	s := benchCluster(5000, 20)
	r := rand.New(rand.NewPCG(3, 4))
	addRunning(s, r)
	for i := 0; i < 1000; i++ {
		s.Jobs = append(s.Jobs, mixJob(r, i, 20, s.Now))
	}
	scheduleMeasured(b, s)
}

// addRunning fills the first 5,000 nodes with 40,000 one-GPU pods, skewed so that the
// first teams borrow from the last.
func addRunning(s *Snapshot, r *rand.Rand) {
	for i := 0; i < 40000; i++ {
		q := min(int(r.ExpFloat64()*5), 19)
		j := Job{ID: JobID(fmt.Sprintf("run-%06d", i)), Queue: QueueID(fmt.Sprintf("team-%02d", q)), MinMember: 1,
			SubmitTime: s.Now.Add(-time.Hour), StartTime: s.Now.Add(-time.Duration(r.IntN(3600)) * time.Second),
			Pods: []Pod{{ID: PodID(fmt.Sprintf("run-%06d-0", i)), Request: PodRequest{GPUs: 1, CPU: 4000, Memory: 32 << 30},
				Binding: &Binding{Node: s.Nodes[i/8].ID, GPUs: []int{i % 8}}}}}
		s.Jobs = append(s.Jobs, j)
	}
}

// scheduleMeasured runs the cycle b.N times and reports memory allocated per cycle.
func scheduleMeasured(b *testing.B, s *Snapshot) {
	eng := New(Options{})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	var p *Plan
	for i := 0; i < b.N; i++ {
		p = eng.Schedule(s)
	}
	b.StopTimer()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "MiB-alloc/op")
	reportPlan(b, p)
}

func reportPlan(b *testing.B, p *Plan) {
	b.ReportMetric(float64(len(p.Binds)), "binds")
	b.ReportMetric(float64(len(p.Evictions)), "evictions")
	b.ReportMetric(float64(len(p.Pending)), "pending")
}

// BenchmarkCycleConstrained is BenchmarkCycleLoaded where every job carries a node
// selector and a toleration, as the Kubernetes adapter hands them over: the 5,000 nodes are
// in 4 zones, half of them tainted for GPU work, and each job may use the nodes of its own
// zone (its pods tolerate the taint). Jobs of one zone share one NodeFilter, as pods of one
// shape do. Target: as BenchmarkCycleLoaded, under 1 s and under 1 GiB.
func BenchmarkCycleConstrained(b *testing.B) {
	const zones = 4
	s := benchCluster(5000, 20)
	filters := make([]*NodeFilter, zones)
	for z := range filters {
		filters[z] = &NodeFilter{Excluded: fmt.Sprintf("%d node(s) didn't match Pod's node affinity/selector", 5000-5000/zones)}
	}
	for i := range s.Nodes {
		z := i % zones
		filters[z].Allowed = append(filters[z].Allowed, s.Nodes[i].ID)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 40000; i++ {
		q := min(int(r.ExpFloat64()*5), 19)
		node := i / 8
		j := Job{ID: JobID(fmt.Sprintf("run-%06d", i)), Queue: QueueID(fmt.Sprintf("team-%02d", q)), MinMember: 1,
			SubmitTime: s.Now.Add(-time.Hour), StartTime: s.Now.Add(-time.Duration(r.IntN(3600)) * time.Second),
			Nodes: filters[node%zones],
			Pods: []Pod{{ID: PodID(fmt.Sprintf("run-%06d-0", i)), Request: PodRequest{GPUs: 1, CPU: 4000, Memory: 32 << 30},
				Binding: &Binding{Node: s.Nodes[node].ID, GPUs: []int{i % 8}}}}}
		s.Jobs = append(s.Jobs, j)
	}
	for i := 0; i < 1000; i++ {
		j := mixJob(r, i, 20, s.Now)
		j.Nodes = filters[r.IntN(zones)]
		s.Jobs = append(s.Jobs, j)
	}
	scheduleMeasured(b, s)
}

// BenchmarkCycleTopology is BenchmarkCycleLoaded on a cluster with a topology of 3 levels
// (5 zones ⊃ 100 blocks of 50 nodes ⊃ 500 racks of 10): the pending gangs require one
// rack and every other pending job prefers a block. Target: as BenchmarkCycleLoaded, under
// 1 s and under 1 GiB.
func BenchmarkCycleTopology(b *testing.B) {
	s := benchCluster(5000, 20)
	for i := range s.Nodes {
		s.Nodes[i].Labels = map[string]string{"zone": fmt.Sprintf("z%d", i/1000), "block": fmt.Sprintf("b%03d", i/50), "rack": fmt.Sprintf("r%03d", i/10)}
	}
	levels, names := []string{"zone", "block", "rack"}, []string{"zone", "block", "rack"}
	r := rand.New(rand.NewPCG(3, 4))
	addRunning(s, r)
	gangs := 0
	for i := 0; i < 1000; i++ {
		j := mixJob(r, i, 20, s.Now)
		j.Topology = &Topology{Levels: levels, Names: names, Required: -1, Preferred: 1}
		if j.MinMember > 1 {
			j.Topology.Required, j.Topology.Preferred = 2, -1
			gangs++
		}
		s.Jobs = append(s.Jobs, j)
	}
	b.ReportMetric(float64(gangs), "rack-gangs")
	scheduleMeasured(b, s)
}

// BenchmarkCycleChoiceLists is BenchmarkCycleLoaded with 200 more pending pods, each naming
// up to the most devices a pod may name (v1alpha1.MaxChoiceEntries, 256) in its pick list
// and as many in its exclude list: the cycle's cost of the longest lists a tenant may
// write, beside the same pods naming none (entries=0).
func BenchmarkCycleChoiceLists(b *testing.B) {
	for _, entries := range []int{0, 16, 256} { // 256: v1alpha1.MaxChoiceEntries (the engine imports nothing of the API)
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			s := benchCluster(5000, 20)
			for i := range s.Nodes {
				for g := range s.Nodes[i].GPUs {
					s.Nodes[i].GPUs[g].UUID = fmt.Sprintf("GPU-%05d-%d", i, g)
				}
			}
			r := rand.New(rand.NewPCG(3, 4))
			addRunning(s, r)
			for i := 0; i < 1000; i++ {
				s.Jobs = append(s.Jobs, mixJob(r, i, 20, s.Now))
			}
			for i := 0; i < 200; i++ {
				j := mixJob(r, 1000+i, 20, s.Now)
				for k := 0; k < entries; k++ {
					j.GPUUUIDs = append(j.GPUUUIDs, fmt.Sprintf("GPU-%05d-%d", r.IntN(5000), r.IntN(8)))
					j.ExcludeGPUUUIDs = append(j.ExcludeGPUUUIDs, fmt.Sprintf("GPU-%05d-%d", r.IntN(5000), r.IntN(8)))
				}
				s.Jobs = append(s.Jobs, j)
			}
			scheduleMeasured(b, s)
		})
	}
}
