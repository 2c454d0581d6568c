package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/allot-dev/allot/mig"
)

// genCluster draws a random cluster, queue tree and job mix.
func genCluster(t *rapid.T) *Snapshot {
	snap := &Snapshot{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Accelerators: []string{"ascend"}}
	nNodes := rapid.IntRange(1, 6).Draw(t, "nodes")
	for i := 0; i < nNodes; i++ {
		gpus := rapid.SampledFrom([]int{0, 1, 2, 4, 8}).Draw(t, "gpus")
		mem := int64(rapid.SampledFrom([]int{16, 40, 80}).Draw(t, "gpuMem")) << 30
		n := Node{ID: NodeID(fmt.Sprintf("n%d", i)), CPU: 64000, Memory: 256 << 30}
		model := rapid.SampledFrom([]string{"A100", "H100"}).Draw(t, "model")
		for g := 0; g < gpus; g++ {
			n.GPUs = append(n.GPUs, GPU{Model: model, Memory: mem, Island: g / 4})
		}
		// Now and then a node in MIG mode: a fixed layout, or one the engine makes; or a
		// node of another vendor's accelerators.
		switch kind := rapid.IntRange(0, 7).Draw(t, "nodeKind"); {
		case gpus > 0 && kind < 2:
			genMIG(t, &n)
		case kind == 2:
			n.Accelerator = "ascend"
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	nQueues := rapid.IntRange(1, 4).Draw(t, "queues")
	withDept := rapid.Bool().Draw(t, "dept")
	if withDept {
		snap.Queues = append(snap.Queues, Queue{ID: "dept", Resources: [numResources]QueueResource{{Quota: int64(rapid.IntRange(0, 8).Draw(t, "deptQuota")) * 1000}}})
	}
	for i := 0; i < nQueues; i++ {
		q := Queue{ID: QueueID(fmt.Sprintf("q%d", i)), Priority: int32(rapid.IntRange(0, 1).Draw(t, "qprio"))}
		if withDept && i%2 == 0 {
			q.Parent = "dept"
		}
		q.Resources[ResourceGPU].Quota = int64(rapid.IntRange(0, 6).Draw(t, "quota")) * 1000
		q.Resources[AcceleratorResource(0)].Quota = int64(rapid.IntRange(0, 4).Draw(t, "ascendQuota")) * 1000
		if rapid.Bool().Draw(t, "hasLimit") {
			l := q.Resources[ResourceGPU].Quota + int64(rapid.IntRange(0, 8).Draw(t, "limitExtra"))*1000
			q.Resources[ResourceGPU].Limit = &l
		}
		snap.Queues = append(snap.Queues, q)
	}
	// Node filters, as pod shapes give them: a few shared by several jobs, some nodes ruled
	// out; and a pod cap on some nodes.
	var filters []*NodeFilter
	for k := rapid.IntRange(0, 2).Draw(t, "filters"); k > 0; k-- {
		f := &NodeFilter{Excluded: "node(s) didn't match Pod's node affinity/selector"}
		for _, n := range snap.Nodes {
			if rapid.Bool().Draw(t, "allowed") {
				f.Allowed = append(f.Allowed, n.ID)
			}
		}
		filters = append(filters, f)
	}
	for i := range snap.Nodes {
		if rapid.IntRange(0, 3).Draw(t, "podcap") == 0 {
			c := rapid.IntRange(0, 3).Draw(t, "maxPods")
			snap.Nodes[i].MaxPods = &c
		}
	}
	nJobs := rapid.IntRange(0, 25).Draw(t, "jobs")
	for i := 0; i < nJobs; i++ {
		j := genJob(t, i, nQueues, snap.Now)
		if len(filters) > 0 {
			if k := rapid.IntRange(0, len(filters)).Draw(t, "filter"); k > 0 {
				j.Nodes = filters[k-1]
			}
		}
		snap.Jobs = append(snap.Jobs, j)
	}
	return snap
}

func genJob(t *rapid.T, i, nQueues int, now time.Time) Job {
	j := Job{ID: JobID(fmt.Sprintf("j%d", i)), Queue: QueueID(fmt.Sprintf("q%d", rapid.IntRange(0, nQueues-1).Draw(t, "jq"))),
		Class:      Class(rapid.IntRange(0, 2).Draw(t, "class")),
		Priority:   int32(rapid.IntRange(0, 2).Draw(t, "prio")),
		SubmitTime: now.Add(time.Duration(i) * time.Second)}
	var req PodRequest
	switch rapid.IntRange(0, 4).Draw(t, "kind") {
	case 0, 1:
		req.GPUs = rapid.IntRange(1, 4).Draw(t, "whole")
		if rapid.IntRange(0, 3).Draw(t, "ascendJob") == 0 {
			j.Accelerator = "ascend"
		}
	case 2:
		req.GPUFraction = MilliGPU(rapid.IntRange(1, 999).Draw(t, "fraction"))
	case 3:
		req.GPUMemory = int64(rapid.IntRange(1, 40).Draw(t, "memGi")) << 30
		if rapid.IntRange(0, 2).Draw(t, "dynamic") == 0 {
			req.GPUMemoryLimit = req.GPUMemory + int64(rapid.IntRange(1, 40).Draw(t, "burstGi"))<<30
		}
	case 4:
		if rapid.Bool().Draw(t, "migByName") {
			req.MIG = rapid.SampledFrom(migA100.Names()).Draw(t, "profile")
		} else {
			req.MIGShare = MilliGPU(rapid.IntRange(1, 1000).Draw(t, "migShare"))
		}
		req.Devices = rapid.IntRange(1, 2).Draw(t, "instances")
	}
	req.CPU = int64(rapid.IntRange(0, 16).Draw(t, "cpu")) * 1000
	req.Memory = int64(rapid.IntRange(0, 64).Draw(t, "mem")) << 30
	pods := rapid.IntRange(1, 4).Draw(t, "pods")
	j.MinMember = rapid.IntRange(1, pods).Draw(t, "min")
	for k := 0; k < pods; k++ {
		j.Pods = append(j.Pods, Pod{ID: PodID(fmt.Sprintf("%s-%d", j.ID, k)), Request: req})
	}
	if rapid.IntRange(0, 4).Draw(t, "typed") == 0 {
		j.GPUTypes = []string{"H100"}
	}
	return j
}

var migA100, _ = mig.ByName("A100-80GB")

// genMIG puts the node's GPUs in MIG mode as NVIDIA-A100-SXM4-80GB: a random valid
// layout, fixed or for the engine to change.
func genMIG(t *rapid.T, n *Node) {
	dynamic := rapid.Bool().Draw(t, "migDynamic")
	for g := range n.GPUs {
		n.GPUs[g].Model, n.GPUs[g].Memory = "NVIDIA-A100-SXM4-80GB", 80<<30
		var layout mig.Layout
		var in []MIGInstance
		for k := rapid.IntRange(0, 7).Draw(t, "instances"); k > 0; k-- {
			p := &migA100.Profiles[rapid.IntRange(0, len(migA100.Profiles)-1).Draw(t, "layoutProfile")]
			st := rapid.SampledFrom(p.Starts).Draw(t, "layoutStart")
			if migA100.Valid(layout, p, st) == nil {
				layout = append(layout, mig.Placed{Profile: p, Start: st})
				in = append(in, MIGInstance{Profile: p.Name, Start: st})
			}
		}
		n.GPUs[g].MIG = &MIGDevice{Model: migA100, Dynamic: dynamic, Instances: in}
	}
}

// checkMIG checks a binding against the devices in MIG mode: MIG pods hold instances of
// their profile at allowed starts, on static devices only those the layout has; no one
// else holds a MIG device; no two instances held on a device share a memory slice.
func checkMIG(t *rapid.T, pod Pod, n *Node, held map[string]mig.Mask) {
	b, r := pod.Binding, pod.Request
	for i, g := range b.GPUs {
		dev := n.GPUs[g].MIG
		if !r.WantsMIG() {
			if dev != nil {
				t.Fatalf("pod %s (not asking MIG) holds %s GPU %d, which is in MIG mode", pod.ID, n.ID, g)
			}
			continue
		}
		if dev == nil || b.MIG == "" || len(b.MIGStarts) != len(b.GPUs) {
			t.Fatalf("MIG pod %s holds %s GPU %d as %+v", pod.ID, n.ID, g, *b)
		}
		p, ok := dev.Model.Profile(b.MIG)
		if !ok || !slices.Contains(p.Starts, b.MIGStarts[i]) {
			t.Fatalf("pod %s holds %s at %d, not a placement of %s", pod.ID, b.MIG, b.MIGStarts[i], dev.Model.Name)
		}
		if r.MIG != "" && p.Name != r.MIG {
			t.Fatalf("pod %s asks %s, holds %s", pod.ID, r.MIG, p.Name)
		}
		if r.MIGShare > 0 && int64(p.Compute)*1000 < int64(r.MIGShare)*7 {
			t.Fatalf("pod %s asks %d thousandths, holds %s", pod.ID, r.MIGShare, p.Name)
		}
		if b.Share != MilliGPU(dev.Model.Share(p)) {
			t.Fatalf("pod %s counts %d for a %s", pod.ID, b.Share, p.Name)
		}
		if !dev.Dynamic && !slices.ContainsFunc(dev.Instances, func(in MIGInstance) bool { return in.Profile == p.Name && in.Start == b.MIGStarts[i] }) {
			t.Fatalf("pod %s holds %s at %d on a fixed layout without it: %v", pod.ID, p.Name, b.MIGStarts[i], dev.Instances)
		}
		key := fmt.Sprintf("%s/%d", n.ID, g)
		m := p.Mask(b.MIGStarts[i])
		if held[key]&m != 0 {
			t.Fatalf("pod %s's %s at %d overlaps an instance held on %s (slices %08b)", pod.ID, p.Name, b.MIGStarts[i], key, held[key])
		}
		held[key] |= m
	}
}

// burst has some running dynamic fractions use memory past their requests, up to their
// limits and never past what their device has free, as the agent would measure them.
func burst(t *rapid.T, snap *Snapshot) {
	onDev := map[string]int64{} // what each device's pods use or hold, whichever is more
	key := func(b *Binding) string { return fmt.Sprintf("%s/%d", b.Node, b.GPUs[0]) }
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if b := p.Binding; b != nil && b.Share > 0 && b.MIG == "" && len(b.GPUs) == 1 {
				onDev[key(b)] += max(b.Memory, b.MemoryUsed)
			}
		}
	}
	for i := range snap.Jobs {
		for k := range snap.Jobs[i].Pods {
			p := &snap.Jobs[i].Pods[k]
			b := p.Binding
			if b == nil || b.MemoryLimit <= b.Memory || len(b.GPUs) != 1 || rapid.IntRange(0, 2).Draw(t, "bursts") != 0 {
				continue
			}
			var dev int64
			for _, n := range snap.Nodes {
				if n.ID == b.Node {
					dev = n.GPUs[b.GPUs[0]].Memory
				}
			}
			was := max(b.Memory, b.MemoryUsed)
			room := dev - onDev[key(b)] + was
			use := min(b.Memory+int64(rapid.IntRange(0, 40).Draw(t, "useGi"))<<30, b.MemoryLimit, room)
			b.MemoryUsed = use
			onDev[key(b)] += max(b.Memory, use) - was
		}
	}
}

// checkBursts checks that no pod was placed this cycle where its request does not fit
// beside what the device's other pods use or hold.
func checkBursts(t *rapid.T, snap *Snapshot, p *Plan) {
	onDev := map[string]int64{}
	devMem := map[string]int64{}
	for _, n := range snap.Nodes {
		for g, d := range n.GPUs {
			devMem[fmt.Sprintf("%s/%d", n.ID, g)] = d.Memory
		}
	}
	for _, j := range snap.Jobs {
		for _, pod := range j.Pods {
			if b := pod.Binding; b != nil && b.Share > 0 && b.MIG == "" {
				for _, g := range b.GPUs {
					onDev[fmt.Sprintf("%s/%d", b.Node, g)] += max(b.Memory, b.MemoryUsed)
				}
			}
		}
	}
	for _, b := range p.Binds {
		if b.Binding.Share == 0 || b.Binding.MIG != "" {
			continue
		}
		for _, g := range b.Binding.GPUs {
			k := fmt.Sprintf("%s/%d", b.Binding.Node, g)
			if onDev[k] > devMem[k] {
				t.Fatalf("pod %s placed on %s, whose pods use or hold %d bytes of %d", b.Pod, k, onDev[k], devMem[k])
			}
		}
	}
}

// applyPlan does what a binder would: evictions first, then binds.
func applyPlan(t *rapid.T, snap *Snapshot, p *Plan) {
	pods := map[PodID]*Pod{}
	for i := range snap.Jobs {
		for k := range snap.Jobs[i].Pods {
			pods[snap.Jobs[i].Pods[k].ID] = &snap.Jobs[i].Pods[k]
		}
	}
	evicted := map[JobID]bool{}
	for _, e := range p.Evictions {
		if pods[e.Pod].Binding == nil {
			t.Fatalf("evicted pod %s was not running", e.Pod)
		}
		pods[e.Pod].Binding = nil
		evicted[e.Job] = true
	}
	// On Kubernetes an evicted pod is gone (its controller makes a new one), so a job that
	// loses pods, moved or stopped, keeps at least MinMember of them in place or none:
	// a gang never runs partly while its members are re-created.
	for _, j := range snap.Jobs {
		if !evicted[j.ID] {
			continue
		}
		if stay := countBound(j); stay > 0 && stay < j.MinMember {
			t.Fatalf("gang %s keeps %d of its %d minimum pods in place while the others are evicted: %s", j.ID, stay, j.MinMember, describePlan(p))
		}
	}
	for _, b := range p.Binds {
		if pods[b.Pod].Binding != nil {
			t.Fatalf("bound pod %s that is running", b.Pod)
		}
		bb := b.Binding
		pods[b.Pod].Binding = &bb
	}
	// A job that reaches its gang starts now (protection from churn counts from here);
	// one that fell below it is no longer running.
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		switch running := countBound(*j) >= j.MinMember; {
		case running && j.StartTime.IsZero():
			j.StartTime = snap.Now
		case !running:
			j.StartTime = time.Time{}
		}
	}
}

// genHistory gives the queues of a cluster past usage and, on some, protection from
// churn, the nodes racks and blocks and some jobs a required or preferred level (issue 18),
// and returns the strength to schedule with (0 on a quarter of the runs).
func genHistory(t *rapid.T, snap *Snapshot, protect bool) float64 {
	racks := rapid.IntRange(1, 3).Draw(t, "racks")
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		n.Labels = map[string]string{"block": fmt.Sprintf("b%d", i%(2*racks)), "host": string(n.ID)}
		if rapid.IntRange(0, 5).Draw(t, "unracked") > 0 { // now and then a node outside every rack
			n.Labels["rack"] = fmt.Sprintf("r%d", (i%(2*racks))/2)
		}
	}
	for i := range snap.Jobs {
		if rapid.IntRange(0, 2).Draw(t, "topology") == 0 {
			req, pref := rapid.IntRange(-1, 2).Draw(t, "required"), rapid.IntRange(-1, 2).Draw(t, "preferred")
			snap.Jobs[i].Topology = &Topology{Levels: []string{"rack", "block", "host"}, Required: req, Preferred: pref}
		}
	}
	for i := range snap.Queues {
		snap.Queues[i].Usage = float64(rapid.IntRange(0, 3).Draw(t, "usageDays")) * 86400 * 4
		if protect && rapid.IntRange(0, 2).Draw(t, "protected") == 0 {
			d := time.Duration(rapid.IntRange(1, 30).Draw(t, "minRuntimeMinutes")) * time.Minute
			if rapid.Bool().Draw(t, "reclaimOrPreempt") {
				snap.Queues[i].ReclaimMinRuntime = &d
			} else {
				snap.Queues[i].PreemptMinRuntime = &d
			}
		}
	}
	return rapid.SampledFrom([]float64{0, 0.5, 1, 3}).Draw(t, "usageStrength")
}

// checkInvariants asserts DESIGN.md section 5 on a snapshot and the plan that led to it,
// and that a job with a required level runs within one domain of it.
func checkInvariants(t *rapid.T, snap *Snapshot, p *Plan) {
	for _, j := range snap.Jobs {
		if j.Topology == nil || j.Topology.Required < 0 {
			continue
		}
		domains := map[string]bool{}
		for _, pod := range j.Pods {
			if pod.Binding == nil {
				continue
			}
			for _, n := range snap.Nodes {
				if n.ID == pod.Binding.Node {
					d, ok := j.Topology.domainOf(&n, j.Topology.Required)
					if !ok {
						t.Fatalf("job %s requires level %d but runs on %s, which has no label %s", j.ID, j.Topology.Required, n.ID, j.Topology.Levels[j.Topology.Required])
					}
					domains[d] = true
				}
			}
		}
		if len(domains) > 1 {
			t.Fatalf("job %s requires one domain of level %s but runs in %v", j.ID, j.Topology.Levels[j.Topology.Required], domains)
		}
	}
	nodes := map[NodeID]*Node{}
	for i := range snap.Nodes {
		nodes[snap.Nodes[i].ID] = &snap.Nodes[i]
	}
	type gpuKey struct {
		n NodeID
		g int
	}
	used := map[gpuKey]MilliGPU{}
	usedMem := map[gpuKey]int64{}
	cpu, mem := map[NodeID]int64{}, map[NodeID]int64{}
	np := map[QueueID]int64{}
	parent := map[QueueID]QueueID{}
	quota := map[QueueID]int64{}
	for _, q := range snap.Queues {
		parent[q.ID], quota[q.ID] = q.Parent, q.Resources[ResourceGPU].Quota
	}
	podsOn := map[NodeID]int{}
	migHeld := map[string]mig.Mask{}
	newBinds := map[PodID]bool{}
	for _, b := range p.Binds {
		newBinds[b.Pod] = true
	}
	for _, j := range snap.Jobs {
		bound := 0
		for _, pod := range j.Pods {
			b := pod.Binding
			if b == nil {
				continue
			}
			bound++
			n := nodes[b.Node]
			podsOn[b.Node]++
			if f := j.Nodes; f != nil && newBinds[pod.ID] && !slices.Contains(f.Allowed, b.Node) {
				t.Fatalf("pod %s placed on %s, which its node filter rules out (allowed %v)", pod.ID, b.Node, f.Allowed)
			}
			cpu[b.Node] += pod.Request.CPU
			mem[b.Node] += pod.Request.Memory
			r := pod.Request
			if (r.GPUs > 0 || r.Shared() || r.WantsMIG()) && n.Accelerator != j.Accelerator {
				t.Fatalf("pod %s asking %q devices runs on %s, a node of %q", pod.ID, j.Accelerator, n.ID, n.Accelerator)
			}
			checkMIG(t, pod, n, migHeld)
			if r.WantsMIG() {
				if len(b.GPUs) != r.SharedDevices() {
					t.Fatalf("MIG pod %s wants %d instances, holds %d", pod.ID, r.SharedDevices(), len(b.GPUs))
				}
				if !j.IsPreemptible() {
					for q := j.Queue; q != ""; q = parent[q] {
						np[q] += int64(b.Share) * int64(len(b.GPUs))
					}
				}
				continue
			}
			if r.Shared() {
				if len(b.GPUs) != 1 {
					t.Fatalf("shared pod %s on %d GPUs", pod.ID, len(b.GPUs))
				}
				dev := n.GPUs[b.GPUs[0]]
				if r.GPUMemory > 0 && b.Memory < r.GPUMemory {
					t.Fatalf("pod %s wants %d bytes of GPU memory, holds %d (share %d of %d)", pod.ID, r.GPUMemory, b.Memory, b.Share, dev.Memory)
				}
				if r.GPUFraction > 0 && b.Share != r.GPUFraction {
					t.Fatalf("pod %s wants %d, holds %d", pod.ID, r.GPUFraction, b.Share)
				}
			} else if len(b.GPUs) != r.GPUs {
				t.Fatalf("pod %s wants %d GPUs, holds %d", pod.ID, r.GPUs, len(b.GPUs))
			}
			for _, g := range b.GPUs {
				if len(j.GPUTypes) > 0 && n.GPUs[g].Model != j.GPUTypes[0] {
					t.Fatalf("pod %s on model %s, wants %v", pod.ID, n.GPUs[g].Model, j.GPUTypes)
				}
				// Exact units: a device's booked memory and compute never pass what it has.
				k := gpuKey{b.Node, g}
				if b.Share == 0 {
					used[k] += OneGPU
					usedMem[k] += n.GPUs[g].Memory
				} else if b.Memory == 0 && b.Compute == 0 {
					used[k] += b.Share // a binding from before memory and compute were booked apart
					usedMem[k] += n.GPUs[g].Memory * int64(b.Share) / int64(OneGPU)
				} else {
					used[k] += b.Compute
					usedMem[k] += b.Memory
				}
				if used[k] > OneGPU || usedMem[k] > n.GPUs[g].Memory {
					t.Fatalf("GPU %s/%d over-committed: compute %d, memory %d of %d", b.Node, g, used[k], usedMem[k], n.GPUs[g].Memory)
				}
			}
			if !j.IsPreemptible() && j.Accelerator == "" {
				for q := j.Queue; q != ""; q = parent[q] {
					np[q] += int64(len(b.GPUs))*int64(OneGPU)*boolInt(b.Share == 0) + int64(b.Share)
				}
			}
		}
		if bound > 0 && bound < j.MinMember {
			t.Fatalf("gang %s runs %d of its %d minimum pods", j.ID, bound, j.MinMember)
		}
	}
	for id, n := range nodes {
		if cpu[id] > n.CPU || mem[id] > n.Memory {
			t.Fatalf("node %s over-committed: cpu %d/%d mem %d/%d", id, cpu[id], n.CPU, mem[id], n.Memory)
		}
		if n.MaxPods != nil && podsOn[id] > *n.MaxPods {
			t.Fatalf("node %s runs %d pods, its cap is %d", id, podsOn[id], *n.MaxPods)
		}
	}
	for q, v := range np {
		if v > quota[q] {
			t.Fatalf("queue %s runs %d non-preemptible milli-GPUs over its quota %d", q, v, quota[q])
		}
	}
	// Fair shares add up to what there is to divide whenever demand exceeds it.
	var capacity, demand, sum int64
	var ascend, ascendShares int64
	for _, n := range snap.Nodes {
		if n.Accelerator == "" {
			capacity += int64(len(n.GPUs)) * int64(OneGPU)
		} else {
			ascend += int64(len(n.GPUs)) * int64(OneGPU)
		}
	}
	for _, q := range snap.Queues {
		if q.Parent == "" {
			ascendShares += p.Queues[q.ID].FairShare[AcceleratorResource(0)]
		}
	}
	if ascendShares > ascend {
		t.Fatalf("ascend fair shares sum to %d, more than the %d there are", ascendShares, ascend)
	}
	// Demand as the engine divides it: leaves' requests, summed upwards, capped by limits.
	var capped func(q Queue) int64
	capped = func(q Queue) int64 {
		d, leaf := int64(0), true
		for _, c := range snap.Queues {
			if c.Parent == q.ID {
				d += capped(c)
				leaf = false
			}
		}
		if leaf {
			d = p.Queues[q.ID].Requested[ResourceGPU]
		}
		if l := q.Resources[ResourceGPU].Limit; l != nil {
			d = min(d, *l)
		}
		return d
	}
	for _, q := range snap.Queues {
		if q.Parent == "" {
			sum += p.Queues[q.ID].FairShare[ResourceGPU]
			demand += capped(q)
		}
	}
	if demand >= capacity && sum != capacity {
		t.Fatalf("fair shares sum to %d of capacity %d with demand %d", sum, capacity, demand)
	}
	// And at every department: its children divide exactly its share when they want it.
	for _, d := range snap.Queues {
		var kids, want int64
		has := false
		for _, c := range snap.Queues {
			if c.Parent == d.ID {
				has = true
				kids += p.Queues[c.ID].FairShare[ResourceGPU]
				want += capped(c)
			}
		}
		share := p.Queues[d.ID].FairShare[ResourceGPU]
		if has && (kids > share || (want >= share && kids != share)) {
			t.Fatalf("the children of %s have fair shares summing to %d of its %d (they want %d)", d.ID, kids, share, want)
		}
	}
	if sum > capacity {
		t.Fatalf("fair shares sum to %d, more than capacity %d", sum, capacity)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestInvariantsOnRandomClusters schedules random clusters to a settled state, deleting
// random jobs on the way, and checks the invariants after every cycle and that the
// engine settles (stability).
func TestInvariantsOnRandomClusters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := genCluster(t)
		eng := New(Options{Placement: Placement(rapid.IntRange(0, 1).Draw(t, "placement")), UsageStrength: genHistory(t, snap, true)})
		rounds := rapid.IntRange(1, 3).Draw(t, "rounds")
		for round := 0; round < rounds; round++ {
			settled := false
			var last []string // the last plans, to show a loop when there is one
			for cycle := 0; cycle < 50; cycle++ {
				p := eng.Schedule(snap)
				last = append(last, describePlan(p))
				if len(last) > 4 {
					last = last[1:]
				}
				if p.Empty() {
					settled = true
					checkInvariants(t, snap, p)
					for _, j := range snap.Jobs {
						if countBound(j) < len(j.Pods) && p.Pending[j.ID].Message == "" {
							t.Fatalf("job %s waits without a reason", j.ID)
						}
					}
					break
				}
				applyPlan(t, snap, p)
				checkInvariants(t, snap, p)
				checkBursts(t, snap, p)
				burst(t, snap)
			}
			if !settled {
				t.Fatalf("no empty plan after 50 cycles: the engine flaps; the last plans:\n%s", strings.Join(last, "\n"))
			}
			// Churn: some jobs end, new ones arrive.
			if len(snap.Jobs) > 0 {
				k := rapid.IntRange(0, len(snap.Jobs)-1).Draw(t, "delete")
				snap.Jobs = append(snap.Jobs[:k], snap.Jobs[k+1:]...)
			}
			snap.Jobs = append(snap.Jobs, genJob(t, 100+round, countLeaves(snap), snap.Now))
		}
	})
}

// describePlan renders what a plan changes and why, one line per eviction or bind.
func describePlan(p *Plan) string {
	var b strings.Builder
	b.WriteString("plan:\n")
	for _, e := range p.Evictions {
		fmt.Fprintf(&b, "  evict %s: %s\n", e.Pod, e.Reason.Message)
	}
	for _, x := range p.Binds {
		fmt.Fprintf(&b, "  bind %s on %s %v@%d\n", x.Pod, x.Binding.Node, x.Binding.GPUs, x.Binding.Share)
	}
	// The queues' GPU shares as the cycle computed them: a loop often turns on them.
	for _, id := range slices.Sorted(maps.Keys(p.Queues)) {
		q := p.Queues[id]
		fmt.Fprintf(&b, "  queue %s: fair %d, allocated %d, requested %d milli-GPUs\n", id, q.FairShare[ResourceGPU], q.Allocated[ResourceGPU], q.Requested[ResourceGPU])
	}
	return b.String()
}

func countBound(j Job) int {
	n := 0
	for _, p := range j.Pods {
		if p.Binding != nil {
			n++
		}
	}
	return n
}

func countLeaves(s *Snapshot) int {
	n := 0
	for _, q := range s.Queues {
		if q.ID != "dept" {
			n++
		}
	}
	return n
}

// TestDeterminism: the same snapshot yields the same plan.
func TestDeterminism(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := genCluster(t)
		a := fmt.Sprintf("%+v", New(Options{}).Schedule(snap))
		b := fmt.Sprintf("%+v", New(Options{}).Schedule(snap))
		if a != b {
			t.Fatalf("two plans for one snapshot:\n%s\n%s", a, b)
		}
	})
}

// TestDeclarationOrderDoesNotMatter: the same cluster with its queues declared, and its
// jobs listed, in another order (a file edited, an informer's cache) settles to the same
// placements. Ties are broken by properties of the queues and jobs, never by position.
func TestDeclarationOrderDoesNotMatter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := genCluster(t)
		shuffled := *snap
		shuffled.Queues = rapid.Permutation(snap.Queues).Draw(t, "queueOrder")
		shuffled.Jobs = slices.Clone(snap.Jobs)
		if rapid.Bool().Draw(t, "reorderJobs") {
			shuffled.Jobs = rapid.Permutation(snap.Jobs).Draw(t, "jobOrder")
		}
		for i := range shuffled.Jobs {
			shuffled.Jobs[i].Pods = slices.Clone(shuffled.Jobs[i].Pods)
		}
		eng := New(Options{})
		a, b := settle(t, eng, snap), settle(t, eng, &shuffled)
		if a != b {
			t.Fatalf("declaration order changed the outcome:\n%s\n---- reordered:\n%s", a, b)
		}
	})
}

// settle schedules until the plan is empty and renders how many pods of every job run.
// Which of two alike devices or nodes a pod got is not an outcome anyone waits for.
func settle(t *rapid.T, eng *Engine, snap *Snapshot) string {
	var last []string // the last plans, to show a loop when there is one
	for cycle := 0; ; cycle++ {
		if cycle == 50 {
			t.Fatalf("no empty plan after 50 cycles: the engine flaps; the last plans:\n%s", strings.Join(last, "\n"))
		}
		p := eng.Schedule(snap)
		if last = append(last, describePlan(p)); len(last) > 4 {
			last = last[1:]
		}
		if p.Empty() {
			break
		}
		applyPlan(t, snap, p)
	}
	var lines []string
	for _, j := range snap.Jobs {
		lines = append(lines, fmt.Sprintf("%s (queue %s) runs %d of %d pods", j.ID, j.Queue, countBound(j), len(j.Pods)))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestQuotaIsGuaranteed: in settled random clusters of preemptible jobs of 1 to 3 GPUs
// (one pod each) beside non-preemptible ones that never move, with departments, limits
// and quotas that may add up to more than the cluster has, no queue is left below its
// quota (min(quota, demand, limit)) with a job waiting while a reclaim by quota could
// start it: on one node, its free GPUs and the GPUs of some preemptible jobs of other
// queues hold the job, every queue on the reclaimer's side that gains ends within its
// quota (a project's department's quota counts for it where the department gains too)
// and every queue on the victims' side ends at or above its own (DESIGN.md 3.4). Free
// GPUs scattered over nodes beside work that never moves make the reclaim take a block
// from a queue above its quota, even one at its fair share.
func TestQuotaIsGuaranteed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := &Snapshot{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		for i := rapid.IntRange(1, 4).Draw(t, "nodes"); i > 0; i-- {
			snap.Nodes = append(snap.Nodes, gpuNode(NodeID(fmt.Sprintf("n%d", i)), "", "A100", rapid.IntRange(1, 4).Draw(t, "gpus")))
		}
		// A quota of up to hi GPUs and, half the time, a limit up to 4 above it.
		quota := func(q *Queue, label string, hi int) {
			r := &q.Resources[ResourceGPU]
			r.Quota = int64(rapid.IntRange(0, hi).Draw(t, label)) * int64(OneGPU)
			if rapid.Bool().Draw(t, label+"Limited") {
				l := r.Quota + int64(rapid.IntRange(0, 4).Draw(t, label+"LimitExtra"))*int64(OneGPU)
				r.Limit = &l
			}
		}
		var leaves, depts []QueueID
		for d := rapid.IntRange(0, 2).Draw(t, "depts"); d > 0; d-- {
			dept := Queue{ID: QueueID(fmt.Sprintf("d%d", d))}
			quota(&dept, "deptQuota", 8)
			snap.Queues = append(snap.Queues, dept)
			depts = append(depts, dept.ID)
		}
		for i := rapid.IntRange(1, 4).Draw(t, "leaves"); i > 0; i-- {
			q := Queue{ID: QueueID(fmt.Sprintf("q%d", i))}
			if len(depts) > 0 && rapid.Bool().Draw(t, "inDept") {
				q.Parent = rapid.SampledFrom(depts).Draw(t, "dept")
			}
			quota(&q, "quota", 6)
			snap.Queues = append(snap.Queues, q)
			leaves = append(leaves, q.ID)
		}
		// Past usage tilts only what is above quota: the guarantee holds at any strength.
		eng := New(Options{UsageStrength: genHistory(t, snap, false)})
		for round, n := 0, rapid.IntRange(1, 3).Draw(t, "rounds"); round < n; round++ {
			// Work arrives in waves, so that early queues borrow what later ones are owed.
			for k := rapid.IntRange(1, 10).Draw(t, "arrivals"); k > 0; k-- {
				id := JobID(fmt.Sprintf("j%d-%d", round, k))
				gpus := rapid.SampledFrom([]int{1, 1, 2, 2, 3}).Draw(t, "jobGPUs")
				// Now and then inference, which runs within quota and never moves: what it
				// holds scatters the free GPUs.
				class := Class(0)
				if rapid.IntRange(0, 3).Draw(t, "inference") == 0 {
					class = ClassInference
				}
				snap.Jobs = append(snap.Jobs, Job{ID: id, Queue: rapid.SampledFrom(leaves).Draw(t, "queue"), MinMember: 1, Class: class,
					SubmitTime: snap.Now.Add(time.Duration(round) * time.Minute), Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUs: gpus}}}})
			}
			settle(t, eng, snap)
		}
		checkGuarantee(t, snap, eng.Schedule(snap))
	})
}

func checkGuarantee(t *rapid.T, snap *Snapshot, p *Plan) {
	queues := map[QueueID]*Queue{}
	for i := range snap.Queues {
		queues[snap.Queues[i].ID] = &snap.Queues[i]
	}
	alloc := func(id QueueID) int64 { return p.Queues[id].Allocated[ResourceGPU] }
	// A queue's quota as the engine guarantees it: min(quota, demand, limit), demand from
	// the leaves up.
	var demand func(id QueueID) int64
	demand = func(id QueueID) int64 {
		d, leaf := int64(0), true
		for _, c := range snap.Queues {
			if c.Parent == id {
				d, leaf = d+demand(c.ID), false
			}
		}
		if leaf {
			d = p.Queues[id].Requested[ResourceGPU]
		}
		if l := queues[id].Resources[ResourceGPU].Limit; l != nil {
			d = min(d, *l)
		}
		return d
	}
	quota := func(id QueueID) int64 { return min(queues[id].Resources[ResourceGPU].Quota, demand(id)) }
	chain := func(id QueueID) []QueueID {
		var out []QueueID
		for ; id != ""; id = queues[id].Parent {
			out = append(out, id)
		}
		return out
	}
	// What runs where: free GPUs per node, and the preemptible jobs that could make room.
	type held struct {
		job   JobID
		queue QueueID
		gpus  int64
	}
	free := map[NodeID]int64{}
	for _, n := range snap.Nodes {
		free[n.ID] = int64(len(n.GPUs)) * int64(OneGPU)
	}
	on := map[NodeID][]held{}
	for _, j := range snap.Jobs {
		for _, pod := range j.Pods {
			if b := pod.Binding; b != nil {
				g := int64(len(b.GPUs)) * int64(OneGPU)
				free[b.Node] -= g
				if j.IsPreemptible() {
					on[b.Node] = append(on[b.Node], held{j.ID, j.Queue, g})
				}
			}
		}
	}
	for _, w := range snap.Jobs {
		if countBound(w) > 0 || !w.IsPreemptible() {
			continue
		}
		q, k := w.Queue, int64(w.Pods[0].Request.GPUs)*int64(OneGPU)
		// A reclaim starts no job larger than both its queue's fair share and its quota.
		if alloc(q)+k > max(p.Queues[q].FairShare[ResourceGPU], quota(q)) {
			continue
		}
		mine := map[QueueID]bool{}
		for _, a := range chain(q) {
			mine[a] = true
		}
		for _, n := range snap.Nodes {
			var cands []held
			for _, h := range on[n.ID] {
				if h.queue != q {
					cands = append(cands, h)
				}
			}
			for mask := 0; mask < 1<<len(cands); mask++ {
				var victims []held
				sum := int64(0)
				for i, h := range cands {
					if mask&(1<<i) != 0 {
						victims = append(victims, h)
						sum += h.gpus
					}
				}
				if free[n.ID]+sum < k {
					continue
				}
				needed := true // every victim is needed: fewer would not do
				for _, h := range victims {
					needed = needed && free[n.ID]+sum-h.gpus < k
				}
				if !needed {
					continue
				}
				// The reclaimer's side: each queue gains k less what its own subtree loses.
				gain := map[QueueID]int64{}
				lost := map[QueueID]int64{}
				for _, a := range chain(q) {
					gain[a] = k
				}
				for _, h := range victims {
					for _, a := range chain(h.queue) {
						if mine[a] {
							gain[a] -= h.gpus
						} else {
							lost[a] += h.gpus
						}
					}
				}
				ok := true
				var top QueueID // the highest queue that gains
				for _, a := range chain(q) {
					if g := gain[a]; g > 0 {
						top = a
						l := queues[a].Resources[ResourceGPU].Limit
						ok = ok && (l == nil || alloc(a)+g <= *l)
					}
				}
				ok = ok && alloc(top)+gain[top] <= quota(top)
				for a, l := range lost {
					ok = ok && alloc(a)-l >= quota(a)
				}
				if ok {
					t.Fatalf("queue %s waits at %d/%d milli-GPUs of its quota with job %s (%d) while a reclaim by quota on %s could start it, taking %v\n%s",
						q, alloc(q), quota(q), w.ID, k, n.ID, victims, describeQueues(snap, p))
				}
			}
		}
	}
}

// describeQueues renders every queue's quota, fair share and allocation, and every job's
// place, for a failed property.
func describeQueues(snap *Snapshot, p *Plan) string {
	var b strings.Builder
	for _, q := range snap.Queues {
		st := p.Queues[q.ID]
		fmt.Fprintf(&b, "  queue %s (parent %q, quota %d, priority %d): fair %d, allocated %d, requested %d\n", q.ID, q.Parent,
			q.Resources[ResourceGPU].Quota, q.Priority, st.FairShare[ResourceGPU], st.Allocated[ResourceGPU], st.Requested[ResourceGPU])
	}
	for _, n := range snap.Nodes {
		fmt.Fprintf(&b, "  node %s: %d GPUs\n", n.ID, len(n.GPUs))
	}
	for _, j := range snap.Jobs {
		where := "waiting"
		if b := j.Pods[0].Binding; b != nil {
			where = fmt.Sprintf("on %s %v", b.Node, b.GPUs)
		}
		fmt.Fprintf(&b, "  job %s (queue %s, %d GPUs, preemptible %v): %s\n", j.ID, j.Queue, j.Pods[0].Request.GPUs, j.IsPreemptible(), where)
	}
	return b.String()
}
