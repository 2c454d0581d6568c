package dashboard

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/inspect"
)

// Input is what a State is made of: the informers' objects at one moment.
type Input struct {
	Now    time.Time
	Nodes  []*corev1.Node
	Queues []*v1alpha1.Queue
	// Topology, when the cluster has one, groups the nodes.
	Topology *convert.Levels
	// DRA holds the slices and claims of nodes whose GPUs come through DRA.
	DRA inspect.DRA
	inspect.Objects
}

// State is everything the pages show, sent whole to the browser on every change: the demo
// cluster's is a few kilobytes, and one document keeps the pages consistent with each other.
type State struct {
	Version   uint64             `json:"version"`
	Time      time.Time          `json:"time"`
	Totals    Totals             `json:"totals"`
	Queues    []Queue            `json:"queues"`
	Nodes     []inspect.Node     `json:"nodes"`
	Workloads []inspect.Workload `json:"workloads"`
	History   []Sample           `json:"history"`
}

// IdleBelow is the utilisation, in percent, under which an allocated GPU counts as idle.
const IdleBelow = 5

// Totals are the overview's headline figures. Idle GPUs are those no pod holds;
// fractions count as their part of a GPU.
type Totals struct {
	GPUs       float64 `json:"gpus"`
	Allocated  float64 `json:"allocated"`
	Idle       float64 `json:"idle"`
	Nodes      int     `json:"nodes"`
	Running    int     `json:"running"` // workloads
	Pending    int     `json:"pending"`
	SharedGPUs int     `json:"sharedGPUs"` // GPUs held by more than one pod
	// IdleAllocated is the allocated part of GPUs the agent reports as idle (busy less
	// than IdleBelow percent): GPUs held and not used, such as notebooks between cells.
	// Reporting is how many GPUs have a report; without one a GPU counts as neither.
	IdleAllocated float64 `json:"idleAllocated"`
	Reporting     int     `json:"reporting"`
	PendingPods   int     `json:"pendingPods"`
	RunningPods   int     `json:"runningPods"`
}

// Queue is one row of the queue tree, in tree order (a parent before its children).
type Queue struct {
	Name      string   `json:"name"`
	Parent    string   `json:"parent,omitempty"`
	Depth     int      `json:"depth"`
	Priority  int32    `json:"priority"`
	Quota     float64  `json:"quota"`
	Weight    float64  `json:"weight"`
	Limit     *float64 `json:"limit,omitempty"`
	FairShare float64  `json:"fairShare"`
	Allocated float64  `json:"allocated"`
	// Borrowed is what the queue holds beyond its quota: idle GPUs of others, lent.
	Borrowed float64 `json:"borrowed"`
	// PastUse is the queue's decayed use above quota in GPU-hours (status.usage), what
	// the scheduler's --usage-strength weighs; nil before the scheduler counted any.
	PastUse        *float64 `json:"pastUseGPUHours,omitempty"`
	NonPreemptible float64  `json:"allocatedNonPreemptible"`
	Requested      float64  `json:"requested"`
	PendingGPUs    float64  `json:"pendingGPUs"`
	Running        int      `json:"running"` // workloads, the queue's and its children's
	Pending        int      `json:"pending"`
	// Accelerators are the queue's devices of each other vendor's kind it has a quota of
	// or holds, apart from its NVIDIA GPUs above.
	Accelerators []KindRow `json:"accelerators,omitempty"`
	// Pools are the queue's GPUs of each node pool divided apart (its quota of the pool,
	// spec.gpu.pools), apart from its GPUs above, which count the other pools'.
	Pools []KindRow `json:"pools,omitempty"`
}

// KindRow is a queue's quota, fair share and allocation of one kind of accelerator, or of
// one node pool divided apart.
type KindRow struct {
	Kind      string   `json:"kind"`
	Resource  string   `json:"resource"`
	Quota     float64  `json:"quota"`
	Limit     *float64 `json:"limit,omitempty"`
	FairShare float64  `json:"fairShare"`
	Allocated float64  `json:"allocated"`
	Requested float64  `json:"requested"`
}

// Sample is one point of the history charts.
type Sample struct {
	Time          time.Time              `json:"time"`
	GPUs          float64                `json:"gpus"`
	Allocated     float64                `json:"allocated"`
	IdleAllocated float64                `json:"idleAllocated"`
	Queues        map[string]QueueSample `json:"queues"`
}

// QueueSample is a queue's allocation beside its fair share at one moment.
type QueueSample struct {
	Allocated float64 `json:"allocated"`
	FairShare float64 `json:"fairShare"`
}

func gpus(l corev1.ResourceList) float64 { return inspect.GPUs(l) }

// Build makes the pages' state from the cluster's objects (History and Version are the
// server's to fill).
func Build(in Input) State {
	st := State{Time: in.Now, Nodes: inspect.WithDRA(inspect.BuildNodes(in.Nodes, in.Pods), in.Nodes, in.Pods, in.DRA),
		Workloads: inspect.BuildWorkloads(in.Objects)}
	inspect.WorkloadUse(in.Nodes, st.Workloads)
	if st.Nodes == nil {
		st.Nodes = []inspect.Node{}
	}
	if in.Topology != nil {
		inspect.PlaceNodes(st.Nodes, in.Nodes, *in.Topology)
	}
	t := &st.Totals
	t.Nodes = len(st.Nodes)
	for _, n := range st.Nodes {
		if n.Accelerator != "" {
			continue // another vendor's devices: not NVIDIA GPUs, counted in none of these
		}
		t.GPUs += float64(len(n.GPUs))
		t.Allocated += n.Allocated
		for _, g := range n.GPUs {
			if len(g.Holders) > 1 {
				t.SharedGPUs++
			}
			if g.Utilization != nil {
				t.Reporting++
				if *g.Utilization < IdleBelow {
					t.IdleAllocated += g.Used
				}
			}
		}
	}
	t.Idle = t.GPUs - t.Allocated
	running, pending := map[string]int{}, map[string]int{}
	for _, w := range st.Workloads {
		t.RunningPods += w.Running
		t.PendingPods += w.Pending
		switch {
		case w.Running > 0:
			t.Running++
			running[w.Queue]++
		case w.Pending > 0:
			t.Pending++
			pending[w.Queue]++
		}
	}
	st.Queues = queueTree(in.Queues, running, pending)
	return st
}

// queueTree orders queues parent first, children by name, and adds each child's workload
// counts to its ancestors: a department shows its projects' work.
func queueTree(qs []*v1alpha1.Queue, running, pending map[string]int) []Queue {
	byName := map[string]*v1alpha1.Queue{}
	children := map[string][]string{}
	for _, q := range qs {
		byName[q.Name] = q
	}
	var roots []string
	for _, q := range qs {
		if p := q.Spec.Parent; p != "" && byName[p] != nil {
			children[p] = append(children[p], q.Name)
		} else {
			roots = append(roots, q.Name)
		}
	}
	sort.Strings(roots)
	out := []Queue{}
	seen := map[string]bool{}
	var walk func(name string, depth int) (int, int)
	walk = func(name string, depth int) (int, int) {
		q := byName[name]
		seen[name] = true
		row := Queue{Name: name, Parent: q.Spec.Parent, Depth: depth, Priority: q.Spec.Priority,
			Quota: float64(q.Spec.GPU.Quota), Weight: float64(q.Spec.GPU.Quota),
			FairShare: gpus(q.Status.FairShare), Allocated: gpus(q.Status.Allocated),
			NonPreemptible: gpus(q.Status.AllocatedNonPreemptible), Requested: gpus(q.Status.Requested)}
		if w := q.Spec.GPU.OverQuotaWeight; w != nil {
			row.Weight = float64(*w)
		}
		if l := q.Spec.GPU.Limit; l != nil {
			v := float64(*l)
			row.Limit = &v
		}
		row.Borrowed = max(0, row.Allocated-row.Quota)
		if u := q.Status.Usage; u != nil {
			h := float64(u.GPUSeconds) / 3600
			row.PastUse = &h
		}
		row.PendingGPUs = max(0, row.Requested-row.Allocated)
		row.Running, row.Pending = running[name], pending[name]
		row.Accelerators = kindRows(q)
		row.Pools = poolRows(q)
		i := len(out)
		out = append(out, row)
		kids := children[name]
		sort.Strings(kids)
		for _, k := range kids {
			if seen[k] {
				continue
			}
			r, p := walk(k, depth+1)
			out[i].Running += r
			out[i].Pending += p
		}
		return out[i].Running, out[i].Pending
	}
	for _, r := range roots {
		walk(r, 0)
	}
	// A parent loop (the scheduler reports it) leaves queues unreached: show them anyway.
	rest := []string{}
	for _, q := range qs {
		if !seen[q.Name] {
			rest = append(rest, q.Name)
		}
	}
	sort.Strings(rest)
	for _, r := range rest {
		if !seen[r] {
			walk(r, 0)
		}
	}
	return out
}

// sample is the state's point for the history charts.
func sample(st *State) Sample {
	s := Sample{Time: st.Time, GPUs: st.Totals.GPUs, Allocated: st.Totals.Allocated, IdleAllocated: st.Totals.IdleAllocated, Queues: map[string]QueueSample{}}
	for _, q := range st.Queues {
		s.Queues[q.Name] = QueueSample{Allocated: q.Allocated, FairShare: q.FairShare}
	}
	return s
}
