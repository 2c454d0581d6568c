package dashboard

import (
	"strings"

	"github.com/allot-dev/allot/kube/inspect"
)

// Viewer is what one person may see, as the API server's authorization answers for them
// (access.go asks it with SubjectAccessReviews).
type Viewer interface {
	// Admin is whether they may list pods in every namespace: they see the whole state.
	Admin() bool
	// CanReadNamespace is whether they may list pods in ns: its workloads, their pods,
	// commands and events.
	CanReadNamespace(ns string) bool
	// CanSeeQueue is whether they may get the Queue of that name.
	CanSeeQueue(name string) bool
}

// Everyone is the viewer of --auth=none: the whole state, as the dashboard's own identity
// reads it.
type Everyone struct{}

func (Everyone) Admin() bool                  { return true }
func (Everyone) CanReadNamespace(string) bool { return true }
func (Everyone) CanSeeQueue(string) bool      { return true }

const (
	// OtherQueues is the queue tree's row standing for the top-level queues a viewer may not
	// see, with their figures summed (no Queue can be named so: names have no spaces).
	OtherQueues = "other queues"
	// OtherNamespace is the holder a GPU shows for pods of namespaces a viewer may not read.
	OtherNamespace = "in use by another namespace"
)

// Filter is st as v may see it. Build stays a function of the cluster alone; this is
// applied per person on the way out, and never changes st (its slices are shared).
//
//   - Workloads (with their pods, commands and reasons) only of namespaces v may read.
//   - Queues v may get, and those of the pods of the workloads v sees. A hidden queue under a visible
//     one is left out, its figures still in its parent's; hidden top-level queues become
//     one row, OtherQueues, whose figures are their sums; a visible queue below hidden
//     ones hangs from its nearest visible ancestor, or from OtherQueues.
//   - Nodes and GPUs whole, with a holder of a namespace v may not read shown as
//     OtherNamespace (one per GPU, its shares summed), as is the pod of a MIG instance.
//   - Totals and the history's cluster figures as they are: counts, no names.
func Filter(st State, v Viewer) State {
	if v == nil || v.Admin() {
		return st
	}
	out := st
	out.Workloads = make([]inspect.Workload, 0, len(st.Workloads))
	ofWorkloads := map[string]bool{}
	for _, w := range st.Workloads {
		if v.CanReadNamespace(w.Namespace) {
			out.Workloads = append(out.Workloads, w)
			// A queue is shown for the pods the webhook admitted to it from this
			// namespace, never for an owner's label (a Deployment of one's own labelled
			// with another team's queue).
			if len(w.Pods) > 0 {
				ofWorkloads[w.Queue] = true
			}
		}
	}
	sees := func(q string) bool { return ofWorkloads[q] || v.CanSeeQueue(q) }
	out.Nodes = filterNodes(st.Nodes, v)
	var hidden []string
	out.Queues, hidden = filterQueues(st.Queues, sees)
	out.History = filterHistory(st.History, out.Queues, hidden)
	return out
}

func filterNodes(nodes []inspect.Node, v Viewer) []inspect.Node {
	out := make([]inspect.Node, len(nodes))
	for i, n := range nodes {
		out[i] = n
		copied := false
		for g, gpu := range n.GPUs {
			var kept []inspect.Holder
			other := 0.0
			for _, h := range gpu.Holders {
				if ns, _, _ := strings.Cut(h.Pod, "/"); v.CanReadNamespace(ns) {
					kept = append(kept, h)
				} else {
					other += h.Share
				}
			}
			mig := filterMIG(gpu.MIG, v)
			if len(kept) == len(gpu.Holders) && mig == gpu.MIG {
				continue
			}
			if !copied {
				out[i].GPUs = append([]inspect.GPU(nil), n.GPUs...)
				copied = true
			}
			out[i].GPUs[g].MIG = mig
			if len(kept) < len(gpu.Holders) {
				out[i].GPUs[g].Holders = append(kept, inspect.Holder{Pod: OtherNamespace, Share: other})
			}
		}
	}
	return out
}

// filterMIG is a MIG layout with the pods of namespaces v may not read, holding instances
// or waiting for them, shown as OtherNamespace: l itself where it names none such.
func filterMIG(l *inspect.MIGLayout, v Viewer) *inspect.MIGLayout {
	if l == nil {
		return nil
	}
	var out *inspect.MIGLayout
	for k, in := range l.Instances {
		if ns, _, _ := strings.Cut(in.Pod, "/"); in.Pod == "" || v.CanReadNamespace(ns) {
			continue
		}
		if out == nil {
			c := *l
			c.Instances = append([]inspect.MIGInstance(nil), l.Instances...)
			out = &c
		}
		out.Instances[k].Pod = OtherNamespace
	}
	if out == nil {
		return l
	}
	return out
}

// filterQueues keeps the rows sees allows, in tree order, and returns the names of the
// hidden top-level queues folded into OtherQueues. A row's place in the tree is read from
// the rows' order and depths, as the pages draw it (a parent loop included).
func filterQueues(rows []Queue, sees func(string) bool) ([]Queue, []string) {
	const root, other = -1, -2
	parent := make([]int, len(rows))
	var stack []int
	for i, r := range rows {
		stack = stack[:min(r.Depth, len(stack))]
		parent[i] = root
		if len(stack) > 0 {
			parent[i] = stack[len(stack)-1]
		}
		stack = append(stack, i)
	}
	visible := make([]bool, len(rows))
	for i, r := range rows {
		visible[i] = sees(r.Name)
	}
	// Each visible row's parent as shown: its nearest visible ancestor, else OtherQueues
	// when it has hidden ones, else none.
	kids := map[int][]int{}
	var hidden []string
	sum := Queue{Name: OtherQueues}
	for i, r := range rows {
		if !visible[i] {
			if parent[i] == root {
				hidden = append(hidden, r.Name)
				addQueue(&sum, r)
			}
			continue
		}
		p := parent[i]
		for p >= 0 && !visible[p] {
			if parent[p] == root {
				p = other
				break
			}
			p = parent[p]
		}
		kids[p] = append(kids[p], i)
	}
	out := make([]Queue, 0, len(rows)+1)
	var emit func(i, depth int, parentName string)
	emit = func(i, depth int, parentName string) {
		r := rows[i]
		r.Depth, r.Parent = depth, parentName
		out = append(out, r)
		for _, k := range kids[i] {
			emit(k, depth+1, r.Name)
		}
	}
	for _, i := range kids[root] {
		emit(i, 0, "")
	}
	if len(hidden) > 0 {
		out = append(out, sum)
		for _, i := range kids[other] {
			emit(i, 1, OtherQueues)
		}
	}
	return out, hidden
}

// addQueue adds r's figures to sum's.
func addQueue(sum *Queue, r Queue) {
	sum.Quota += r.Quota
	sum.Weight += r.Weight
	sum.FairShare += r.FairShare
	sum.Allocated += r.Allocated
	sum.Borrowed += r.Borrowed
	sum.NonPreemptible += r.NonPreemptible
	sum.Requested += r.Requested
	sum.PendingGPUs += r.PendingGPUs
	sum.Running += r.Running
	sum.Pending += r.Pending
	if r.PastUse != nil {
		u := *r.PastUse
		if sum.PastUse != nil {
			u += *sum.PastUse
		}
		sum.PastUse = &u
	}
}

// filterHistory keeps the charts of the queues shown, and charts OtherQueues as the sum
// of the hidden top-level queues.
func filterHistory(history []Sample, shown []Queue, hidden []string) []Sample {
	out := make([]Sample, len(history))
	for i, s := range history {
		out[i] = s
		out[i].Queues = make(map[string]QueueSample, len(shown))
		for _, q := range shown {
			if qs, ok := s.Queues[q.Name]; ok {
				out[i].Queues[q.Name] = qs
			}
		}
		if len(hidden) == 0 {
			continue
		}
		var sum QueueSample
		for _, name := range hidden {
			sum.Allocated += s.Queues[name].Allocated
			sum.FairShare += s.Queues[name].FairShare
		}
		out[i].Queues[OtherQueues] = sum
	}
	return out
}
