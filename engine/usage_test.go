package engine

import (
	"math"
	"testing"
	"time"
)

// Two teams of equal weight and quota 2 want all 16 GPUs of two nodes; a used many GPUs
// above its quota this week, b almost none. With history the 12 idle GPUs go mostly to b;
// the quotas (2 each) stay guarantees; without history they split evenly.
//
//	n1 (×8), n2 (×8)      a (quota 2, usage 900 GPU-h)   b (quota 2, usage 100 GPU-h)
//	                      each: 16 one-GPU jobs pending
func TestHeavyPastUserGetsLessOfTheIdleGPUs(t *testing.T) {
	now := time.Date(2026, 1, 8, 0, 0, 0, 0, time.UTC)
	a, b := quotaQueue("a", 2), quotaQueue("b", 2)
	a.Usage, b.Usage = 900*3600, 100*3600
	snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 8), gpuNode("n2", "", "A100", 8)}, Queues: []Queue{a, b}}
	for _, q := range []QueueID{"a", "b"} {
		for i := range 16 {
			id := JobID(string(q) + "-" + string(rune('a'+i)))
			snap.Jobs = append(snap.Jobs, Job{ID: id, Queue: q, MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: PodID(id), Request: PodRequest{GPUs: 1}}}})
		}
	}
	gpus := func(p *Plan, q QueueID) (fair, alloc float64) {
		return float64(p.Queues[q].FairShare.GPU()) / float64(OneGPU), float64(p.Queues[q].Allocated.GPU()) / float64(OneGPU)
	}
	cases := []struct {
		strength     float64
		fairA, fairB float64
	}{
		// 12 GPUs above the quotas; weights 2:2 so weight shares ½:½, usage shares 0.9:0.1.
		{0, 8, 8},
		// ½ + ½·(½ − 0.9) = 0.3 of 12 → 3.6, rounded to whole GPUs by largest remainder.
		{0.5, 2 + 4, 2 + 8},
		// ½ + (½ − 0.9) = 0.1 of 12 → 1.2.
		{1, 2 + 1, 2 + 11},
		// Past the point where a's weight is 0: a keeps its quota, b takes every idle GPU.
		{3, 2, 14},
	}
	for _, c := range cases {
		plan := New(Options{UsageStrength: c.strength}).Schedule(snap)
		fa, aa := gpus(plan, "a")
		fb, ab := gpus(plan, "b")
		if fa != c.fairA || fb != c.fairB {
			t.Errorf("strength %v: fair shares a=%v b=%v, want %v and %v", c.strength, fa, fb, c.fairA, c.fairB)
		}
		if aa != fa || ab != fb {
			t.Errorf("strength %v: allocated a=%v b=%v, want their fair shares %v and %v", c.strength, aa, ab, fa, fb)
		}
		if aa < 2 {
			t.Errorf("strength %v: a holds %v GPUs, below its quota of 2", c.strength, aa)
		}
	}
	if fs := FairShares(snap); fs["a"].GPU() != 8*OneGPU || fs["b"].GPU() != 8*OneGPU {
		t.Errorf("FairShares (history ignored) a=%v b=%v, want 8 and 8", fs["a"], fs["b"])
	}
}

// History never lowers a quota: when the quotas take the whole cluster there is nothing
// above quota to tilt, and the heaviest past user still gets its guarantee back by reclaim.
//
//	n1 (×4): b b b b      a (quota 2, usage 10⁶ GPU-s)   b (quota 2), borrowing a's GPUs
//	                      a submits 2 one-GPU jobs
func TestHistoryLeavesQuotasAlone(t *testing.T) {
	now := time.Date(2026, 1, 8, 0, 0, 0, 0, time.UTC)
	a, b := quotaQueue("a", 2), quotaQueue("b", 2)
	a.Usage = 1e6
	snap := &Snapshot{Now: now, Nodes: []Node{gpuNode("n1", "", "A100", 4)}, Queues: []Queue{a, b},
		Jobs: []Job{running("b-1", "b", "n1", 0, 1), running("b-2", "b", "n1", 2, 3),
			{ID: "a-1", Queue: "a", MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "a-1-0", Request: PodRequest{GPUs: 1}}}},
			{ID: "a-2", Queue: "a", MinMember: 1, SubmitTime: now, Pods: []Pod{{ID: "a-2-0", Request: PodRequest{GPUs: 1}}}}}}
	plan := New(Options{UsageStrength: 1}).Schedule(snap)
	if got := plan.Queues["a"].FairShare.GPU(); got != 2*OneGPU {
		t.Fatalf("a's fair share %v with history, want its quota 2", Format(ResourceGPU, int64(got)))
	}
	if len(plan.Evictions) != 1 || len(plan.Binds) != 2 {
		t.Fatalf("plan %d evictions, %d binds: want b's 2-GPU job reclaimed for a's two", len(plan.Evictions), len(plan.Binds))
	}
}

// Accrue integrates a constant rate exactly under decay: one step or many give the same,
// a constant rate converges to rate × half-life / ln 2, and unused usage halves per
// half-life.
func TestUsageAccrues(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	one := Usage{At: t0}.Accrue(t0.Add(7*day), 4, day)
	many := Usage{At: t0}
	for h := 1; h <= 7*24; h++ {
		many = many.Accrue(t0.Add(time.Duration(h)*time.Hour), 4, day)
	}
	if math.Abs(one.GPUSeconds-many.GPUSeconds) > 1e-6*one.GPUSeconds {
		t.Fatalf("one step %v, hourly steps %v", one.GPUSeconds, many.GPUSeconds)
	}
	limit := 4 * day.Seconds() / math.Ln2
	if got := one.GPUSeconds; got < 0.99*limit || got > limit {
		t.Fatalf("after 7 half-lives at 4 GPUs: %v GPU-s, want just under %v", got, limit)
	}
	if got := one.Decayed(one.At.Add(day), day); math.Abs(got-one.GPUSeconds/2) > 1e-6*got {
		t.Fatalf("a day without use left %v of %v, want half", got, one.GPUSeconds)
	}
	if got := (Usage{}).Accrue(t0, 8, day); got.GPUSeconds != 0 || !got.At.Equal(t0) {
		t.Fatalf("first accrual %+v, want none and the time noted", got)
	}
}
