package sim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allot-dev/allot/engine"
)

// Defaults for node fields a scenario leaves out.
const (
	defaultGPUType   = "GPU"
	defaultGPUMemory = "80Gi"
	defaultCPU       = "64"
	defaultMemory    = "512Gi"
)

// Bounds that keep a typo (count: 1000000000) from exhausting memory.
const (
	maxNodes       = 100000
	maxGPUsPerNode = 64
	maxPods        = 100000
)

// compiled is a validated scenario in the engine's terms.
type compiled struct {
	placement  engine.Placement
	gpuPacking engine.Packing
	// levels are the topology's node labels, widest first, and names what they are called.
	levels, levelNames []string
	// strength and halfLife are the history settings; usage the queues' GPU-seconds at
	// the start. halfLife is 0 without history.
	strength float64
	halfLife time.Duration
	usage    map[engine.QueueID]float64
	nodes    []engine.Node
	queues   []engine.Queue
	steps    []step
	// simNodes are the nodes as the node rules see them; filters holds one NodeFilter per
	// distinct set of constraints; meta what the anti-affinity rules need of each job.
	simNodes []simNode
	filters  map[string]*engine.NodeFilter
	meta     map[engine.JobID]jobMeta
	// anyAnti: some job has anti-affinity, so every job's placements are checked.
	anyAnti bool
	// dra is nil without DRA nodes.
	dra *draCluster
}

type step struct {
	name    string
	deletes []engine.JobID
	fails   []engine.PodID
	// interrupts are spot nodes taken back, before the step's fails.
	interrupts []engine.NodeID
	submits    []submission
	advance    time.Duration
	expect     *Expect
	path       string
	// uses are the GPU memory readings the step sets on running pods.
	uses map[engine.PodID]int64
}

type submission struct {
	job      engine.Job
	duration time.Duration
}

func (sc *Scenario) validate() error {
	c, err := sc.compile()
	if err != nil {
		return err
	}
	sc.model = c
	return nil
}

func (sc *Scenario) compile() (*compiled, error) {
	c := &compiled{}
	// Every problem of the file is reported at once, each with its line: one bad entry
	// (a node, a queue, a job, a step's field) is left out and the rest still checked.
	var errs Problems
	var err error
	if c.placement, err = engine.ParsePlacement(sc.Placement); err != nil {
		errs = append(errs, sc.errorf("placement", "%v", err))
	}
	if c.gpuPacking, err = engine.ParsePacking(sc.GPUPolicy); err != nil {
		errs = append(errs, sc.errorf("gpuPolicy", "%v", err))
	}
	errs = errs.add(sc.compileNodes(c))
	errs = errs.add(sc.compileQueues(c))
	errs = errs.add(sc.compileHistory(c))
	errs = errs.add(sc.compileTopology(c))
	if len(sc.Steps) == 0 {
		errs = append(errs, sc.errorf("steps", "a scenario needs at least one step (submit, delete or advance)"))
	}
	c.filters, c.meta = map[string]*engine.NodeFilter{}, map[engine.JobID]jobMeta{}
	for _, st := range sc.Steps {
		for _, js := range st.Submit {
			c.anyAnti = c.anyAnti || len(js.AntiAffinity) > 0
		}
	}
	live := map[string]bool{}
	for i, st := range sc.Steps {
		path := fmt.Sprintf("steps[%d]", i)
		s := step{name: st.Name, path: path, expect: st.Expect}
		if s.name == "" {
			s.name = strconv.Itoa(i + 1)
		}
		if len(st.Submit) == 0 && len(st.Delete) == 0 && len(st.Fail) == 0 && st.Advance == "" && len(st.Use) == 0 && len(st.Interrupt) == 0 {
			errs = append(errs, sc.errorf(path, "a step needs submit, delete, fail, interrupt, use or advance"))
		}
		for k, name := range st.Interrupt {
			found := false
			for _, n := range c.nodes {
				if string(n.ID) == name {
					found = true
					if !n.Spot {
						errs = append(errs, sc.errorf(fmt.Sprintf("%s.interrupt[%d]", path, k), "node %q is not spot capacity (spot: true): only a cloud's spot nodes are interrupted", name))
					}
				}
			}
			if !found {
				errs = append(errs, sc.errorf(fmt.Sprintf("%s.interrupt[%d]", path, k), "no node %q", name))
				continue
			}
			s.interrupts = append(s.interrupts, engine.NodeID(name))
		}
		for _, pod := range slices.Sorted(maps.Keys(st.Use)) {
			i := strings.LastIndex(pod, "-")
			n, err := strconv.Atoi(pod[i+1:])
			field := path + ".use." + pod
			if i <= 0 || err != nil || n < 0 || !live[pod[:i]] {
				errs = append(errs, sc.errorf(field, "%q is not a pod of a job submitted before this step: name it job-index, such as burst-0", pod))
				continue
			}
			v, err := sc.quantity(field, st.Use[pod], "", false)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if s.uses == nil {
				s.uses = map[engine.PodID]int64{}
			}
			s.uses[engine.PodID(pod)] = v
		}
		for k, pod := range st.Fail {
			i := strings.LastIndex(pod, "-")
			n, err := strconv.Atoi(pod[i+1:])
			if i <= 0 || err != nil || n < 0 || !live[pod[:i]] {
				errs = append(errs, sc.errorf(fmt.Sprintf("%s.fail[%d]", path, k), "%q is not a pod of a job submitted before this step: name it job-index, such as ddp-1", pod))
				continue
			}
			s.fails = append(s.fails, engine.PodID(pod))
		}
		for k, name := range st.Delete {
			if !live[name] {
				errs = append(errs, sc.errorf(fmt.Sprintf("%s.delete[%d]", path, k), "job %q was not submitted before this step", name))
				continue
			}
			delete(live, name)
			s.deletes = append(s.deletes, engine.JobID(name))
		}
		for k, js := range st.Submit {
			jp := fmt.Sprintf("%s.submit[%d]", path, k)
			sub, err := sc.compileJob(c, js, jp)
			switch {
			case err != nil:
				errs = append(errs, err)
			case live[js.Name]:
				errs = append(errs, sc.errorf(jp+".name", "job %q already exists; job names are unique", js.Name))
			}
			// Known from here on even when bad, so that its deletes are not reported too.
			live[js.Name] = true
			if err != nil {
				continue
			}
			s.submits = append(s.submits, sub)
		}
		if st.Advance != "" {
			d, err := time.ParseDuration(st.Advance)
			if err != nil || d < 0 {
				errs = append(errs, sc.errorf(path+".advance", "%q is not a duration: use a non-negative Go duration such as 30s, 10m, 2h", st.Advance))
			}
			s.advance = max(d, 0)
		}
		errs = errs.add(sc.checkExpect(st.Expect, path+".expect", live))
		c.steps = append(c.steps, s)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

func (sc *Scenario) compileNodes(c *compiled) error {
	if len(sc.Cluster.Nodes) == 0 {
		return sc.errorf("cluster.nodes", "the cluster needs at least one node")
	}
	seen := map[string]bool{}
	var errs Problems
	for i, ns := range sc.Cluster.Nodes {
		if err := sc.compileNode(c, i, ns, seen); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = errs.add(sc.compileDRA(c))
	}
	return errs.orNil()
}

// compileNode adds the nodes of one entry of cluster.nodes.
func (sc *Scenario) compileNode(c *compiled, i int, ns NodeSpec, seen map[string]bool) error {
	path := fmt.Sprintf("cluster.nodes[%d]", i)
	var names []string
	switch {
	case ns.Name != "" && ns.NamePrefix != "":
		return sc.errorf(path, "set name or namePrefix with count, not both")
	case ns.Name != "":
		if ns.Count > 1 {
			return sc.errorf(path+".count", "count needs namePrefix instead of name")
		}
		names = []string{ns.Name}
	case ns.NamePrefix != "":
		if ns.Count < 1 {
			return sc.errorf(path+".count", "count must be at least 1 with namePrefix, got %d", ns.Count)
		}
		for k := 1; k <= ns.Count; k++ {
			names = append(names, fmt.Sprintf("%s-%d", ns.NamePrefix, k))
		}
	default:
		return sc.errorf(path, "a node needs name, or namePrefix with count")
	}
	if ns.GPUs < 0 || ns.GPUs > maxGPUsPerNode {
		return sc.errorf(path+".gpus", "%d is not allowed: GPUs per node are between 0 and %d", ns.GPUs, maxGPUsPerNode)
	}
	if ns.Count > maxNodes {
		return sc.errorf(path+".count", "%d is not allowed: a scenario has at most %d nodes", ns.Count, maxNodes)
	}
	gpuMem, err := sc.quantity(path+".gpuMemory", ns.GPUMemory, defaultGPUMemory, false)
	if err != nil {
		return err
	}
	cpu, err := sc.quantity(path+".cpu", ns.CPU, defaultCPU, true)
	if err != nil {
		return err
	}
	mem, err := sc.quantity(path+".memory", ns.Memory, defaultMemory, false)
	if err != nil {
		return err
	}
	islands := max(ns.Islands, 1)
	if ns.Islands < 0 || (ns.GPUs > 0 && islands > ns.GPUs) {
		return sc.errorf(path+".islands", "%d is not allowed: islands must be between 1 and the node's GPU count", ns.Islands)
	}
	model := ns.GPUType
	if model == "" {
		model = defaultGPUType
	}
	taints, err := sc.compileTaints(path, ns.Taints)
	if err != nil {
		return err
	}
	for _, name := range names {
		if seen[name] {
			return sc.errorf(path, "node %q is defined twice", name)
		}
		seen[name] = true
		lbls := labels.Set{hostnameLabel: name}
		maps.Copy(lbls, ns.Labels)
		c.simNodes = append(c.simNodes, simNode{id: engine.NodeID(name), labels: lbls, taints: taints})
		n := engine.Node{ID: engine.NodeID(name), Labels: lbls, Pool: ns.Labels[PoolLabel], Domain: ns.Labels[DomainLabel],
			CPU: cpu, Memory: mem, Unschedulable: ns.Unschedulable, Accelerator: ns.Accelerator, Spot: ns.Spot}
		for g := 0; g < ns.GPUs; g++ {
			n.GPUs = append(n.GPUs, engine.GPU{Model: model, Memory: gpuMem,
				UUID: fmt.Sprintf("GPU-sim-%s-%d", name, g), Island: g * islands / ns.GPUs})
		}
		if err := sc.compileDevices(&n, ns, path); err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}
	return nil
}

// Node labels the simulator reads, as the Kubernetes adapter will.
const (
	PoolLabel   = "allot.dev/node-pool"
	DomainLabel = "allot.dev/topology-domain"
)

// quantity parses a Kubernetes quantity; CPU is returned in millicores, the rest in units.
func (sc *Scenario) quantity(path, s, def string, milli bool) (int64, error) {
	if s == "" {
		s = def
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() < 0 {
		return 0, sc.errorf(path, "%q is not a quantity: use a non-negative Kubernetes quantity such as 8, 500m, 16Gi", s)
	}
	if milli {
		return q.MilliValue(), nil
	}
	return q.Value(), nil
}

func (sc *Scenario) compileQueues(c *compiled) error {
	if len(sc.Queues) == 0 {
		return sc.errorf("queues", "the scenario needs at least one queue")
	}
	byName := map[string]int{}
	var errs Problems
	for i, qs := range sc.Queues {
		if err := sc.compileQueue(c, i, qs, byName); err != nil {
			errs = append(errs, err)
		}
	}
	for i, qs := range sc.Queues {
		if qs.Parent == "" {
			continue
		}
		if _, ok := byName[qs.Parent]; !ok {
			errs = append(errs, sc.errorf(fmt.Sprintf("queues[%d].parent", i), "unknown queue %q; queues: %s", qs.Parent, strings.Join(queueNames(sc.Queues), ", ")))
			continue
		}
		// Walk up; coming back here means the parents form a cycle.
		seen := map[string]bool{qs.Name: true}
		for p := qs.Parent; p != ""; p = sc.Queues[byName[p]].Parent {
			if _, ok := byName[p]; !ok {
				break // an unknown parent higher up: reported on its own queue
			}
			if seen[p] {
				errs = append(errs, sc.errorf(fmt.Sprintf("queues[%d].parent", i), "queue %q is its own ancestor; parents must form a tree", qs.Name))
				break
			}
			seen[p] = true
		}
	}
	return errs.orNil()
}

// compileHistory reads fairShareHistory and the queues' starting usage.
func (sc *Scenario) compileHistory(c *compiled) error {
	var errs Problems
	c.usage = map[engine.QueueID]float64{}
	for i, qs := range sc.Queues {
		if qs.Usage == nil {
			continue
		}
		if *qs.Usage < 0 {
			errs = append(errs, sc.errorf(fmt.Sprintf("queues[%d].usage", i), "%v is not allowed: usage is GPU-hours above quota, 0 or more", *qs.Usage))
			continue
		}
		if sc.History == nil {
			errs = append(errs, sc.errorf(fmt.Sprintf("queues[%d].usage", i), "usage counts only with fairShareHistory set (strength and halfLife)"))
			continue
		}
		c.usage[engine.QueueID(qs.Name)] = *qs.Usage * 3600
	}
	h := sc.History
	if h == nil {
		return errs.orNil()
	}
	c.halfLife = engine.DefaultUsageHalfLife
	if h.HalfLife != "" {
		d, err := time.ParseDuration(h.HalfLife)
		if err != nil || d <= 0 {
			errs = append(errs, sc.errorf("fairShareHistory.halfLife", "%q is not allowed: use a positive Go duration such as 24h or 168h", h.HalfLife))
		}
		c.halfLife = d
	}
	switch {
	case h.Strength == nil:
		errs = append(errs, sc.errorf("fairShareHistory.strength", "a number 0 or more is required: 0 ignores history, 1 lets a queue that alone used everything get none of the idle GPUs while others want them"))
	case engine.CheckUsageStrength(*h.Strength) != nil:
		errs = append(errs, sc.errorf("fairShareHistory.strength", "%v", engine.CheckUsageStrength(*h.Strength)))
	default:
		c.strength = *h.Strength
	}
	return errs.orNil()
}

// compileQueue adds one entry of queues.
func (sc *Scenario) compileQueue(c *compiled, i int, qs QueueSpec, byName map[string]int) error {
	path := fmt.Sprintf("queues[%d]", i)
	if qs.Name == "" {
		return sc.errorf(path, "a queue needs a name")
	}
	if _, dup := byName[qs.Name]; dup {
		return sc.errorf(path+".name", "queue %q is defined twice", qs.Name)
	}
	byName[qs.Name] = i
	q := engine.Queue{ID: engine.QueueID(qs.Name), Parent: engine.QueueID(qs.Parent), Priority: qs.Priority}
	gpu := &q.Resources[engine.ResourceGPU]
	if qs.Quota != nil {
		if *qs.Quota < 0 {
			return sc.errorf(path+".quota", "%v is not allowed: quota is a number of GPUs, 0 or more", *qs.Quota)
		}
		gpu.Quota = milliGPU(*qs.Quota)
	}
	if w := qs.OverQuotaWeight; w != nil {
		if *w < 0 {
			return sc.errorf(path+".overQuotaWeight", "%v is not allowed: the weight must be 0 or more", *w)
		}
		gpu.OverQuotaWeight = w
	}
	if l := qs.Limit; l != nil {
		if *l < 0 || milliGPU(*l) < gpu.Quota {
			return sc.errorf(path+".limit", "%v is not allowed: the limit must be at least the quota (%v GPUs)", *l, float64(gpu.Quota)/1000)
		}
		v := milliGPU(*l)
		gpu.Limit = &v
	}
	if err := sc.compileQueueKinds(c, &q, qs, path); err != nil {
		return err
	}
	if err := sc.compileQueuePools(c, &q, qs, path); err != nil {
		return err
	}
	switch engine.BurstPolicy(qs.BurstPolicy) {
	case engine.BurstEvict, engine.BurstWait:
		q.BurstPolicy = engine.BurstPolicy(qs.BurstPolicy)
	case "evict":
	default:
		return sc.errorf(path+".burstPolicy", "%q is not allowed: evict (the default) or wait", qs.BurstPolicy)
	}
	for r, spec := range map[engine.Resource]*ResSpec{engine.ResourceCPU: qs.CPU, engine.ResourceMemory: qs.Memory} {
		if spec == nil {
			continue
		}
		field := map[engine.Resource]string{engine.ResourceCPU: "cpu", engine.ResourceMemory: "memory"}[r]
		rq := &q.Resources[r]
		var err error
		if rq.Quota, err = sc.quantity(path+"."+field+".quota", spec.Quota, "0", r == engine.ResourceCPU); err != nil {
			return err
		}
		if spec.Limit != "" {
			l, err := sc.quantity(path+"."+field+".limit", spec.Limit, "", r == engine.ResourceCPU)
			if err != nil {
				return err
			}
			rq.Limit = &l
		}
		rq.OverQuotaWeight = spec.OverQuotaWeight
	}
	for field, v := range map[string]string{"reclaimMinRuntime": qs.ReclaimMinRuntime, "preemptMinRuntime": qs.PreemptMinRuntime} {
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return sc.errorf(path+"."+field, "%q is not a duration: use a Go duration such as 10m or 1h30m", v)
		}
		if field == "reclaimMinRuntime" {
			q.ReclaimMinRuntime = &d
		} else {
			q.PreemptMinRuntime = &d
		}
	}
	if qs.InteractiveTimeLimit != "" {
		d, err := time.ParseDuration(qs.InteractiveTimeLimit)
		if err != nil || d <= 0 {
			return sc.errorf(path+".interactiveTimeLimit", "%q is not a duration: use a positive Go duration such as 30m or 4h", qs.InteractiveTimeLimit)
		}
		q.InteractiveTimeLimit = d
	}
	c.queues = append(c.queues, q)
	return nil
}

func milliGPU(v float64) int64 { return int64(math.Round(v * 1000)) }

func queueNames(qs []QueueSpec) []string {
	var out []string
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out
}

func (sc *Scenario) leafQueues() []string {
	parents := map[string]bool{}
	for _, q := range sc.Queues {
		parents[q.Parent] = true
	}
	var out []string
	for _, q := range sc.Queues {
		if !parents[q.Name] {
			out = append(out, q.Name)
		}
	}
	return out
}

func (sc *Scenario) compileJob(c *compiled, js JobSpec, path string) (submission, error) {
	var sub submission
	if js.Name == "" {
		return sub, sc.errorf(path, "a job needs a name")
	}
	leaves := sc.leafQueues()
	if js.Queue == "" {
		return sub, sc.errorf(path, "job %q needs a queue; queues that take jobs: %s", js.Name, strings.Join(leaves, ", "))
	}
	if !slices.Contains(leaves, js.Queue) {
		if slices.Contains(queueNames(sc.Queues), js.Queue) {
			return sub, sc.errorf(path+".queue", "queue %q has child queues; submit to one of: %s", js.Queue, strings.Join(leaves, ", "))
		}
		return sub, sc.errorf(path+".queue", "unknown queue %q; queues that take jobs: %s", js.Queue, strings.Join(leaves, ", "))
	}
	j := engine.Job{ID: engine.JobID(js.Name), Queue: engine.QueueID(js.Queue), Priority: js.Priority, NodePool: js.NodePool, GPUTypes: js.GPUType,
		Accelerator: js.Accelerator}
	if err := sc.compileSpot(&j, js, path); err != nil {
		return sub, err
	}
	if len(js.NodePools) > 0 {
		if js.NodePool != "" {
			return sub, sc.errorf(path+".nodePools", "set nodePool or nodePools, not both")
		}
		j.NodePool, j.MorePools = js.NodePools[0], js.NodePools[1:]
	}
	if js.Class != "" {
		cl, err := engine.ParseClass(js.Class)
		if err != nil {
			return sub, sc.errorf(path+".class", "%v", err)
		}
		j.Class = cl
	}
	if js.Preemptible != nil {
		j.Preemptible = engine.PreemptibleNo
		if *js.Preemptible {
			j.Preemptible = engine.PreemptibleYes
		}
	}
	var req engine.PodRequest
	if js.GPU != nil && js.GPUMemory != "" {
		return sub, sc.errorf(path+".gpuMemory", "set gpu or gpuMemory, not both")
	}
	if g := js.GPU; g != nil {
		switch {
		case *g > 0 && *g < 1:
			req.GPUFraction = engine.MilliGPU(milliGPU(*g))
			if req.GPUFraction < 1 || req.GPUFraction > 999 {
				return sub, sc.errorf(path+".gpu", "%v is too fine: fractions are counted in thousandths of a GPU", *g)
			}
		case *g >= 1 && *g == math.Trunc(*g):
			req.GPUs = int(*g)
		default:
			return sub, sc.errorf(path+".gpu", "%v is not allowed: gpu is a whole number of GPUs (1, 2, …) or a fraction between 0 and 1 (such as 0.5)", *g)
		}
	}
	var claim *resourceapi.ResourceClaim
	if js.Claim != nil {
		var err error
		if req, claim, err = sc.claimRequest(c, js, path); err != nil {
			return sub, err
		}
	}
	if js.GPUMemory != "" {
		m, err := sc.quantity(path+".gpuMemory", js.GPUMemory, "", false)
		if err != nil {
			return sub, err
		}
		if m == 0 {
			return sub, sc.errorf(path+".gpuMemory", "gpuMemory must be more than 0")
		}
		req.GPUMemory = m
	}
	if err := sc.compileDeviceChoice(&j, &req, js, path); err != nil {
		return sub, err
	}
	if err := sc.compileKind(c, req, js, path); err != nil {
		return sub, err
	}
	var err error
	if req.CPU, err = sc.quantity(path+".cpu", js.CPU, "1", true); err != nil {
		return sub, err
	}
	if req.Memory, err = sc.quantity(path+".memory", js.Memory, "1Gi", false); err != nil {
		return sub, err
	}
	pods := 1
	if js.Pods != nil {
		if *js.Pods < 1 || *js.Pods > maxPods {
			return sub, sc.errorf(path+".pods", "%d is not allowed: a job has between 1 and %d pods", *js.Pods, maxPods)
		}
		pods = *js.Pods
	}
	j.MinMember = pods
	if js.MinPods != nil {
		if *js.MinPods < 1 || *js.MinPods > pods {
			return sub, sc.errorf(path+".minPods", "%d is not allowed: minPods is between 1 and pods (%d)", *js.MinPods, pods)
		}
		j.MinMember = *js.MinPods
	}
	if js.MaxPods != nil {
		if *js.MaxPods < pods || *js.MaxPods > maxPods {
			return sub, sc.errorf(path+".maxPods", "%d is not allowed: maxPods is between pods (%d) and %d", *js.MaxPods, pods, maxPods)
		}
		j.Growth = &engine.Growth{Max: *js.MaxPods - pods, Pod: req}
	}
	for k := 0; k < pods; k++ {
		j.Pods = append(j.Pods, engine.Pod{ID: engine.PodID(fmt.Sprintf("%s-%d", js.Name, k)), Request: req})
	}
	gpuField := ".gpu"
	if js.Claim != nil {
		gpuField = ".claim"
	}
	if err := sc.checkFitsSomewhere(c, j, path, gpuField); err != nil {
		return sub, err
	}
	if j.Topology, err = sc.jobTopology(c, js, path); err != nil {
		return sub, err
	}
	tols, err := sc.compileTolerations(path, js.Tolerations)
	if err != nil {
		return sub, err
	}
	key := filterKey(js.NodeSelector, tols, js.AntiAffinity)
	f, ok := c.filters[key]
	if !ok {
		f = nodeFilter(c.simNodes, js.NodeSelector, tols, c.anyAnti)
		c.filters[key] = f
	}
	if j.Nodes, err = c.claimFilter(f, claim, req.GPUs > 0 || req.Shared()); err != nil {
		return sub, sc.errorf(path+".claim", "%v", err)
	}
	c.meta[j.ID] = jobMeta{labels: js.Labels, anti: js.AntiAffinity}
	if js.Duration != "" {
		d, err := time.ParseDuration(js.Duration)
		if err != nil || d <= 0 {
			return sub, sc.errorf(path+".duration", "%q is not a duration: use a positive Go duration such as 10m", js.Duration)
		}
		sub.duration = d
	}
	sub.job = j
	return sub, nil
}

// checkFitsSomewhere refuses jobs that no pool of theirs could ever run; its error is the
// first pool's.
func (sc *Scenario) checkFitsSomewhere(c *compiled, j engine.Job, path, gpuField string) error {
	first := sc.checkFits(c, j, path, gpuField)
	for _, p := range j.MorePools {
		if first == nil {
			break
		}
		in := j
		in.NodePool = p
		if sc.checkFits(c, in, path, gpuField) == nil {
			return nil
		}
	}
	return first
}

// checkFits refuses jobs no node of the cluster could ever run: they would wait forever.
// gpuField names the field that asked for the GPUs (gpu, or claim).
func (sc *Scenario) checkFits(c *compiled, j engine.Job, path, gpuField string) error {
	req := j.Pods[0].Request
	var pool []engine.Node
	pools := map[string]bool{}
	models := map[string]bool{}
	for _, n := range c.nodes {
		pools[n.Pool] = true
		for _, g := range n.GPUs {
			models[g.Model] = true
		}
		// A job asking devices is measured against nodes of its kind only.
		if n.Pool == j.NodePool && (n.Accelerator == j.Accelerator || (req.GPUs == 0 && !req.Shared() && !req.WantsMIG())) {
			pool = append(pool, n)
		}
	}
	if len(pool) == 0 && j.NodePool == "" {
		delete(pools, "")
		return sc.errorf(path, "%s; set nodePool", engine.NoPoolRule(slices.Sorted(maps.Keys(pools))))
	}
	if len(pool) == 0 {
		return sc.errorf(path+".nodePool", "no node is in pool %q; pools: %s", j.NodePool, strings.Join(slices.Sorted(maps.Keys(pools)), ", "))
	}
	for k, t := range j.GPUTypes {
		if !models[t] {
			return sc.errorf(fmt.Sprintf("%s.gpuType[%d]", path, k), "no node has GPU type %q; types: %s", t, strings.Join(slices.Sorted(maps.Keys(models)), ", "))
		}
	}
	maxGPUs, total := 0, 0
	var maxDev, maxCPU, maxMem int64
	for _, n := range pool {
		ok := 0
		for _, g := range n.GPUs {
			if len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, g.Model) {
				ok++
				maxDev = max(maxDev, g.Memory)
			}
		}
		maxGPUs = max(maxGPUs, ok)
		total += ok
		maxCPU, maxMem = max(maxCPU, n.CPU), max(maxMem, n.Memory)
	}
	switch {
	case req.GPUs > maxGPUs:
		return sc.errorf(path+gpuField, "each pod needs %d GPUs but the largest node it may use has %d", req.GPUs, maxGPUs)
	case (req.Shared() || req.WantsMIG()) && maxGPUs == 0:
		return sc.errorf(path+gpuField, "the job needs a GPU but no node it may use has one")
	case req.GPUMemory > maxDev && req.GPUMemory > 0:
		return sc.errorf(path+".gpuMemory", "%s is more than the largest GPU it may use (%s)",
			engine.Format(engine.ResourceMemory, req.GPUMemory), engine.Format(engine.ResourceMemory, maxDev))
	case req.CPU > maxCPU:
		return sc.errorf(path+".cpu", "each pod needs %s CPU but the largest node has %s", engine.Format(engine.ResourceCPU, req.CPU), engine.Format(engine.ResourceCPU, maxCPU))
	case req.Memory > maxMem:
		return sc.errorf(path+".memory", "each pod needs %s memory but the largest node has %s",
			engine.Format(engine.ResourceMemory, req.Memory), engine.Format(engine.ResourceMemory, maxMem))
	case req.GPUs*j.MinMember > total:
		return sc.errorf(path+".pods", "the gang needs %d GPUs at once but the nodes it may use have %d", req.GPUs*j.MinMember, total)
	}
	return nil
}

func (sc *Scenario) checkExpect(e *Expect, path string, live map[string]bool) error {
	if e == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(e.Jobs)) {
		if !live[name] {
			return sc.errorf(path+".jobs."+name, "job %q does not exist at this step", name)
		}
		switch s := e.Jobs[name].Status; s {
		case "", StatusRunning, StatusPending, StatusCompleted:
		default:
			return sc.errorf(path+".jobs."+name+".status", "unknown status %q: allowed values are Running, Pending, Completed", s)
		}
	}
	names := queueNames(sc.Queues)
	for _, name := range slices.Sorted(maps.Keys(e.Queues)) {
		if !slices.Contains(names, name) {
			return sc.errorf(path+".queues."+name, "unknown queue %q; queues: %s", name, strings.Join(names, ", "))
		}
	}
	return nil
}

// Problems are all the validation errors of one scenario file, each naming its line.
type Problems []error

func (p Problems) Error() string {
	if len(p) == 1 {
		return p[0].Error()
	}
	lines := make([]string, len(p))
	for i, e := range p {
		lines[i] = "  " + e.Error()
	}
	return fmt.Sprintf("%d problems:\n%s", len(p), strings.Join(lines, "\n"))
}

// add appends err, flattening Problems.
func (p Problems) add(err error) Problems {
	var more Problems
	switch {
	case err == nil:
		return p
	case errors.As(err, &more):
		return append(p, more...)
	}
	return append(p, err)
}

func (p Problems) orNil() error {
	if len(p) == 0 {
		return nil
	}
	return p
}

// compileTopology reads the topology's levels.
func (sc *Scenario) compileTopology(c *compiled) error {
	if sc.Topology == nil {
		return nil
	}
	if len(sc.Topology.Levels) == 0 {
		return sc.errorf("topology.levels", "a topology needs at least one level, widest first, such as {name: rack, nodeLabel: example.com/rack}")
	}
	seen := map[string]bool{}
	var errs Problems
	for i, l := range sc.Topology.Levels {
		path := fmt.Sprintf("topology.levels[%d]", i)
		switch {
		case l.NodeLabel == "":
			errs = append(errs, sc.errorf(path+".nodeLabel", "each level names the node label that holds its domains"))
			continue
		case seen[l.NodeLabel] || (l.Name != "" && seen[l.Name]):
			errs = append(errs, sc.errorf(path, "level %q appears twice; levels are distinct", l.NodeLabel))
			continue
		}
		seen[l.NodeLabel], seen[l.Name] = true, true
		name := l.Name
		if name == "" {
			name = l.NodeLabel
		}
		c.levels, c.levelNames = append(c.levels, l.NodeLabel), append(c.levelNames, name)
	}
	return errs.orNil()
}

// jobTopology resolves a job's required and preferred levels, by name or node label.
func (sc *Scenario) jobTopology(c *compiled, js JobSpec, path string) (*engine.Topology, error) {
	if js.TopologyRequired == "" && js.TopologyPreferred == "" {
		return nil, nil
	}
	t := &engine.Topology{Levels: c.levels, Names: c.levelNames, Required: -1, Preferred: -1}
	for _, f := range [][2]string{{"topologyRequired", js.TopologyRequired}, {"topologyPreferred", js.TopologyPreferred}} {
		field, v := f[0], f[1]
		if v == "" {
			continue
		}
		i := slices.Index(c.levelNames, v)
		if i < 0 {
			i = slices.Index(c.levels, v)
		}
		if i < 0 {
			if len(c.levels) == 0 {
				return nil, sc.errorf(path+"."+field, "%q names a level, but the scenario has no topology: add topology.levels", v)
			}
			return nil, sc.errorf(path+"."+field, "unknown level %q; levels: %s", v, strings.Join(c.levelNames, ", "))
		}
		if field == "topologyRequired" {
			t.Required = i
		} else {
			t.Preferred = i
		}
	}
	return t, nil
}
