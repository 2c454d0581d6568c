package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// shapeKey identifies jobs that fit or fail alike: same pods, same constraints.
func shapeKey(j *jobState, pods []*podState) string {
	var b strings.Builder
	b.WriteString(j.pool)
	b.WriteByte('|')
	if j.capacity != capacityAny {
		b.WriteByte(byte('0' + j.capacity))
		b.WriteByte('|')
	}
	if j.res != ResourceGPU {
		b.WriteString(j.j.Accelerator) // another kind's nodes are another cluster
		b.WriteByte('|')
	}
	b.WriteString(strings.Join(j.j.GPUTypes, ","))
	if choosesDevices(j.j) || j.j.SameIsland || j.j.NodePacking != PackingDefault || j.j.GPUPacking != PackingDefault {
		fmt.Fprintf(&b, "|%v|%v|%v|%v|%d|%d", j.j.ExcludeGPUTypes, j.j.GPUUUIDs, j.j.ExcludeGPUUUIDs, j.j.SameIsland, j.j.NodePacking, j.j.GPUPacking)
	}
	if f := j.filter; f != nil {
		// Jobs of one filter fit alike; a dynamic job's fit depends on its own pods.
		fmt.Fprintf(&b, "|f%d", f.ord)
		if f.f.Dynamic {
			b.WriteString("|" + string(j.j.ID))
		}
	}
	// Written by hand, not with fmt: keys are made for every waiting job of every cycle.
	var num []byte
	for _, p := range pods {
		r := p.p.Request
		if r.WantsMIG() {
			fmt.Fprintf(&b, "|mig:%s/%d/%d/%d", r.MIG, r.MIGShare, r.MIGMemory, r.MIGFrom)
		}
		for i, v := range [...]int64{int64(r.GPUs), int64(r.GPUFraction), r.GPUMemory, int64(r.GPUCompute), int64(r.Devices), r.CPU, r.Memory} {
			sep := byte('/')
			if i == 0 {
				sep = '|'
			}
			num = strconv.AppendInt(append(num[:0], sep), v, 10)
			b.Write(num)
		}
	}
	b.WriteString(topologyKey(j))
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// describeRequest renders one pod's GPU request: "2 GPUs", "0.5 of a GPU", "8Gi of GPU
// memory", "8Gi of GPU memory and 30% of its compute on each of 2 GPUs".
func describeRequest(r PodRequest) string {
	var what string
	switch {
	case r.GPUs > 0:
		return plural(r.GPUs, "GPU")
	case r.GPUFraction > 0 && r.GPUCompute > 0:
		what = r.GPUFraction.String() + " of a GPU with " + percent(r.GPUCompute) + " of its compute"
	case r.GPUFraction > 0:
		what = r.GPUFraction.String() + " of a GPU"
	case r.GPUMemory > 0 && r.GPUCompute > 0:
		what = Format(ResourceMemory, r.GPUMemory) + " of GPU memory and " + percent(r.GPUCompute) + " of its compute"
	case r.GPUMemory > 0:
		what = Format(ResourceMemory, r.GPUMemory) + " of GPU memory"
	case r.GPUCompute > 0:
		what = percent(r.GPUCompute) + " of a GPU's compute"
	case r.WantsMIG():
		return describeMIG(r)
	default:
		return Format(ResourceCPU, r.CPU) + " CPU"
	}
	if k := r.SharedDevices(); k > 1 {
		what += fmt.Sprintf(" on each of %d GPUs", k)
	}
	return what
}

// describe is describeRequest in the words of the job's kind of device: "2 ascend
// devices" for whole devices of another vendor.
func (s *session) describe(j *jobState, r PodRequest) string {
	if r.GPUs > 0 {
		return plural(r.GPUs, s.deviceWord(j))
	}
	return describeRequest(r)
}

// deviceWord is what one of the job's devices is called: "GPU", or "ascend device".
func (s *session) deviceWord(j *jobState) string {
	if j.res.NVIDIA() {
		return "GPU"
	}
	return s.resName(j.res) + " device"
}

// percent writes thousandths as a percentage: "30%", "12.5%".
func percent(m MilliGPU) string {
	return strconv.FormatFloat(float64(m)/10, 'f', -1, 64) + "%"
}

// explainNoFit says why the pods cannot be placed now, naming the constraint that binds
// and the best the cluster offers, so that the user knows what to change or wait for.
func (s *session) explainNoFit(j *jobState, pods []*podState) Reason {
	var eligible []*nodeState
	for _, n := range s.nodes {
		if s.eligible(j, n) {
			eligible = append(eligible, n)
		}
	}
	if len(eligible) == 0 {
		return s.explainConstraint(j)
	}
	r0 := s.explainResources(j, pods, eligible)
	if note := s.spotNote(j); note != "" {
		r0.Message += " (" + note + ")"
	}
	if note := failedNote(eligible); note != "" {
		r0.Message += "; " + note
	}
	if f := j.filter; f != nil && f.f.Excluded != "" {
		r0.Message += fmt.Sprintf("; %d/%d nodes are ruled out by the pod's constraints: %s",
			len(s.nodes)-len(eligible), len(s.nodes), f.f.Excluded)
	}
	return r0
}

// ruleReason asks the placement rules why a dynamic job's first waiting pod fits none of
// the nodes that have room for it by GPUs, CPU and memory.
func (s *session) ruleReason(j *jobState, pods []*podState, eligible []*nodeState) string {
	if j.filter == nil || !j.filter.f.Dynamic || s.rules == nil {
		return ""
	}
	p := pods[0]
	var ids []NodeID
	for _, n := range eligible {
		if len(s.options(j, p.p.Request, n, nil)) > 0 {
			ids = append(ids, n.n.ID)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return s.rules.Why(p.p.ID, ids)
}

// explainResources names the GPU, CPU or memory shortage among the eligible nodes.
func (s *session) explainResources(j *jobState, pods []*podState, eligible []*nodeState) Reason {
	r := pods[0].p.Request
	// Static limits: the job cannot run here even on an empty cluster.
	var capGPU MilliGPU
	maxGPUs := 0
	var maxCPU, maxMem, maxDev int64
	for _, n := range eligible {
		capGPU += MilliGPU(len(n.n.GPUs)) * OneGPU
		maxGPUs = max(maxGPUs, len(n.n.GPUs))
		maxCPU, maxMem = max(maxCPU, n.n.CPU), max(maxMem, n.n.Memory)
		for _, g := range n.n.GPUs {
			maxDev = max(maxDev, g.Memory)
		}
	}
	total := s.need(pods)[j.res]
	switch {
	case r.GPUs > maxGPUs:
		return reasonf(ReasonTooLarge, "needs %s on one node; the largest node it may use has %d", plural(r.GPUs, s.deviceWord(j)), maxGPUs)
	case r.GPUMemory > maxDev:
		return reasonf(ReasonTooLarge, "needs %s of memory on one GPU; the largest GPU it may use has %s",
			Format(ResourceMemory, r.GPUMemory), Format(ResourceMemory, maxDev))
	case r.CPU > maxCPU:
		return reasonf(ReasonTooLarge, "needs %s CPU on one node; the largest node it may use has %s", Format(ResourceCPU, r.CPU), Format(ResourceCPU, maxCPU))
	case r.Memory > maxMem:
		return reasonf(ReasonTooLarge, "needs %s memory on one node; the largest node it may use has %s", Format(ResourceMemory, r.Memory), Format(ResourceMemory, maxMem))
	case MilliGPU(total) > capGPU:
		return reasonf(ReasonTooLarge, "needs %s GPUs in all; the nodes it may use have %s", MilliGPU(total), capGPU)
	}
	if r, ok := s.topologyReason(j, pods, eligible); ok {
		return r
	}
	block := s.ruleReason(j, pods, eligible)
	if block == "" {
		block = s.largestBlock(j, r, eligible)
	}
	if len(pods) > 1 {
		fit := s.countFit(j, pods)
		return reasonf(ReasonGangPartial, "gang of %d pods × %s must start together; only %d fit now (%s)",
			len(pods), s.describe(j, r), fit, block)
	}
	return reasonf(ReasonNoFit, "needs %s %s; %s", s.describe(j, r), onWhat(r), block)
}

// onWhat is where a request must fit: a slice on one GPU (each of several on one node),
// anything else on one node.
func onWhat(r PodRequest) string {
	switch {
	case r.WantsMIG():
		return "on one node"
	case !r.Shared():
		return "on one node"
	case r.SharedDevices() > 1:
		return "of one node"
	}
	return "on one GPU"
}

// largestBlock describes the most the cluster has free for this kind of request.
func (s *session) largestBlock(j *jobState, r PodRequest, nodes []*nodeState) string {
	var best *nodeState
	switch {
	case r.GPUs > 0:
		bestFree, gpuOK := -1, 0
		for _, n := range nodes {
			// With one island required, a block is what one island has free.
			var perIsland [64]int
			free := 0
			for g := range n.n.GPUs {
				if n.gpuUsed[g] == 0 && j.deviceOK(&n.n.GPUs[g]) {
					isl := 0
					if j.j.SameIsland {
						isl = islandOf(n, g)
					}
					perIsland[isl]++
					free = max(free, perIsland[isl])
				}
			}
			if free >= r.GPUs {
				gpuOK++
			}
			if free > bestFree {
				best, bestFree = n, free
			}
		}
		if gpuOK > 0 {
			return s.hostShortage(r, nodes, func(n *nodeState) bool {
				_, ok := s.pickWhole(j, r.GPUs, n, n.gpuUsed)
				return ok
			})
		}
		if bestFree == 0 {
			return "no " + s.deviceWord(j) + " is wholly free" + migOnlyNote(nodes)
		}
		if j.j.SameIsland {
			return fmt.Sprintf("its GPUs must share one island (allot.dev/gpu-island: required), and the largest free block on one island is %s on %s",
				plural(bestFree, s.deviceWord(j)), best.n.ID)
		}
		return fmt.Sprintf("largest free block is %s on %s", plural(bestFree, s.deviceWord(j)), best.n.ID)
	case r.Shared():
		if why := s.sliceShortage(j, r, nodes); why != "" {
			return why
		}
		return s.hostShortage(r, nodes, func(n *nodeState) bool {
			_, _, ok := s.pickGPUs(j, r, n, n.gpuUsed, n.books)
			return ok
		})
	case r.WantsMIG():
		for _, n := range nodes {
			if _, _, ok := s.pickMIG(j, r, n, n.books); ok {
				return s.hostShortage(r, nodes, func(n *nodeState) bool {
					_, _, ok := s.pickMIG(j, r, n, n.books)
					return ok
				})
			}
		}
		return s.migShortage(j, r, nodes)
	}
	return s.hostShortage(r, nodes, func(*nodeState) bool { return true })
}

// hostShortage explains a pod whose GPUs are available but whose CPU or memory is not.
func (s *session) hostShortage(r PodRequest, nodes []*nodeState, gpuFits func(*nodeState) bool) string {
	var cpuBest, memBest *nodeState
	for _, n := range nodes {
		if !gpuFits(n) {
			continue
		}
		if cpuBest == nil || n.n.CPU-n.cpuUsed > cpuBest.n.CPU-cpuBest.cpuUsed {
			cpuBest = n
		}
		if memBest == nil || n.n.Memory-n.memUsed > memBest.n.Memory-memBest.memUsed {
			memBest = n
		}
	}
	if cpuBest == nil {
		return "no node has room"
	}
	where := "nodes with free GPUs"
	if r.GPUs == 0 && !r.Shared() {
		where = "the nodes it may use" // a CPU-only pod: free GPUs are beside the point
	}
	if free := cpuBest.n.CPU - cpuBest.cpuUsed; free < r.CPU {
		return fmt.Sprintf("%s lack CPU: needs %s, most free is %s on %s",
			where, Format(ResourceCPU, r.CPU), Format(ResourceCPU, free), cpuBest.n.ID)
	}
	if free := memBest.n.Memory - memBest.memUsed; free < r.Memory {
		return fmt.Sprintf("%s lack memory: needs %s, most free is %s on %s",
			where, Format(ResourceMemory, r.Memory), Format(ResourceMemory, free), memBest.n.ID)
	}
	return "free capacity is scattered across nodes"
}

// countFit is how many of the pods could be placed now, one by one.
func (s *session) countFit(j *jobState, pods []*podState) int {
	cp := s.checkpoint()
	n := 0
	for _, p := range pods {
		if !s.placeOne(p, nil) {
			break
		}
		n++
	}
	s.rollback(cp)
	return n
}

// failedNote names the failed devices of the nodes a job may use, which the figures in
// its reason leave out: a person wondering why a node with eight GPUs has seven free.
func failedNote(nodes []*nodeState) string {
	var first []string
	count := 0
	for _, n := range nodes {
		for g := range n.n.GPUs {
			if why := n.n.GPUs[g].Unhealthy; why != "" {
				if count++; len(first) < 2 {
					first = append(first, fmt.Sprintf("%s GPU %d: %s", n.n.ID, g, why))
				}
			}
		}
	}
	if count == 0 {
		return ""
	}
	more := ""
	if count > len(first) {
		more = fmt.Sprintf(" and %d more", count-len(first))
	}
	return fmt.Sprintf("%s failed, not counted (%s%s)", plural(count, "GPU"), strings.Join(first, "; "), more)
}

// explainConstraint names the pool, node constraint or GPU model that no schedulable
// node offers.
func (s *session) explainConstraint(j *jobState) Reason {
	inPool, unenforced, noFractions, otherKind, spot := 0, 0, 0, 0, 0
	fractionsWhy := ""
	models := map[string]bool{}
	for _, n := range s.nodes {
		if n.n.Unschedulable || n.n.Pool != j.pool {
			continue
		}
		if j.filter != nil && !j.filter.allowed[n.idx] {
			continue
		}
		if j.asksGPU && n.res != j.res {
			otherKind++ // its devices are of another kind: not a question of pool or model
			continue
		}
		if j.spotBars(n) {
			spot++
			continue
		}
		if j.memCap && n.n.Sharing == SharingNone {
			unenforced++
			continue
		}
		if j.shares && (n.n.NoFractions != "" || n.n.Unenforced != "") {
			noFractions++
			fractionsWhy = cmp.Or(n.n.NoFractions, n.n.Unenforced)
			continue
		}
		inPool++
		for _, g := range n.n.GPUs {
			models[g.Model] = true
		}
	}
	pool := j.pool
	if pool == "" {
		pool = "default"
	}
	if inPool == 0 && otherKind > 0 && noFractions == 0 && unenforced == 0 {
		kind := "NVIDIA GPUs"
		if !j.res.NVIDIA() {
			kind = s.deviceWord(j) + "s"
		}
		return reasonf(ReasonConstraint, "needs %s, and none of the %s it may use has them (their devices are of another kind)",
			kind, plural(otherKind, "node"))
	}
	if inPool == 0 && spot > 0 {
		return s.spotReason(j, spot)
	}
	if inPool == 0 && noFractions > 0 {
		return reasonf(ReasonConstraint, "shares a GPU, and the %s it may use cannot hand a fraction its device: %s",
			plural(noFractions, "node"), fractionsWhy)
	}
	if inPool == 0 && unenforced > 0 {
		return reasonf(ReasonConstraint, "asks for a hard GPU memory cap (allot.dev/gpu-memory), and the %s it may use cannot enforce one (allot.dev/gpu-sharing=none): ask for allot.dev/gpu-fraction instead, or use nodes sharing with mps or hami-core",
			plural(unenforced, "node"))
	}
	if inPool == 0 {
		if f := j.filter; f != nil && f.f.Excluded != "" {
			msg := fmt.Sprintf("0/%d nodes are available: %s", len(s.nodes), f.f.Excluded)
			if allowed := len(f.f.Allowed); allowed > 0 {
				msg += fmt.Sprintf("; the nodes it may use (%d) are outside node pool %q or not schedulable", allowed, pool)
			}
			return reasonf(ReasonConstraint, "%s", msg)
		}
		if j.pool == "" {
			return reasonf(ReasonConstraint, "%s", NoPoolRule(s.poolNames()))
		}
		return reasonf(ReasonConstraint, "no schedulable node in node pool %q", pool)
	}
	have := make([]string, 0, len(models))
	for m := range models {
		have = append(have, m)
	}
	slices.Sort(have)
	return reasonf(ReasonConstraint, "no node in pool %q has GPU type %s; models there: %s",
		pool, strings.Join(j.j.GPUTypes, " or "), strings.Join(have, ", "))
}

// pendingReason is the final word on a job that still waits after this cycle.
func (s *session) pendingReason(j *jobState) Reason {
	if !j.started() && len(j.pods) < j.j.MinMember {
		return reasonf(ReasonGangIncomplete, "gang of %d pods has %d so far; it starts when all are created", j.j.MinMember, len(j.pods))
	}
	r := j.reason
	if r.Code == ReasonNone {
		for _, p := range j.pods {
			if p.node == nil && p.evictReason.Code != ReasonNone {
				r = Reason{Code: p.evictReason.Code, Message: "evicted: " + p.evictReason.Message}
				break
			}
		}
	}
	if r.Code == ReasonNone {
		r = reasonf(ReasonNotTried, "waiting for the next scheduling cycle")
	}
	if len(j.shielded) > 0 {
		r.Message += "; " + s.shieldNote(j)
	}
	if j.started() {
		return Reason{Code: ReasonElasticWaiting, Message: fmt.Sprintf("running %d of %d pods (at least %d); grows when GPUs free up: %s",
			j.bound, len(j.pods), j.j.MinMember, r.Message)}
	}
	return r
}

// shieldNote names the jobs a reclaim or preemption for j passed over because they had not
// run their queue's minimum runtime, the first of them with the time it may be taken.
func (s *session) shieldNote(j *jobState) string {
	first := j.shielded[0]
	for _, x := range j.shielded {
		if x.until.Before(first.until) {
			first = x
		}
	}
	what := map[int]string{protectReclaim: "reclaim", protectPreempt: "preemption"}[first.action]
	more := ""
	if n := len(j.shielded) - 1; n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("%s%s protected from %s by a minimum runtime, the first until %s (in %s)",
		first.job, more, what, first.until.UTC().Format(time.RFC3339), first.until.Sub(s.now).Round(time.Second))
}

// CountedReasons renders per-node reasons the way kube-scheduler's FitError does, the
// form people know: "1 node(s) had untolerated taint(s), 2 node(s) didn't match ...".
func CountedReasons(why map[string]int) string {
	parts := make([]string, 0, len(why))
	for r, c := range why {
		parts = append(parts, fmt.Sprintf("%d %s", c, r))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// NoPoolRule states where a job without a node pool may run, for a cluster whose
// schedulable nodes are all in the pools named.
func NoPoolRule(pools []string) string {
	return "jobs without a node pool run only on nodes without the allot.dev/node-pool label; pools here: " + strings.Join(pools, ", ")
}

// poolNames lists the pools of the schedulable nodes, sorted.
func (s *session) poolNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range s.nodes {
		if !n.n.Unschedulable && n.n.Pool != "" && !seen[n.n.Pool] {
			seen[n.n.Pool] = true
			out = append(out, n.n.Pool)
		}
	}
	slices.Sort(out)
	return out
}

// sliceShortage names what keeps a shared request off every device it may use, in the
// request's own units: the most memory free on one GPU (for memory requests), the most
// compute free where its memory fits, the cap on sharers, or too few devices with room
// on one node. Empty when some node's devices have room (the shortage is elsewhere).
func (s *session) sliceShortage(j *jobState, r PodRequest, nodes []*nodeState) string {
	type at struct {
		n *nodeState
		g int
	}
	var memAt, cpuAt, shareAt at
	var fitOn *nodeState
	var mostMem int64 = -1
	var mostCPU, mostShare MilliGPU = -1, -1
	mostOnNode, capped := 0, 0
	for _, n := range nodes {
		fit := 0
		for g := range n.n.GPUs {
			dev, b := &n.n.GPUs[g], n.books[g]
			if !j.deviceOK(dev) || dev.OutOfService() != "" || dev.MIG != nil {
				continue
			}
			if free := dev.Memory - b.mem - b.burst; free > mostMem {
				mostMem, memAt = free, at{n, g}
			}
			if free := OneGPU - usedOf(dev, b); free > mostShare {
				mostShare, shareAt = free, at{n, g}
			}
			p, ok := partOn(r, dev)
			if !ok || b.mem+b.burst+p.mem > dev.Memory {
				continue
			}
			if free := OneGPU - b.compute; free > mostCPU {
				mostCPU, cpuAt = free, at{n, g}
			}
			if b.compute+p.compute > OneGPU {
				continue
			}
			if !fitsPart(n, g, p, n.books) {
				capped++
				continue
			}
			fit++
		}
		if fit > mostOnNode {
			mostOnNode, fitOn = fit, n
		}
	}
	k := r.SharedDevices()
	switch {
	case mostOnNode >= k:
		return ""
	case mostOnNode > 0:
		return fmt.Sprintf("the most GPUs with room for its slice on one node is %d (%s)", mostOnNode, fitOn.n.ID)
	case capped > 0:
		return fmt.Sprintf("every GPU with room for it is shared by as many pods as its node allows (allot.dev/gpu-max-sharers: %d)", nodesCap(nodes))
	case r.GPUFraction > 0 && r.GPUCompute == 0 && shareAt.n != nil:
		// A fraction is a share of memory and compute alike: say what is free as one.
		return fmt.Sprintf("the most free on one GPU is %s (%s GPU %d)", max(mostShare, 0), shareAt.n.n.ID, shareAt.g)
	case mostCPU >= 0:
		return fmt.Sprintf("the most compute free on one GPU with room for its memory is %s (%s GPU %d)", percent(mostCPU), cpuAt.n.n.ID, cpuAt.g)
	case memAt.n != nil:
		return fmt.Sprintf("the most GPU memory free on one GPU is %s (%s GPU %d)", Format(ResourceMemory, mostMem), memAt.n.n.ID, memAt.g)
	}
	return "no GPU it may use is in service"
}

// nodesCap is the cap on sharers of the first of the nodes that has one.
func nodesCap(nodes []*nodeState) int {
	for _, n := range nodes {
		if n.n.MaxSharers > 0 {
			return n.n.MaxSharers
		}
	}
	return 0
}
