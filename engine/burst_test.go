package engine

import (
	"strings"
	"testing"
	"time"
)

// A burster stopped frees its request as well as its burst: on an 80Gi GPU holding A (10Gi,
// using 30Gi), B (10Gi, using 25Gi) and C (10Gi), a 40Gi request needs A stopped, not B too.
func TestBurstersStoppedAreNoMoreThanNeeded(t *testing.T) {
	held := func(id string, usedGi int64) Job {
		return Job{ID: JobID(id), Queue: "q", MinMember: 1, Pods: []Pod{{ID: PodID(id + "-0"), Request: PodRequest{GPUMemory: 10 << 30, GPUMemoryLimit: 40 << 30},
			Binding: &Binding{Node: "n1", GPUs: []int{0}, Share: 125, Memory: 10 << 30, MemoryUsed: usedGi << 30}}}}
	}
	snap := &Snapshot{Now: time.Now(), Nodes: []Node{{ID: "n1", CPU: 64000, Memory: 256 << 30, GPUs: []GPU{{Model: "A100", Memory: 80 << 30}}}},
		Queues: []Queue{{ID: "q", Resources: [numResources]QueueResource{{Quota: 1000}}}},
		Jobs: []Job{held("a", 30), held("b", 25), held("c", 10),
			{ID: "new", Queue: "q", MinMember: 1, Pods: []Pod{{ID: "new-0", Request: PodRequest{GPUMemory: 40 << 30}}}}}}
	p := New(Options{}).Schedule(snap)
	if len(p.Evictions) != 1 || p.Evictions[0].Pod != "a-0" || len(p.Binds) != 1 || p.Binds[0].Pod != "new-0" {
		t.Fatalf("evictions %+v, binds %+v: want a stopped alone and new placed", p.Evictions, p.Binds)
	}
}

// A burst is a loan, revocable whatever the burster's class, but the burster is stopped
// whole: it keeps the minimum runtime that would shield it from the job needing the memory
// otherwise. Against another queue's request that is its queue's reclaimMinRuntime; against
// its own queue's, the preemption minimum.
//
//	n1: one 80Gi GPU. serve (queue b, non-preemptible, 10Gi up to 80Gi) uses 70Gi, started 9:00.
//	b: reclaimMinRuntime 1h, preemptMinRuntime 10m. A 40Gi request from queue a, then from b.
func TestBursterKeepsItsMinimumRuntime(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	hour, ten := time.Hour, 10*time.Minute
	b := Queue{ID: "b", Resources: [numResources]QueueResource{{Quota: 1000}}, ReclaimMinRuntime: &hour, PreemptMinRuntime: &ten}
	snap := func(now time.Time, queue QueueID) *Snapshot {
		serve := Job{ID: "serve", Queue: "b", MinMember: 1, StartTime: start, Preemptible: PreemptibleNo,
			Pods: []Pod{{ID: "serve-0", Request: PodRequest{GPUMemory: 10 << 30, GPUMemoryLimit: 80 << 30},
				Binding: &Binding{Node: "n1", GPUs: []int{0}, Share: 125, Memory: 10 << 30, MemoryUsed: 70 << 30}}}}
		return &Snapshot{Now: now, Nodes: []Node{{ID: "n1", CPU: 64000, Memory: 256 << 30, GPUs: []GPU{{Model: "A100", Memory: 80 << 30}}}},
			Queues: []Queue{{ID: "a", Resources: [numResources]QueueResource{{Quota: 1000}}}, b},
			Jobs:   []Job{serve, {ID: "new", Queue: queue, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "new-0", Request: PodRequest{GPUMemory: 40 << 30}}}}}}
	}
	for _, c := range []struct {
		name    string
		at      time.Duration
		queue   QueueID
		stopped bool
		want    string // in new's reason while it waits
	}{
		{"another queue, within reclaimMinRuntime", 30 * time.Minute, "a", false,
			"serve protected from reclaim by a minimum runtime, the first until 2026-01-01T10:00:00Z (in 30m0s)"},
		{"another queue, past it", 61 * time.Minute, "a", true, ""},
		{"its own queue, within preemptMinRuntime", 5 * time.Minute, "b", false,
			"serve protected from preemption by a minimum runtime, the first until 2026-01-01T09:10:00Z (in 5m0s)"},
		{"its own queue, past it", 30 * time.Minute, "b", true, ""},
	} {
		p := New(Options{}).Schedule(snap(start.Add(c.at), c.queue))
		if stopped := len(p.Evictions) == 1 && p.Evictions[0].Pod == "serve-0"; stopped != c.stopped {
			t.Errorf("%s: evictions %+v, want serve stopped: %v", c.name, p.Evictions, c.stopped)
		}
		if c.stopped && (len(p.Binds) != 1 || p.Binds[0].Pod != "new-0") {
			t.Errorf("%s: binds %+v, want new placed", c.name, p.Binds)
		}
		if r := p.Pending["new"]; !c.stopped && !strings.Contains(r.Message, c.want) {
			t.Errorf("%s: new waits with %q, want it to say %q", c.name, r.Message, c.want)
		}
	}
}

// Burst memory is taken back only for a request its queue may hold at the cost it really
// has: an 11Gi request is an eighth of an 80Gi GPU but 11/16 of the 16Gi one whose memory
// is lent. Queue a's interactive work, within quota only, holds half a GPU of its quota of
// one: taking the loan back for it would put it at 1.19 in non-preemptible use.
//
//	n1: one 16Gi GPU. lend (queue b, 2Gi up to 16Gi) uses 14Gi.
//	n2: one 80Gi GPU. nb-old (queue a, interactive, 40Gi) and b-half (queue b, 40Gi).
//	a (quota 1): nb, interactive, asks 11Gi.
func TestBurstTakenBackOnlyWithinTheRealCost(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	slice := func(id JobID, q QueueID, node NodeID, reqGi, limitGi, usedGi int64, share MilliGPU) Job {
		return Job{ID: id, Queue: q, MinMember: 1, StartTime: now.Add(-time.Hour), Pods: []Pod{{ID: PodID(id + "-0"),
			Request: PodRequest{GPUMemory: reqGi << 30, GPUMemoryLimit: limitGi << 30},
			Binding: &Binding{Node: node, GPUs: []int{0}, Share: share, Memory: reqGi << 30, MemoryUsed: usedGi << 30}}}}
	}
	old := slice("nb-old", "a", "n2", 40, 0, 40, 500)
	old.Class = ClassInteractive
	snap := &Snapshot{Now: now,
		Nodes: []Node{{ID: "n1", CPU: 64000, Memory: 256 << 30, GPUs: []GPU{{Model: "T4", Memory: 16 << 30}}},
			{ID: "n2", CPU: 64000, Memory: 256 << 30, GPUs: []GPU{{Model: "A100", Memory: 80 << 30}}}},
		Queues: []Queue{{ID: "a", Resources: [numResources]QueueResource{{Quota: 1000}}}, {ID: "b", Resources: [numResources]QueueResource{{Quota: 1000}}}},
		Jobs: []Job{slice("lend", "b", "n1", 2, 16, 14, 125), old, slice("b-half", "b", "n2", 40, 0, 40, 500),
			{ID: "nb", Queue: "a", Class: ClassInteractive, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "nb-0", Request: PodRequest{GPUMemory: 11 << 30}}}}}}
	p := New(Options{}).Schedule(snap)
	if len(p.Evictions) != 0 || len(p.Binds) != 0 {
		t.Fatalf("evictions %+v, binds %+v: want nothing stopped for nb (%s)", p.Evictions, p.Binds, p.Pending["nb"].Message)
	}
}
