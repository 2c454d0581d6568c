// Package scheduler runs the engine on a Kubernetes cluster: informers → snapshot →
// engine → plan → bind / evict / status. All of Allot's Kubernetes I/O for scheduling
// lives here; the engine stays pure.
package scheduler

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/mig"
)

// Names users and other components see (defined with the API types).
const (
	SchedulerName      = v1alpha1.SchedulerName
	GPUResource        = corev1.ResourceName(v1alpha1.GPUResource)
	LabelQueue         = v1alpha1.LabelQueue
	LabelPodGroup      = v1alpha1.LabelPodGroup
	LabelClass         = v1alpha1.LabelClass
	LabelPreemptible   = v1alpha1.LabelPreemptible
	LabelNodePool      = v1alpha1.LabelNodePool
	LabelDomain        = v1alpha1.LabelDomain
	LabelProduct       = v1alpha1.LabelGPUProduct
	LabelGPUMemory     = v1alpha1.LabelGPUMemory
	AnnotationGPUs     = v1alpha1.AnnotationGPUs
	AnnotationGPUTypes = v1alpha1.AnnotationGPUTypes
)

// index maps the engine's IDs back to pods.
type index struct {
	pods map[engine.PodID]*corev1.Pod
	// uids are the pods the snapshot holds, by UID: what constrain asks of every pod of the
	// cluster each cycle, without building a name.
	uids  map[types.UID]bool
	jobs  map[engine.JobID][]*corev1.Pod
	nodes map[engine.NodeID]*engine.Node
	// releasing names, per node and device, the pod terminating there (evicted or
	// deleted, in its grace period) that still holds it; device -1: unknown, any.
	releasing map[engine.NodeID]map[int]string
	// evicted holds the gangs with a member leaving by eviction (the API server marks
	// such a pod DisruptionTarget).
	evicted map[engine.JobID]bool
	// adopted are bound pods whose recorded devices differ from the indices the scheduler
	// chose: the books follow the record, and a metric counts them.
	adopted []types.UID
	// queueProblems says, by Queue, what in its spec counts for nothing (a kind of
	// accelerator the scheduler does not schedule).
	queueProblems map[string]string
	// elastic holds the jobs whose workload grows and shrinks through its own count
	// (scale.go), with their gang size.
	elastic map[engine.JobID]elasticJob
}

// elasticJob is a job whose workload's count the scheduler changes.
type elasticJob struct {
	*convert.Elastic
	minMember int
}

func holdsGPU(r engine.PodRequest) bool { return r.GPUs > 0 || r.Shared() || r.WantsMIG() }

// stuckAfter is how long past its deletion deadline a terminating pod may take to go
// before it is taken for stuck (a node that stopped answering) rather than leaving.
const stuckAfter = 30 * time.Second

// convCache keeps what buildSnapshot derived from an object until the object changes:
// parsing quantities and building GPU lists anew for every node and pod in every cycle was
// most of a cycle's cost under a stream of submissions. The engine only reads a snapshot,
// so cached values are shared between cycles.
type convCache struct {
	// kinds is the scheduler's table of accelerator kinds (nil: NVIDIA's GPUs only).
	kinds *convert.Accelerators
	nodes map[types.UID]cachedNode
	reqs  map[types.UID]cachedRequest
	// warn hears what in a node's labels, annotations or capacity was not trusted (see
	// nodeProblems), once for each new set of problems: the scheduler's own occupancy
	// writes change the node often, and one report of the same garbage is enough.
	warn   func(n *corev1.Node, problems []string)
	warned map[types.UID]string
}

type cachedNode struct {
	version string
	node    engine.Node
}

type cachedRequest struct {
	generation int64 // a pod's resources change only with its spec (in-place resize)
	req        engine.PodRequest
	kind       convert.PodKind
}

func (c *convCache) node(n *corev1.Node) engine.Node {
	if c.nodes == nil {
		c.nodes = map[types.UID]cachedNode{}
	}
	if e, ok := c.nodes[n.UID]; ok && e.version == n.ResourceVersion {
		return e.node
	}
	out := c.kinds.Node(n)
	c.nodes[n.UID] = cachedNode{n.ResourceVersion, out}
	if c.warn != nil {
		p := append(convert.NodeProblems(n), c.kinds.AcceleratorProblems(n)...)
		if key := strings.Join(p, "\n"); key != c.warned[n.UID] {
			if c.warned == nil {
				c.warned = map[types.UID]string{}
			}
			c.warned[n.UID] = key
			if len(p) > 0 {
				c.warn(n, p)
			}
		}
	}
	return out
}

func (c *convCache) request(p *corev1.Pod) engine.PodRequest {
	r, _ := c.requestKind(p)
	return r
}

// requestKind is what a pod asks and the kind of device it asks for.
func (c *convCache) requestKind(p *corev1.Pod) (engine.PodRequest, convert.PodKind) {
	if c.reqs == nil {
		c.reqs = map[types.UID]cachedRequest{}
	}
	if e, ok := c.reqs[p.UID]; ok && e.generation == p.Generation {
		return e.req, e.kind
	}
	r, kind := c.kinds.PodRequest(p)
	if p.Spec.SchedulerName != SchedulerName {
		// Another scheduler's pod holds what the kubelet gives it: whole GPUs of the device
		// plugin. Allot's sharing annotations on it were written by its owner and seen by
		// none of Allot's webhooks (they see Allot's pods only): they book nothing, else a
		// tenant could have Allot keep GPUs from everyone by writing them on a pod of
		// kube-scheduler's.
		r.GPUFraction, r.GPUMemory, r.GPUCompute, r.Devices = 0, 0, 0, 0
		// Likewise allot.dev/mig: only the device plugin's MIG resources are held (and
		// where, never by its own annotations: see the snapshot).
		if r.MIGFrom != engine.MIGFixed {
			r.MIG, r.MIGShare, r.MIGMemory, r.MIGFrom = "", 0, 0, engine.MIGAny
		}
	} else if err := convert.MIGProblem(p); err != nil && kind.Problem == "" {
		// Once per pod, with its request: the pod waits saying what to fix.
		kind.Problem = err.Error()
	}
	c.reqs[p.UID] = cachedRequest{p.Generation, r, kind}
	return r, kind
}

// prune forgets objects that are gone.
func (c *convCache) prune(nodes []*corev1.Node, pods []*corev1.Pod) {
	if len(c.nodes) > len(nodes) {
		live := make(map[types.UID]bool, len(nodes))
		for _, n := range nodes {
			live[n.UID] = true
		}
		for uid := range c.nodes {
			if !live[uid] {
				delete(c.nodes, uid)
				delete(c.warned, uid)
			}
		}
	}
	if len(c.reqs) > len(pods) {
		live := make(map[types.UID]bool, len(pods))
		for _, p := range pods {
			live[p.UID] = true
		}
		for uid := range c.reqs {
			if !live[uid] {
				delete(c.reqs, uid)
			}
		}
	}
}

// buildSnapshot turns cluster objects into the engine's input. Pods of other schedulers
// that hold GPUs are included as running work of no queue, so that their GPUs are never
// handed out again. cache may be nil.
func buildSnapshot(now time.Time, nodes []*corev1.Node, pods []*corev1.Pod, queues []*v1alpha1.Queue, groups map[string]convert.Group,
	topologies map[string]convert.Levels, cache *convCache) (*engine.Snapshot, *index) {
	if cache == nil {
		cache = &convCache{}
	}
	defer cache.prune(nodes, pods)
	snap := &engine.Snapshot{Now: now, Nodes: make([]engine.Node, 0, len(nodes)), Accelerators: cache.kinds.Names()}
	// Not sized by len(pods): most pods of a large cluster are other schedulers' and CPU-only,
	// and maps sized for all of them took a third of the cycle (BenchmarkAdapterCycleProduction).
	idx := &index{pods: map[engine.PodID]*corev1.Pod{}, jobs: map[engine.JobID][]*corev1.Pod{}, uids: map[types.UID]bool{}}
	sort.Slice(nodes, func(a, b int) bool { return nodes[a].Name < nodes[b].Name })
	for _, n := range nodes {
		snap.Nodes = append(snap.Nodes, cache.node(n))
	}
	idx.nodes = make(map[engine.NodeID]*engine.Node, len(nodes))
	for i := range snap.Nodes {
		idx.nodes[snap.Nodes[i].ID] = &snap.Nodes[i]
	}
	divided := convert.DividedPools(queues)
	snap.Pools = divided[:min(len(divided), engine.MaxPools)]
	queueByName := make(map[string]*v1alpha1.Queue, len(queues))
	for _, q := range queues {
		queueByName[q.Name] = q
		eq, unknown := cache.kinds.Queue(q)
		var problems []string
		if len(unknown) > 0 {
			problems = append(problems, cache.kinds.UnknownKinds(unknown)+"; its quota of them counts for nothing")
		}
		if p := convert.SetPoolQuotas(q, &eq, divided); p != "" {
			problems = append(problems, p)
		}
		snap.Queues = append(snap.Queues, eq)
		if len(problems) > 0 {
			if idx.queueProblems == nil {
				idx.queueProblems = map[string]string{}
			}
			idx.queueProblems[q.Name] = strings.Join(problems, "; ")
		}
	}
	// Device indices of bound pods; pods without an annotation get free indices.
	used := map[string]map[int]bool{}
	// MIG slices of instances given to pods bound by hand, per node and device.
	migHeld := map[engine.NodeID]map[int]mig.Mask{}
	byJob := map[engine.JobID]*engine.Job{}
	// kindFrom names, per job, the pod whose devices gave the job its kind of accelerator.
	kindFrom := map[engine.JobID]engine.PodID{}
	var order []engine.JobID
	// Only the pods that can matter are sorted and read below: Allot's, and others' that
	// hold GPUs. At production scale most pods are neither (140,000 of 142,500 in
	// BenchmarkAdapterCycleProduction), and sorting them all every cycle cost about a fifth
	// of the cycle.
	mine := make([]*corev1.Pod, 0, 1024)
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.SchedulerName == SchedulerName || holdsGPU(cache.request(p)) {
			mine = append(mine, p)
		}
	}
	sort.Slice(mine, func(a, b int) bool {
		if !mine[a].CreationTimestamp.Equal(&mine[b].CreationTimestamp) {
			return mine[a].CreationTimestamp.Before(&mine[b].CreationTimestamp)
		}
		return mine[a].Name < mine[b].Name
	})
	idx.releasing, idx.evicted = map[engine.NodeID]map[int]string{}, map[engine.JobID]bool{}
	for _, p := range mine {
		// A terminating pod is leaving: it is not a member of its job any more (a gang
		// whose controller already made new pods must start them whole, not count the old
		// ones as running), it is never evicted again, and its queue no longer holds what
		// it frees, so the reclaim that evicted it is not repeated on someone else. Its
		// devices are free to the engine, as KAI-Scheduler pipelines onto releasing
		// resources, and apply holds any bind onto its node until it is gone. One that
		// outstays its deadline (a node not answering) holds its devices as work of no
		// queue, so the engine places elsewhere.
		if p.DeletionTimestamp != nil && p.Spec.NodeName != "" && !v1alpha1.IsReservation(p) {
			if now.Before(p.DeletionTimestamp.Add(stuckAfter)) {
				// Its CPU and memory stay counted (constrain subtracts every pod the
				// snapshot does not hold); its devices are remembered here.
				if r := cache.request(p); holdsGPU(r) {
					n := engine.NodeID(p.Spec.NodeName)
					gpus := heldIndices(p, idx.nodes[n])
					if len(gpus) == 0 {
						gpus = []int{-1}
					}
					for _, g := range gpus {
						idx.release(n, g, p.Namespace+"/"+p.Name)
					}
				}
				if p.Labels[LabelPodGroup] != "" && disrupted(p) {
					idx.evicted[engine.JobID(p.Namespace+"/"+p.Labels[LabelPodGroup])] = true
				}
				continue
			}
		}
		if v1alpha1.IsReservation(p) {
			continue // holds a shared GPU for the kubelet; its fractions are counted instead
		}
		ours := p.Spec.SchedulerName == SchedulerName && p.DeletionTimestamp == nil // a stuck one of ours is held like others'
		if !ours && (p.Spec.NodeName == "" || !holdsGPU(cache.request(p))) {
			continue
		}
		jid, min, submitted, problem := jobOf(p, groups)
		if !ours {
			jid, min, problem = engine.JobID("external/"+string(p.UID)), 1, ""
		}
		job := byJob[jid]
		if job == nil {
			job = &engine.Job{ID: jid, Queue: engine.QueueID(p.Labels[LabelQueue]), MinMember: min,
				SubmitTime: submitted, NodePool: p.Spec.NodeSelector[LabelNodePool]}
			if !ours {
				job.Queue = "" // no queue: holds its GPUs, never scheduled
			} else if problem != "" {
				job.Invalid = problem
			} else if err := jobPlaces(job, p, queueByName[p.Labels[LabelQueue]]); err != nil {
				// The webhook refuses such a pod; one admitted without it waits, saying why.
				job.Invalid = fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err)
			}
			if g, ok := groups[string(jid)]; ok && p.Labels[LabelPodGroup] != "" {
				job.GangGrace, job.Interruptions = g.GangGrace, g.Interruptions
			}
			if p.Spec.Priority != nil {
				job.Priority = *p.Spec.Priority
			}
			if c, ok := p.Labels[LabelClass]; ok {
				if cl, err := engine.ParseClass(c); err == nil {
					job.Class = cl
				} else if ours {
					job.Invalid = fmt.Sprintf("pod %s/%s: label %s: %v", p.Namespace, p.Name, LabelClass, err)
				}
			}
			switch p.Labels[LabelPreemptible] {
			case "true":
				job.Preemptible = engine.PreemptibleYes
			case "false":
				job.Preemptible = engine.PreemptibleNo
			}
			if t := p.Annotations[AnnotationGPUTypes]; t != "" {
				// "A100, H100" names H100 as "A100,H100" does.
				for _, m := range strings.Split(t, ",") {
					if m = strings.TrimSpace(m); m != "" {
						job.GPUTypes = append(job.GPUTypes, m)
					}
				}
			}
			if err := convert.JobChoice(job, p.Annotations); err != nil && ours && job.Invalid == "" {
				job.Invalid = fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err)
			}
			if ours {
				t, err := topologyOf(p, groups, topologies)
				if err != nil && job.Invalid == "" {
					job.Invalid = fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err)
				}
				job.Topology = t
			}
			byJob[jid] = job
			order = append(order, jid)
		}
		pid := engine.PodID(p.Namespace + "/" + p.Name)
		req, kind := cache.requestKind(p)
		pod := engine.Pod{ID: pid, Request: req}
		if why := jobKind(job, kindFrom, pid, req, kind); why != "" && ours && job.Invalid == "" {
			job.Invalid = why
		}
		if _, err := v1alpha1.ParseGPUShare(p.Annotations); err != nil && ours && job.Invalid == "" {
			// Written past the admission webhook (not installed, or by an admin): the job
			// waits and says what to fix, rather than running without its GPU share.
			job.Invalid = fmt.Sprintf("pod %s: %v", pid, err)
		}
		if p.Spec.NodeName != "" {
			b := &engine.Binding{Node: engine.NodeID(p.Spec.NodeName), GPUs: heldIndices(p, idx.nodes[engine.NodeID(p.Spec.NodeName)])}
			if rec, ok := convert.RecordedGPUs(p, idx.nodes[b.Node]); ok && !pod.Request.Shared() && p.Annotations[AnnotationGPUs] != "" &&
				formatIndices(rec) != p.Annotations[AnnotationGPUs] {
				idx.adopted = append(idx.adopted, p.UID) // the device plugin chose other devices
			}
			if pod.Request.WantsMIG() {
				node := idx.nodes[b.Node]
				var gpus, starts []int
				var prof string
				ok := false
				if ours {
					// Where Allot's bind booked it, or the kubelet gave it. Another
					// scheduler's pod is seen by no webhook or pod-fields policy of
					// Allot's: its annotations are its owner's, and say nothing here.
					gpus, starts, prof, ok = convert.MIGBinding(p, node)
				}
				if !ok && node != nil && pod.Request.MIG != "" {
					// Bound by hand, or by another scheduler: booked on the first free
					// instances of its profile.
					if migHeld[b.Node] == nil {
						migHeld[b.Node] = map[int]mig.Mask{}
					}
					prof = pod.Request.MIG
					gpus, starts = convert.FreeMIGInstances(node, prof, pod.Request.SharedDevices(), migHeld[b.Node])
				}
				b.GPUs, b.MIG, b.MIGStarts = gpus, prof, starts
			} else if pod.Request.Shared() {
				share, _ := strconv.Atoi(p.Annotations[v1alpha1.AnnotationGPUShare])
				b.Share = engine.MilliGPU(share)
				// What the bind booked of each device; a pod bound before it wrote these
				// holds its share of both.
				b.Memory, b.Compute = convert.BookedSlice(p)
				// What its node's agent last measured it to hold: past its booking, a burst.
				if mi, err := strconv.ParseInt(p.Annotations[v1alpha1.AnnotationPodGPUMemoryUsed], 10, 64); err == nil && mi > 0 && mi < 1<<30 {
					b.MemoryUsed = mi << 20
				}
				if len(b.GPUs) != pod.Request.SharedDevices() || b.Share <= 0 || b.Share >= engine.OneGPU {
					// Bound by hand without our annotations: count the whole request on the
					// first devices.
					b.GPUs, b.Share, b.Memory, b.Compute = nil, max(pod.Request.GPUFraction, pod.Request.GPUCompute, 1), 0, 0
					for g := range pod.Request.SharedDevices() {
						b.GPUs = append(b.GPUs, g)
					}
				}
			} else if len(b.GPUs) != pod.Request.GPUs {
				b.GPUs = nil // assigned below, after the annotated pods claim theirs
			}
			for _, g := range b.GPUs {
				if used[p.Spec.NodeName] == nil {
					used[p.Spec.NodeName] = map[int]bool{}
				}
				used[p.Spec.NodeName][g] = true
			}
			pod.Binding = b
		}
		job.Pods = append(job.Pods, pod)
		idx.pods[pid] = p
		idx.uids[p.UID] = true
		idx.jobs[jid] = append(idx.jobs[jid], p)
	}
	for _, jid := range order {
		snap.Jobs = append(snap.Jobs, *byJob[jid])
	}
	// Pods bound without device indices (other schedulers' pods) get the lowest free ones.
	for i := range snap.Jobs {
		job := &snap.Jobs[i]
		if job.MinMember < 0 {
			job.MinMember = len(job.Pods)
		}
		if g, ok := groups[string(job.ID)]; ok && g.Elastic != nil && job.Queue != "" && job.Invalid == "" {
			q := queueByName[string(job.Queue)]
			idx.noteElastic(job, g.Elastic, q == nil || q.Spec.Growth != "never")
		}
		for k := range job.Pods {
			pod := &job.Pods[k]
			b := pod.Binding
			if b == nil || len(b.GPUs) >= pod.Request.GPUs {
				continue
			}
			n := string(b.Node)
			if used[n] == nil {
				used[n] = map[int]bool{}
			}
			for g := 0; len(b.GPUs) < pod.Request.GPUs && g < 64; g++ {
				if !used[n][g] {
					used[n][g] = true
					b.GPUs = append(b.GPUs, g)
				}
			}
		}
	}
	return snap, idx
}

// jobKind gives a job the kind of device its pods ask for (engine.Job.Accelerator), from
// the first of them asking for any; it says why a pod cannot be scheduled as written: a
// problem with its kind (convert.PodKind), or devices of another kind than its gang's.
// CPU-only pods go with any kind.
func jobKind(job *engine.Job, from map[engine.JobID]engine.PodID, pid engine.PodID, r engine.PodRequest, k convert.PodKind) string {
	if k.Problem != "" {
		return fmt.Sprintf("pod %s: %s", pid, k.Problem)
	}
	if r.GPUs == 0 && !r.Shared() && !r.WantsMIG() {
		return ""
	}
	first, set := from[job.ID]
	if !set {
		from[job.ID], job.Accelerator = pid, k.Name
		return ""
	}
	if k.Name != job.Accelerator {
		name := func(kind string) string {
			if kind == "" {
				return "NVIDIA GPUs"
			}
			return kind + " devices"
		}
		return fmt.Sprintf("pod %s asks for %s and pod %s of its gang for %s: a gang's pods ask for devices of one kind",
			pid, name(k.Name), first, name(job.Accelerator))
	}
	return ""
}

// release notes a device still held by something leaving (who): binds onto it wait.
func (idx *index) release(n engine.NodeID, gpu int, who string) {
	if idx.releasing[n] == nil {
		idx.releasing[n] = map[int]string{}
	}
	idx.releasing[n][gpu] = who
}

// leaving names a terminating pod that still holds a device the binding is given.
func (idx *index) leaving(b engine.Binding) (string, bool) {
	held := idx.releasing[b.Node]
	if who, ok := held[-1]; ok {
		return who, true
	}
	for _, g := range b.GPUs {
		if who, ok := held[g]; ok {
			return who, true
		}
	}
	return "", false
}

// disrupted tells whether a pod is leaving by an eviction (or a preemption), which the API
// server marks with the DisruptionTarget condition.
func disrupted(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobOf groups pods: by the allot.dev/pod-group label (minMember from the PodGroup, else
// every pod of the group), else each pod is its own job. A group's place in its queue is
// the PodGroup's creation, so that pods recreated after an eviction keep it. problem names
// a gang size that could not be read.
func jobOf(p *corev1.Pod, groups map[string]convert.Group) (jid engine.JobID, min int, submitted time.Time, problem string) {
	if g := p.Labels[LabelPodGroup]; g != "" {
		key := engine.JobID(p.Namespace + "/" + g)
		if pg, ok := groups[string(key)]; ok && (pg.MinMember > 0 || pg.Problem != "") {
			return key, pg.MinMember, pg.Created, pg.Problem
		}
		m, err := convert.MinMemberAnnotation(p.Annotations[v1alpha1.AnnotationMinMember])
		if err != nil {
			return key, -1, p.CreationTimestamp.Time, fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		if m > 0 {
			return key, m, p.CreationTimestamp.Time, "" // the PodGroup is on its way
		}
		return key, -1, p.CreationTimestamp.Time, "" // minMember filled in by the caller's count
	}
	return engine.JobID(p.Namespace + "/" + p.Name), 1, p.CreationTimestamp.Time, ""
}

func podGPUs(p *corev1.Pod) int64 { return v1alpha1.WholeGPUs(p) }

// heldIndices is where a bound pod's devices are: what the kubelet really gave it when the
// node's agent has recorded that, else the indices the scheduler chose.
func heldIndices(p *corev1.Pod, node *engine.Node) []int {
	if rec, ok := convert.RecordedGPUs(p, node); ok {
		return rec
	}
	return convert.Indices(p.Annotations[AnnotationGPUs])
}

func formatIndices(gpus []int) string {
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}

// topologyOf is where a job's pods must or would rather land: the topology annotations of
// its pod, else of its PodGroup (copied there from the owner), else the PodGroup's
// spec.topology, one node label whose value all its pods share.
func topologyOf(p *corev1.Pod, groups map[string]convert.Group, topologies map[string]convert.Levels) (*engine.Topology, error) {
	ann, g := topologyAnnotations(p, groups)
	if t, err := convert.JobTopology(ann, topologies); t != nil || err != nil {
		return t, err
	}
	if g.SharedLabel != "" {
		return &engine.Topology{Levels: []string{g.SharedLabel}, Names: []string{g.SharedLabel}, Required: 0, Preferred: -1}, nil
	}
	return nil, nil
}

// topologyAnnotations are the pod's topology annotations over its PodGroup's (nil when
// neither has one: most pods, every cycle), and the PodGroup.
func topologyAnnotations(p *corev1.Pod, groups map[string]convert.Group) (map[string]string, convert.Group) {
	var g convert.Group
	if name := p.Labels[LabelPodGroup]; name != "" {
		g = groups[p.Namespace+"/"+name]
	}
	var ann map[string]string
	for _, from := range []map[string]string{g.Topology, p.Annotations} {
		for _, k := range convert.TopologyAnnotations {
			if v, ok := from[k]; ok {
				if ann == nil {
					ann = map[string]string{}
				}
				ann[k] = v
			}
		}
	}
	return ann, g
}

// jobPlaces reads where a job of pod p, of queue q (nil: unknown), may run: its node
// pools in order and its spot policy.
func jobPlaces(job *engine.Job, p *corev1.Pod, q *v1alpha1.Queue) error {
	pools, err := convert.Pools(p, q)
	if err != nil {
		return err
	}
	job.NodePool, job.MorePools = pools[0], pools[1:]
	job.Spot, job.OnDemandAfter, job.InterruptionBudget, err = convert.SpotPolicy(p, q)
	return err
}
