package engine

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/mig"
)

// Held MIG bindings the engine did not write (a hand-written start, a whole pod left on a
// GPU now in MIG mode) never stop the cycle, and nothing new is laid over them.
func TestOddMIGBindingsHoldTheirGPU(t *testing.T) {
	a100, _ := mig.ByName("A100-80GB")
	dyn := func(id NodeID) Node {
		return Node{ID: id, CPU: 64000, Memory: 256 << 30, GPUs: []GPU{{Model: "A100", Memory: 80 << 30, MIG: &MIGDevice{Model: a100, Dynamic: true}}}}
	}
	for _, held := range []Binding{
		{Node: "n1", GPUs: []int{0}, MIG: "1g.10gb", MIGStarts: []int{-1}}, // no start of a 1g
		{Node: "n1", GPUs: []int{0}, MIG: "1g.10gb", MIGStarts: []int{40}}, // past the GPU
		{Node: "n1", GPUs: []int{0}},                                       // a whole pod from before MIG mode
	} {
		h := held
		snap := &Snapshot{Now: time.Now(), Nodes: []Node{dyn("n1")},
			Queues: []Queue{{ID: "q", Resources: [numResources]QueueResource{{Quota: 2000}}}},
			Jobs: []Job{
				// Not preemptible: it keeps its place, and what it holds must stay held.
				{ID: "old", Queue: "q", MinMember: 1, Preemptible: PreemptibleNo, Pods: []Pod{{ID: "old-0", Request: PodRequest{MIG: "1g.10gb"}, Binding: &h}}},
				{ID: "new", Queue: "q", MinMember: 1, Pods: []Pod{{ID: "new-0", Request: PodRequest{MIG: "1g.10gb"}}}},
			}}
		if h.MIG == "" {
			snap.Jobs[0].Pods[0].Request = PodRequest{GPUs: 1}
		}
		p := New(Options{}).Schedule(snap)
		for _, e := range p.Evictions {
			t.Errorf("held %+v: evicted %s: %s", held, e.Pod, e.Reason.Message)
		}
		for _, b := range p.Binds {
			t.Errorf("held %+v: %s placed on %s GPU %v at %v over it", held, b.Pod, b.Binding.Node, b.Binding.GPUs, b.Binding.MIGStarts)
		}
	}
}

// Asked by size, a MIG request takes the smallest instance that holds it, on whichever GPU
// it is, not the larger one on a fuller GPU.
func TestMIGBySizeTakesTheSmallestInstance(t *testing.T) {
	a100, _ := mig.ByName("A100-80GB")
	n := Node{ID: "n1", CPU: 64000, Memory: 256 << 30, GPUs: []GPU{
		{Model: "A100", Memory: 80 << 30, MIG: &MIGDevice{Model: a100, Instances: []MIGInstance{{Profile: "1g.10gb", Start: 0}}}},
		{Model: "A100", Memory: 80 << 30, MIG: &MIGDevice{Model: a100, Instances: []MIGInstance{{Profile: "4g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 4}}}},
	}}
	snap := &Snapshot{Now: time.Now(), Nodes: []Node{n},
		Queues: []Queue{{ID: "q", Resources: [numResources]QueueResource{{Quota: 2000}}}},
		Jobs: []Job{
			{ID: "busy", Queue: "q", MinMember: 1, Pods: []Pod{{ID: "busy-0", Request: PodRequest{MIG: "3g.40gb"},
				Binding: &Binding{Node: "n1", GPUs: []int{1}, MIG: "3g.40gb", MIGStarts: []int{4}}}}},
			{ID: "small", Queue: "q", MinMember: 1, Pods: []Pod{{ID: "small-0", Request: PodRequest{MIGShare: 100}}}},
		}}
	p := New(Options{}).Schedule(snap)
	if len(p.Binds) != 1 || p.Binds[0].Binding.MIG != "1g.10gb" {
		t.Fatalf("binds %+v: want small on the 1g", p.Binds)
	}
}
