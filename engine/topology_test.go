package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// levelled builds racks of blocks of nodes: every node labelled with its rack, its block
// and its host, widest first.
//
//	rack r1: block b1 (r1b1-1, r1b1-2)  block b2 (r1b2-1, r1b2-2)
//	rack r2: block b3 (r2b3-1, r2b3-2)  block b4 (r2b4-1, r2b4-2)
func levelled(gpusPerNode int) []Node {
	var nodes []Node
	for r, blocks := range [][]string{{"b1", "b2"}, {"b3", "b4"}} {
		rack := fmt.Sprintf("r%d", r+1)
		for _, b := range blocks {
			for h := 1; h <= 2; h++ {
				id := NodeID(fmt.Sprintf("%s%s-%d", rack, b, h))
				n := gpuNode(id, "", "H100", gpusPerNode)
				n.Labels = map[string]string{"rack": rack, "block": b, "kubernetes.io/hostname": string(id)}
				nodes = append(nodes, n)
			}
		}
	}
	return nodes
}

var rackBlockHost = []string{"rack", "block", "kubernetes.io/hostname"}

func topologyGang(id JobID, q QueueID, pods, gpus int, required, preferred int, now time.Time) Job {
	j := Job{ID: id, Queue: q, MinMember: pods, SubmitTime: now,
		Topology: &Topology{Levels: rackBlockHost, Names: []string{"rack", "block", "host"}, Required: required, Preferred: preferred}}
	for i := range pods {
		j.Pods = append(j.Pods, Pod{ID: PodID(fmt.Sprintf("%s-%d", id, i)), Request: PodRequest{GPUs: gpus}})
	}
	return j
}

func nodesOf(p *Plan, job JobID) map[NodeID]bool {
	out := map[NodeID]bool{}
	for _, b := range p.Binds {
		if b.Job == job {
			out[b.Binding.Node] = true
		}
	}
	return out
}

// A 16-pod gang that requires one rack waits while no rack has 16 free GPUs, saying which
// rack has the most, and lands whole in one rack once one does, though the cluster had
// room for it all along.
//
//	r1: b1 [x x . .][. . . .]  b2 [. . . .][. . . .]     x: small-1 (2 GPUs)
//	r2: b3 [y . . .][. . . .]  b4 [. . . .][. . . .]     y: small-2 (1 GPU)
//	ddp: 16 pods × 1 GPU, allot.dev/topology-required: rack
func TestGangRequiresOneRack(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := &Snapshot{Now: now, Nodes: levelled(4), Queues: []Queue{quotaQueue("q", 32)},
		Jobs: []Job{running("small-1", "q", "r1b1-1", 0, 1), running("small-2", "q", "r2b3-1", 0),
			topologyGang("ddp", "q", 16, 1, 0, -1, now)}}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Binds) != 0 {
		t.Fatalf("bound %d pods with no rack holding 16 free GPUs", len(plan.Binds))
	}
	want := "gang of 16 pods × 1 GPU must start together within one rack (allot.dev/topology-required); the most free in one rack is 15 GPUs (r2)"
	if r := plan.Pending["ddp"]; r.Message != want {
		t.Fatalf("ddp waits with %q,\nwant %q", r.Message, want)
	}

	snap.Jobs = append(snap.Jobs[:1:1], snap.Jobs[2]) // small-2 completes
	plan = New(Options{}).Schedule(snap)
	nodes := nodesOf(plan, "ddp")
	if len(plan.Binds) != 16 {
		t.Fatalf("bound %d of ddp's 16 pods once r2 is free (%v)", len(plan.Binds), plan.Pending["ddp"])
	}
	for n := range nodes {
		if !strings.HasPrefix(string(n), "r2") {
			t.Fatalf("ddp on %v: not within rack r2", nodes)
		}
	}

	// No rack is large enough at all: the reason says so rather than "wait".
	snap.Jobs = []Job{topologyGang("huge", "q", 20, 1, 0, -1, now)}
	if r := New(Options{}).Schedule(snap).Pending["huge"]; r.Code != ReasonTooLarge ||
		r.Message != "needs 20 GPUs within one rack (allot.dev/topology-required); the largest rack it may use has 16 (r1)" {
		t.Fatalf("huge waits with %v %q", r.Code, r.Message)
	}
}

// A gang that prefers a block packs into the fullest block that holds it, keeping the
// empty ones for gangs that need a whole block; without topology it would take the
// emptiest.
//
//	r1: b1 [x x x x][. . . .]  b2 [. . . .][. . . .]     x: busy (4 GPUs)
//	r2: b3 [y y . .][. . . .]  b4 [. . . .][. . . .]     y: half (2 GPUs)
//	six: 3 pods × 2 GPUs, preferred block   →  b3 (6 free: the fullest that fits)
//	eight: 2 pods × 4 GPUs, preferred block →  b4 (ties with b2; r2 is the fuller rack)
func TestPreferredBlockKeepsLargeDomainsFree(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := &Snapshot{Now: now, Nodes: levelled(4), Queues: []Queue{quotaQueue("q", 32)},
		Jobs: []Job{running("busy", "q", "r1b1-1", 0, 1, 2, 3), running("half", "q", "r2b3-1", 0, 1),
			topologyGang("six", "q", 3, 2, -1, 1, now), topologyGang("eight", "q", 2, 4, -1, 1, now.Add(time.Second))}}
	plan := New(Options{}).Schedule(snap)
	six, eight := nodesOf(plan, "six"), nodesOf(plan, "eight")
	if len(six) == 0 || len(eight) == 0 {
		t.Fatalf("not placed: six %v eight %v (%v)", six, eight, plan.Pending)
	}
	for n := range six {
		if !strings.HasPrefix(string(n), "r2b3") {
			t.Errorf("six on %v, want block b3, the fullest that holds it", six)
		}
	}
	for n := range eight {
		if !strings.HasPrefix(string(n), "r2b4") {
			t.Errorf("eight on %v, want block b4", eight)
		}
	}

	// Without a topology six takes the emptiest nodes instead, breaking up a whole block.
	for i := 2; i < 4; i++ {
		snap.Jobs[i].Topology = nil
	}
	plan = New(Options{}).Schedule(snap)
	if n := nodesOf(plan, "six"); n["r2b3-1"] || n["r2b3-2"] {
		t.Fatalf("six without topology on %v: the contrast this test shows is gone", n)
	}
}

// An elastic job that requires a rack grows only inside the rack it runs in.
//
//	r1: all full but r1b1-1 holds el-0          el: 1..4 pods × 4 GPUs, required rack
//	r2: empty
func TestRequiredRackHoldsElasticGrowth(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	el := topologyGang("el", "q", 4, 4, 0, -1, now)
	el.MinMember = 1
	el.Pods[0].Binding = &Binding{Node: "r1b1-1", GPUs: []int{0, 1, 2, 3}}
	el.StartTime = now
	snap := &Snapshot{Now: now, Nodes: levelled(4), Queues: []Queue{quotaQueue("q", 32)},
		Jobs: []Job{el, running("f1", "q", "r1b1-2", 0, 1, 2, 3), running("f2", "q", "r1b2-1", 0, 1, 2, 3)}}
	plan := New(Options{}).Schedule(snap)
	got := nodesOf(plan, "el")
	if len(got) != 1 || !got["r1b2-2"] {
		t.Fatalf("el grew onto %v; the only room in its rack r1 is r1b2-2", got)
	}
}

// Reclaim for a gang that requires a rack evicts in one rack only: the borrower keeps
// what it holds in the other.
//
//	r1: b1 [x x x x][x x x x]  b2 [x x x x][x x x x]     x: b's one-GPU jobs (quota 0)
//	r2: b3 [x x x x][x x x x]  b4 [x x x x][x x x x]
//	a (quota 16): a 16-pod gang, required rack
func TestReclaimForARackEvictsInOneRack(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := &Snapshot{Now: now, Nodes: levelled(4), Queues: []Queue{quotaQueue("a", 16), quotaQueue("b", 0)}}
	for _, n := range snap.Nodes {
		for g := range 4 {
			snap.Jobs = append(snap.Jobs, running(JobID(fmt.Sprintf("b-%s-%d", n.ID, g)), "b", n.ID, g))
		}
	}
	snap.Jobs = append(snap.Jobs, topologyGang("ddp", "a", 16, 1, 0, -1, now))
	plan := New(Options{}).Schedule(snap)
	racks := map[string]int{}
	for _, e := range plan.Evictions {
		racks[string(e.Job)[2:4]]++
	}
	if len(plan.Evictions) != 16 || len(racks) != 1 {
		t.Fatalf("evicted %d pods in racks %v (%v), want 16 in one rack", len(plan.Evictions), racks, plan.Pending["ddp"])
	}
}

// On a larger cluster the victims a reclaim would take first are spread over every rack;
// evicting them in that order would free a whole rack only after hundreds of evictions.
// The reclaim for a gang that requires a rack looks one rack at a time instead.
//
//	40 racks × 2 nodes × 4 GPUs, all held by b's one-GPU jobs started in shuffled order
//	a (quota 8): an 8-pod gang, required rack
func TestReclaimForARackOnALargeCluster(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := &Snapshot{Now: now, Queues: []Queue{quotaQueue("a", 8), quotaQueue("b", 0)}}
	for r := range 40 {
		for h := range 2 {
			n := gpuNode(NodeID(fmt.Sprintf("r%02d-%d", r, h)), "", "H100", 4)
			n.Labels = map[string]string{"rack": fmt.Sprintf("r%02d", r)}
			snap.Nodes = append(snap.Nodes, n)
		}
	}
	for i, n := range snap.Nodes {
		for g := range 4 {
			j := running(JobID(fmt.Sprintf("b-%s-%d", n.ID, g)), "b", n.ID, g)
			j.StartTime = now.Add(-time.Duration((i*4+g)*37%320) * time.Minute)
			snap.Jobs = append(snap.Jobs, j)
		}
	}
	gang := topologyGang("ddp", "a", 8, 1, 0, -1, now)
	gang.Topology = &Topology{Levels: []string{"rack"}, Required: 0, Preferred: -1}
	snap.Jobs = append(snap.Jobs, gang)
	plan := New(Options{}).Schedule(snap)
	racks := map[string]bool{}
	for _, e := range plan.Evictions {
		racks[string(e.Job)[2:5]] = true
	}
	if len(plan.Evictions) != 8 || len(racks) != 1 {
		t.Fatalf("evicted %d pods in racks %v (%v), want 8 in one rack", len(plan.Evictions), racks, plan.Pending["ddp"])
	}
}

// A gang that prefers one rack lost a member: the replacement goes beside the members
// still running, though a tighter fit in the other rack is what bin-packing alone picks.
//
//	r1: b1 [ddp-0 ddp-1][x x x x x x x x]   b2 [. . . . . . . .][x x x x x x x x]
//	r2: b3 [x x x x . . . .][x x x x x x x x]  b4 [x x x x x x x x][x x x x x x x x]
//	ddp: 3 pods × 4 GPUs, topology-preferred: rack; ddp-2 lost → back in r1 (r1b2-1)
func TestLostMemberComesBackBesideItsGang(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ddp := topologyGang("ddp", "q", 3, 4, -1, 0, now)
	ddp.Pods[0].Binding = &Binding{Node: "r1b1-1", GPUs: []int{0, 1, 2, 3}}
	ddp.Pods[1].Binding = &Binding{Node: "r1b1-1", GPUs: []int{4, 5, 6, 7}}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	jobs := []Job{ddp, running("half", "q", "r2b3-1", 0, 1, 2, 3)}
	for _, n := range []NodeID{"r1b1-2", "r1b2-2", "r2b3-2", "r2b4-1", "r2b4-2"} {
		jobs = append(jobs, running(JobID("fill-"+n), "q", n, all...))
	}
	snap := &Snapshot{Now: now, Nodes: levelled(8), Queues: []Queue{quotaQueue("q", 64)}, Jobs: jobs}
	plan := New(Options{}).Schedule(snap)
	nodes := nodesOf(plan, "ddp")
	if len(nodes) != 1 || !nodes["r1b2-1"] {
		t.Fatalf("ddp-2 placed on %v (%v), want r1b2-1, in its gang's rack", nodes, plan.Pending["ddp"])
	}
}
