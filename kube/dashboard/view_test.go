package dashboard

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// viewer is a Viewer from lists: the namespaces it may read, the queues it may get.
type viewer struct {
	admin      bool
	namespaces []string
	queues     []string
}

func (v viewer) Admin() bool                     { return v.admin }
func (v viewer) CanReadNamespace(ns string) bool { return v.admin || slices.Contains(v.namespaces, ns) }
func (v viewer) CanSeeQueue(name string) bool    { return v.admin || slices.Contains(v.queues, name) }

// cluster is a state with two tenants' workloads: research (a department of vision and
// nlp) and ops at the top, team-a's workload in vision, team-b's in ops, and one GPU that
// a pod of each shares.
func cluster(t *testing.T) State {
	t.Helper()
	qs := []*v1alpha1.Queue{queue("research", "", 8, "6"), queue("vision", "research", 4, "5"), queue("nlp", "research", 4, "1"), queue("ops", "", 2, "1")}
	st := Build(Input{Now: time.Unix(1000, 0), Queues: qs})
	st.Workloads = []inspect.Workload{
		{Name: "train-a", Namespace: "team-a", Queue: "vision", Status: "Running", Running: 1, Pods: []inspect.Pod{{Name: "train-a-0", Node: "dgx-1"}}},
		{Name: "train-b", Namespace: "team-b", Queue: "ops", Status: "Running", Running: 1, Pods: []inspect.Pod{{Name: "train-b-0", Node: "dgx-1"}}},
	}
	st.Nodes = []inspect.Node{{Name: "dgx-1", GPUs: []inspect.GPU{
		{Index: 0, Used: 1, Holders: []inspect.Holder{{Pod: "team-a/train-a-0", Share: 0.5}, {Pod: "team-b/train-b-0", Share: 0.5}}},
		{Index: 1, Used: 1, Holders: []inspect.Holder{{Pod: "team-b/other-0", Share: 0.25}, {Pod: "team-b/other-1", Share: 0.75}}},
		{Index: 2},
	}, Allocated: 2}}
	st.Totals.Running = 2
	for i := range st.Queues {
		st.Queues[i].Running = map[string]int{"research": 1, "vision": 1, "ops": 1}[st.Queues[i].Name]
	}
	st.History = []Sample{sample(&st)}
	return st
}

func names(qs []Queue) string {
	var out []string
	for _, q := range qs {
		out = append(out, fmt.Sprintf("%s%s<%s", strings.Repeat(" ", q.Depth), q.Name, q.Parent))
	}
	return strings.Join(out, ",")
}

// An admin sees the state as Build made it.
func TestFilterAdmin(t *testing.T) {
	st := cluster(t)
	want, _ := json.Marshal(st)
	got, _ := json.Marshal(Filter(st, viewer{admin: true}))
	if string(got) != string(want) {
		t.Errorf("the admin's state differs:\n%s\nwant\n%s", got, want)
	}
	if got, _ := json.Marshal(Filter(st, Everyone{})); string(got) != string(want) {
		t.Error("Everyone's state differs")
	}
}

// A tenant of team-a sees team-a's workload, its queue (vision) under OtherQueues (research
// is hidden), the GPU it shares with team-b's pod without that pod's name, and nothing
// more of team-b; totals stay the cluster's.
func TestFilterTenant(t *testing.T) {
	st := cluster(t)
	before, _ := json.Marshal(st)
	got := Filter(st, viewer{namespaces: []string{"team-a"}})
	if after, _ := json.Marshal(st); string(after) != string(before) {
		t.Fatal("Filter changed the state it was given")
	}
	if len(got.Workloads) != 1 || got.Workloads[0].Name != "train-a" {
		t.Errorf("workloads %+v, want train-a alone", got.Workloads)
	}
	if n := names(got.Queues); n != "other queues<, vision<other queues" {
		t.Errorf("queues %q: want vision under other queues", n)
	}
	other := got.Queues[0]
	// research (6 of 8, its children in it) and ops (1 of 2); workloads: vision's and ops'.
	if other.Quota != 10 || other.Allocated != 7 || other.Running != 2 {
		t.Errorf("other queues %+v: want the sums of research and ops", other)
	}
	if h := got.History[0].Queues; len(h) != 2 || h[OtherQueues].Allocated != 7 || h["vision"].Allocated != 5 {
		t.Errorf("history %+v: want vision's and the other queues' sum", h)
	}
	gpus := got.Nodes[0].GPUs
	if fmt.Sprint(gpus[0].Holders) != "[{team-a/train-a-0 0.5} {"+OtherNamespace+" 0.5}]" {
		t.Errorf("GPU 0 holders %v", gpus[0].Holders)
	}
	if fmt.Sprint(gpus[1].Holders) != "[{"+OtherNamespace+" 1}]" || gpus[1].Used != 1 {
		t.Errorf("GPU 1 (two team-b pods) %+v: want one holder of another namespace, still in use", gpus[1])
	}
	if got.Totals != st.Totals || got.Nodes[0].Allocated != 2 {
		t.Errorf("totals %+v, want the cluster's", got.Totals)
	}
	b, _ := json.Marshal(got)
	for _, secret := range []string{"team-b", "train-b", "other-0", "research", "nlp", `"ops"`} {
		if strings.Contains(string(b), secret) {
			t.Errorf("a tenant of team-a is shown %q:\n%s", secret, b)
		}
	}
	// One who may get the research queue sees it with its visible child, nlp folded in.
	got = Filter(st, viewer{namespaces: []string{"team-a"}, queues: []string{"research"}})
	if n := names(got.Queues); n != "research<, vision<research,other queues<" {
		t.Errorf("queues %q: want research with vision, and ops as other queues", n)
	}
	if r := got.Queues[0]; r.Allocated != 6 || r.Running != 1 {
		t.Errorf("research %+v: its figures keep nlp's", r)
	}
}

// A workload of one's own namespace shows the queue of its pods, which the webhook admitted
// there: a Deployment with no pods labelled with another team's queue shows nothing of it.
func TestFilterQueueOnlyFromPods(t *testing.T) {
	st := cluster(t)
	st.Workloads = append(st.Workloads, inspect.Workload{Name: "peek", Namespace: "team-a", Queue: "ops", Status: "Waiting"})
	got := Filter(st, viewer{namespaces: []string{"team-a"}})
	for _, q := range got.Queues {
		if q.Name == "ops" {
			t.Errorf("queues %s: team-a's podless Deployment labelled ops made ops visible", names(got.Queues))
		}
	}
}

// Someone with no rights sees the nodes, their GPUs in use by other namespaces, the
// totals, and one row of queues.
func TestFilterNoRights(t *testing.T) {
	st := cluster(t)
	got := Filter(st, viewer{})
	if len(got.Workloads) != 0 || got.Workloads == nil {
		t.Errorf("workloads %+v, want none (an empty list)", got.Workloads)
	}
	if n := names(got.Queues); n != "other queues<" || got.Queues[0].Allocated != 7 {
		t.Errorf("queues %s %+v", n, got.Queues)
	}
	for _, g := range got.Nodes[0].GPUs {
		for _, h := range g.Holders {
			if h.Pod != OtherNamespace {
				t.Errorf("GPU %d shows %s", g.Index, h.Pod)
			}
		}
	}
	if got.Totals.GPUs != st.Totals.GPUs || len(got.Nodes[0].GPUs) != 3 {
		t.Errorf("nodes %+v", got.Nodes)
	}
}

// A queue hidden under a visible one is left out, and a visible one under it hangs from
// the visible grandparent; a parent loop does not trip the filter.
func TestFilterQueueTreeShapes(t *testing.T) {
	rows := []Queue{{Name: "a", Depth: 0}, {Name: "b", Parent: "a", Depth: 1}, {Name: "c", Parent: "b", Depth: 2}, {Name: "d", Parent: "a", Depth: 1},
		{Name: "loop-x", Parent: "loop-y", Depth: 0}, {Name: "loop-y", Parent: "loop-x", Depth: 1}}
	see := func(names ...string) func(string) bool {
		return func(n string) bool { return slices.Contains(names, n) }
	}
	got, hidden := filterQueues(rows, see("a", "c", "loop-y"))
	if n := names(got); n != "a<, c<a,other queues<, loop-y<other queues" || fmt.Sprint(hidden) != "[loop-x]" {
		t.Errorf("tree %q, hidden %v", n, hidden)
	}
	if got, hidden := filterQueues(rows, see()); len(got) != 1 || len(hidden) != 2 {
		t.Errorf("nothing visible: %q %v", names(got), hidden)
	}
	if got, hidden := filterQueues(nil, see()); len(got) != 0 || hidden != nil {
		t.Errorf("no queues: %v %v", got, hidden)
	}
}
