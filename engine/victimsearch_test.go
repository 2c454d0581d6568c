package engine

import (
	"fmt"
	"testing"
	"time"
)

// A search refused for its first victim goes on: r may take 2 GPUs by fair share from v,
// above its own, only if v ends at or above its share of 4. Stopping big (listed first, the
// newest; 4 GPUs) would leave v at 2, which the rules refuse; stopping small (2 GPUs)
// leaves it at 4, which they allow.
//
//	n1 (×6): big big big big small small    v (quota 0, weight 1): big (newest), small
//	                                        r (quota 0, weight 1): rj of 2 GPUs waits
func TestReclaimGoesOnPastARefusedVictim(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	one := 1.0
	v, r := quotaQueue("v", 0), quotaQueue("r", 0)
	v.Resources[ResourceGPU].OverQuotaWeight, r.Resources[ResourceGPU].OverQuotaWeight = &one, &one
	big := running("big", "v", "n1", 0, 1, 2, 3)
	small := running("small", "v", "n1", 4, 5)
	big.StartTime, small.StartTime = now.Add(-time.Minute), now.Add(-time.Hour)
	snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 6)}, Queues: []Queue{v, r},
		Jobs: []Job{big, small, {ID: "rj", Queue: "r", MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "rj-0", Request: PodRequest{GPUs: 2}}}}}}
	plan := New(Options{}).Schedule(snap)
	if len(plan.Evictions) != 1 || plan.Evictions[0].Job != "small" {
		t.Errorf("evictions %v (rj: %q), want small's alone, which leaves v at its share", plan.Evictions, plan.Pending["rj"].Message)
	}
}

// A job whose room needs both a lower-priority job of its own queue and a GPU held by a
// queue above its quota gets both in one search: preemption alone frees too little,
// reclaim alone would take a past its quota. Together a ends at its quota and b at its.
//
//	n1 (×4): a-low b-one b-two b-two     a (quota 2): a-low (priority 0, 1 GPU); a-high (priority 100, 2 GPUs) waits
//	                                      b (quota 2): b-one (1 GPU), b-two (2 GPUs): 1 over its quota
func TestPreemptionAndReclaimTogether(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	low := running("a-low", "a", "n1", 0)
	bOne, bTwo := running("b-one", "b", "n1", 1), running("b-two", "b", "n1", 2, 3)
	for _, j := range []*Job{&low, &bOne, &bTwo} {
		j.Class, j.StartTime = ClassTrain, now.Add(-time.Hour)
	}
	high := Job{ID: "a-high", Queue: "a", Class: ClassTrain, Priority: 100, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "a-high-0", Request: PodRequest{GPUs: 2}}}}
	snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 4)}, Queues: []Queue{quotaQueue("a", 2), quotaQueue("b", 2)},
		Jobs: []Job{low, bOne, bTwo, high}}
	plan := New(Options{}).Schedule(snap)
	evicted := map[JobID]Reason{}
	for _, e := range plan.Evictions {
		evicted[e.Job] = e.Reason
	}
	if len(evicted) != 2 || evicted["a-low"].Code != ReasonPreempted || evicted["b-one"].Code != ReasonReclaimed {
		t.Fatalf("evictions %v (a-high: %q), want a-low preempted and b-one reclaimed", plan.Evictions, plan.Pending["a-high"].Message)
	}
}

// Owed under its department's quota, a project takes a sibling's gang larger than the
// sibling's own quota, which takes the sibling below that quota: the sibling could not take
// the GPUs back by quota (its gang of 2 does not fit its quota of 1), so nothing loops,
// and p0 does not wait beside idle GPUs at 0 of its share of 3.
//
//	n1 (×4): g g . .     dept (quota 5): p0 (quota 0, weight 10): p0-job of 3 GPUs waits
//	                                     p2 (quota 1, weight 1): g, a gang of 2 × 1 GPU
func TestOwedReclaimTakesAGangLargerThanItsOwnersQuota(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	ten, one := 10.0, 1.0
	dept, p0, p2 := quotaQueue("dept", 5), quotaQueue("p0", 0), quotaQueue("p2", 1)
	p0.Parent, p2.Parent = "dept", "dept"
	p0.Resources[ResourceGPU].OverQuotaWeight, p2.Resources[ResourceGPU].OverQuotaWeight = &ten, &one
	g := running("g", "p2", "n1", 0)
	g.Pods = append(g.Pods, Pod{ID: "g-1", Request: PodRequest{GPUs: 1}, Binding: &Binding{Node: "n1", GPUs: []int{1}}})
	g.MinMember, g.Class, g.StartTime = 2, ClassTrain, now.Add(-time.Hour)
	wait := Job{ID: "p0-job", Queue: "p0", Class: ClassTrain, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "p0-job-0", Request: PodRequest{GPUs: 3}}}}
	snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 4)}, Queues: []Queue{dept, p0, p2}, Jobs: []Job{g, wait}}
	plan := New(Options{}).Schedule(snap)
	if r, waits := plan.Pending["p0-job"]; waits {
		t.Fatalf("p0-job waits (%s); fair shares %v", r.Message, plan.Queues)
	}
	if len(plan.Evictions) != 2 || plan.Evictions[0].Job != "g" {
		t.Fatalf("evictions %v, want g's two pods", plan.Evictions)
	}
}

// A search does not spend its trials on victims the rules must refuse: a department past
// its fair share and its quota cannot gain, so a borrower outside it, however far over
// its own share (listed first), is no victim for its projects, and the search finds the
// sibling it may take from. The search tries one node (MaxNodeTrials 1): before, that
// trial went to b1's node, was refused, and a1 waited beside a2 over its share.
//
//	n1–n3 (×4): a2 × 9 one-GPU jobs       deptA (quota 8, no over-quota weight): a1 (quota 2): a1-job of 1 GPU waits
//	n3–n5 (×4): b1 × 11 one-GPU jobs                                             a2 (quota 6): 9 GPUs, 2 over its share of 7
//	                                      deptB (quota 8): b1 (quota 4): 11 GPUs, far over its share
//	                                                       b2 (quota 4): b2-job of 8 GPUs waits (no node holds it)
func TestReclaimSkipsVictimsOutsideADepartmentThatCannotGain(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	zero := 0.0
	deptA, deptB := quotaQueue("deptA", 8), quotaQueue("deptB", 8)
	deptA.Resources[ResourceGPU].OverQuotaWeight = &zero
	a1, a2, b1, b2 := quotaQueue("a1", 2), quotaQueue("a2", 6), quotaQueue("b1", 4), quotaQueue("b2", 4)
	a1.Parent, a2.Parent, b1.Parent, b2.Parent = "deptA", "deptA", "deptB", "deptB"
	var nodes []Node
	for _, n := range []NodeID{"n1", "n2", "n3", "n4", "n5"} {
		nodes = append(nodes, gpuNode(n, "", "A100", 4))
	}
	var jobs []Job
	for i := 0; i < 20; i++ {
		q, id := QueueID("a2"), JobID(fmt.Sprintf("a2-%d", i))
		if i >= 9 {
			q, id = "b1", JobID(fmt.Sprintf("b1-%d", i))
		}
		j := running(id, q, nodes[i/4].ID, i%4)
		j.Class, j.StartTime = ClassTrain, now.Add(-time.Hour)
		jobs = append(jobs, j)
	}
	jobs = append(jobs,
		Job{ID: "a1-job", Queue: "a1", Class: ClassTrain, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "a1-job-0", Request: PodRequest{GPUs: 1}}}},
		Job{ID: "b2-job", Queue: "b2", Class: ClassTrain, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "b2-job-0", Request: PodRequest{GPUs: 8}}}})
	snap := &Snapshot{Now: now, Nodes: nodes, Queues: []Queue{deptA, deptB, a1, a2, b1, b2}, Jobs: jobs}
	plan := New(Options{MaxNodeTrials: 1}).Schedule(snap)
	if r, waits := plan.Pending["a1-job"]; waits {
		t.Fatalf("a1-job waits (%s); queues %v", r.Message, plan.Queues)
	}
	if len(plan.Evictions) != 1 || plan.Evictions[0].Job[:2] != "a2" {
		t.Fatalf("evictions %v, want one of a2's jobs", plan.Evictions)
	}
}

// The cycle after a from-empty one stops no gang the first placed: on 40 nodes of Kueue's
// shape (gangs of two 8-GPU pods at high priority among 1- and 4-GPU jobs), the first
// cycle placed gangs past their queues' shares, took some to make room and placed them
// again, and a unit taken once in a cycle was not taken again in it: the next cycle then
// evicted 10 running gangs (160 GPUs of work) for queues left below their shares. A
// unit the cycle itself placed ran nowhere yet, so the first cycle now takes it again.
//
//	40 nodes × 8 GPUs    cohort-0 (quota 320): team-000 … team-039 (quota 8 each), 50 jobs each
func TestNextCycleStopsNoGangTheFirstPlaced(t *testing.T) {
	s := kueueShapeSmall(40)
	first := New(Options{}).Schedule(s)
	placed := map[PodID]Binding{}
	for _, b := range first.Binds {
		placed[b.Pod] = b.Binding
	}
	for i := range s.Jobs {
		for k := range s.Jobs[i].Pods {
			if b, ok := placed[s.Jobs[i].Pods[k].ID]; ok {
				s.Jobs[i].Pods[k].Binding = &b
				s.Jobs[i].StartTime = s.Now
			}
		}
	}
	s.Now = s.Now.Add(time.Minute)
	gangs := map[JobID]bool{}
	for _, j := range s.Jobs {
		if j.MinMember > 1 {
			gangs[j.ID] = true
		}
	}
	next := New(Options{}).Schedule(s)
	for _, e := range next.Evictions {
		if gangs[e.Job] {
			t.Errorf("the second cycle evicts gang %s, placed by the first: %s", e.Job, e.Reason.Message)
		}
	}
	t.Logf("first cycle: %d binds; second: %d binds, %d evictions", len(first.Binds), len(next.Binds), len(next.Evictions))
}
