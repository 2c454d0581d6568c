package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPoolsAreDividedApart: on random clusters of three node pools, two of them divided
// apart (Snapshot.Pools) and the default one counted as plain GPUs, with random quotas per
// pool and one-GPU jobs that name one pool or several in order, settled wave after wave:
//   - every pod runs in one of its job's pools;
//   - a reclaim or preemption stops pods only in the pool the job it makes room for starts in;
//   - no pool has a free GPU while a job that may use it waits;
//   - a queue below its quota in a pool, with a job of that pool alone waiting, leaves no
//     other queue above its own quota there (the quota is guaranteed pool by pool);
//   - the fair shares of a pool add up to no more than its GPUs;
//   - with some nodes spot and jobs of every spot policy, no job is placed on capacity its
//     policy rules out (the two checks before are asked of jobs that may use any).
func TestPoolsAreDividedApart(t *testing.T) {
	pools := []string{"", "p1", "p2"}
	resOf := map[string]Resource{"": ResourceGPU, "p1": PoolResource(0), "p2": PoolResource(1)}
	rapid.Check(t, func(t *rapid.T) {
		snap := &Snapshot{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Pools: []string{"p1", "p2"}}
		poolOf := map[NodeID]string{}
		spotNode := map[NodeID]bool{}
		capacity := map[string]int64{}
		for _, p := range pools {
			for i := rapid.IntRange(1, 2).Draw(t, "nodes"); i > 0; i-- {
				id := NodeID(fmt.Sprintf("%s-n%d", p, i))
				n := gpuNode(id, p, "A100", rapid.IntRange(1, 4).Draw(t, "gpus"))
				n.Spot = rapid.IntRange(0, 2).Draw(t, "spot") == 0
				spotNode[id] = n.Spot
				snap.Nodes = append(snap.Nodes, n)
				poolOf[id] = p
				capacity[p] += int64(len(n.GPUs)) * int64(OneGPU)
			}
		}
		var leaves []QueueID
		for i := rapid.IntRange(2, 3).Draw(t, "queues"); i > 0; i-- {
			q := Queue{ID: QueueID(fmt.Sprintf("q%d", i))}
			for _, p := range pools {
				q.Resources[resOf[p]].Quota = int64(rapid.IntRange(0, 4).Draw(t, "quota")) * int64(OneGPU)
			}
			snap.Queues = append(snap.Queues, q)
			leaves = append(leaves, q.ID)
		}
		quota := map[QueueID]Queue{}
		for _, q := range snap.Queues {
			quota[q.ID] = q
		}
		jobPools := map[JobID][]string{}
		eng := New(Options{})
		for round, n := 0, rapid.IntRange(1, 3).Draw(t, "rounds"); round < n; round++ {
			for k := rapid.IntRange(1, 10).Draw(t, "arrivals"); k > 0; k-- {
				id := JobID(fmt.Sprintf("j%d-%d", round, k))
				in := []string{rapid.SampledFrom(pools).Draw(t, "pool")}
				if rapid.IntRange(0, 2).Draw(t, "ordered") == 0 {
					if next := rapid.SampledFrom(pools).Draw(t, "next"); next != in[0] {
						in = append(in, next)
					}
				}
				jobPools[id] = in
				snap.Jobs = append(snap.Jobs, Job{ID: id, Queue: rapid.SampledFrom(leaves).Draw(t, "queue"), MinMember: 1,
					NodePool: in[0], MorePools: in[1:], SubmitTime: snap.Now.Add(time.Duration(round) * time.Minute),
					Spot: SpotPolicy(rapid.IntRange(0, 2).Draw(t, "spotPolicy")),
					Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUs: 1}}}})
			}
			for cycle := 0; ; cycle++ {
				if cycle == 50 {
					t.Fatalf("no empty plan after 50 cycles")
				}
				p := eng.Schedule(snap)
				if p.Empty() {
					break
				}
				checkVictimsInPool(t, snap, p, poolOf)
				for _, b := range p.Binds {
					for _, j := range snap.Jobs {
						if j.Pods[0].ID == b.Pod && spotCapacity(&j, snap.Now) != capacityAny && (spotCapacity(&j, snap.Now) == capacitySpot) != spotNode[b.Binding.Node] {
							t.Fatalf("job %s (spot policy %s) placed on %s (spot %v)", j.ID, j.Spot, b.Binding.Node, spotNode[b.Binding.Node])
						}
					}
				}
				applyPlan(t, snap, p)
			}
		}
		p := eng.Schedule(snap)
		free := map[string]int64{}
		for k, v := range capacity {
			free[k] = v
		}
		alloc := map[string]map[QueueID]int64{}
		for _, pool := range pools {
			alloc[pool] = map[QueueID]int64{}
		}
		for _, j := range snap.Jobs {
			if b := j.Pods[0].Binding; b != nil {
				pool := poolOf[b.Node]
				if !slices.Contains(jobPools[j.ID], pool) {
					t.Fatalf("job %s of pools %q runs in pool %q", j.ID, jobPools[j.ID], pool)
				}
				free[pool] -= int64(OneGPU)
				alloc[pool][j.Queue] += int64(OneGPU)
			}
		}
		for _, pool := range pools {
			r := resOf[pool]
			for _, q := range snap.Queues {
				if got := p.Queues[q.ID].Allocated[r]; got != alloc[pool][q.ID] {
					t.Fatalf("queue %s holds %d in pool %q, the plan counts %d", q.ID, alloc[pool][q.ID], pool, got)
				}
			}
			var shares int64
			for _, q := range snap.Queues {
				shares += p.Queues[q.ID].FairShare[r]
			}
			if shares > capacity[pool] {
				t.Fatalf("fair shares of pool %q sum to %d of its %d", pool, shares, capacity[pool])
			}
		}
		for _, j := range snap.Jobs {
			if j.Pods[0].Binding != nil {
				continue
			}
			for _, pool := range jobPools[j.ID] {
				if free[pool] > 0 && j.Spot == SpotAllowed {
					t.Fatalf("job %s of pools %q waits (%s) beside %d free milli-GPUs in pool %q", j.ID, jobPools[j.ID], p.Pending[j.ID], free[pool], pool)
				}
			}
			if len(jobPools[j.ID]) > 1 || j.Spot != SpotAllowed {
				continue // the guarantee is asked of jobs that may use the whole pool
			}
			pool, r := jobPools[j.ID][0], resOf[jobPools[j.ID][0]]
			if alloc[pool][j.Queue]+int64(OneGPU) > quota[j.Queue].Resources[r].Quota {
				continue
			}
			for _, v := range snap.Queues {
				if v.ID != j.Queue && alloc[pool][v.ID] > v.Resources[r].Quota {
					t.Fatalf("queue %s holds %d of its quota %d in pool %q and waits (%s), while %s holds %d over its quota %d there",
						j.Queue, alloc[pool][j.Queue], quota[j.Queue].Resources[r].Quota, pool, p.Pending[j.ID], v.ID, alloc[pool][v.ID], v.Resources[r].Quota)
				}
			}
		}
	})
}

// checkVictimsInPool fails where a plan stops a pod in another pool than the one the job
// it makes room for starts in.
func checkVictimsInPool(t *rapid.T, snap *Snapshot, p *Plan, poolOf map[NodeID]string) {
	jobOf := map[PodID]JobID{}
	on := map[PodID]NodeID{}
	for _, j := range snap.Jobs {
		for _, pod := range j.Pods {
			jobOf[pod.ID] = j.ID
			if pod.Binding != nil {
				on[pod.ID] = pod.Binding.Node
			}
		}
	}
	startsIn := map[JobID]string{}
	for _, b := range p.Binds {
		startsIn[jobOf[b.Pod]] = poolOf[b.Binding.Node]
	}
	for _, e := range p.Evictions {
		if e.For == "" {
			continue
		}
		if in, ok := startsIn[e.For]; ok && in != poolOf[on[e.Pod]] {
			t.Fatalf("pod %s in pool %q stopped for job %s, which starts in pool %q", e.Pod, poolOf[on[e.Pod]], e.For, in)
		}
	}
}
