package sim

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/allot-dev/allot/engine"
)

func studyOptions() WorkloadOptions {
	var runtimes []time.Duration
	for i := 1; i <= 50; i++ {
		runtimes = append(runtimes, time.Duration(i)*10*time.Minute)
	}
	return WorkloadOptions{Nodes: 2, GPUsPerNode: 8, Duration: 3 * 24 * time.Hour, Rate: 10, Seed: 1,
		Teams: []Team{{Name: "a", Quota: 4}, {Name: "b", Quota: 4}, {Name: "c", Quota: 8}},
		Sizes: map[int]float64{1: 1}, Runtimes: runtimes, Sample: 12 * time.Hour}
}

// TestWorkloadFairUnderLoad: with more single-GPU work than GPUs, every team receives
// close to its fair share of GPU-hours and the cluster stays busy.
func TestWorkloadFairUnderLoad(t *testing.T) {
	rep, err := RunWorkload(context.Background(), studyOptions())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mean < 0.9 {
		t.Errorf("utilisation %.2f with a backlog", rep.Mean)
	}
	for _, tr := range rep.Teams {
		if tr.Received < 0.9 || tr.Received > 1.1 {
			t.Errorf("team %s received %.2f of its fair share (%+v)", tr.Team, tr.Received, tr)
		}
	}
	if len(rep.Utilization) != 6 {
		t.Errorf("%d utilisation samples for 3 days at 12h", len(rep.Utilization))
	}
}

func TestWorkloadDeterministicAndValidated(t *testing.T) {
	o := studyOptions()
	o.Duration = 24 * time.Hour
	a, _ := RunWorkload(context.Background(), o)
	b, _ := RunWorkload(context.Background(), o)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different study")
	}
	o.Sizes = map[int]float64{12: 1}
	if _, err := RunWorkload(context.Background(), o); err == nil {
		t.Fatal("a 12-GPU job on 8-GPU nodes was accepted")
	}
}

// TestHistoryBringsTeamsCloserToTheirShare: one team sends as much work as the other three
// together, all with the same quota, and half the cluster is above the quotas. Over a
// week, past usage (strength 1) brings the teams' GPU-hours closer to what quotas and
// weights give them than the instant division alone does, on the same arrivals.
func TestHistoryBringsTeamsCloserToTheirShare(t *testing.T) {
	o := studyOptions()
	o.Duration, o.Rate = 7*24*time.Hour, 4
	o.Teams = []Team{{Name: "a", Quota: 2, Share: 4}, {Name: "b", Quota: 2}, {Name: "c", Quota: 2}, {Name: "d", Quota: 2}}
	o.Sizes = map[int]float64{1: 60, 2: 20, 4: 20}
	base, err := RunWorkload(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	o.UsageStrength, o.HalfLife = 1, engine.DefaultUsageHalfLife
	hist, err := RunWorkload(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("from the fair share, mean and worst: without history %.3f %.3f, with %.3f %.3f",
		base.MeanDeviation, base.MaxDeviation, hist.MeanDeviation, hist.MaxDeviation)
	if hist.MeanDeviation >= base.MeanDeviation || hist.MaxDeviation >= base.MaxDeviation {
		t.Fatalf("history did not bring the teams closer to their shares: without %+v, with %+v", base.Teams, hist.Teams)
	}
	if hist.Mean < base.Mean-0.02 {
		t.Fatalf("history cost utilisation: %.3f without, %.3f with", base.Mean, hist.Mean)
	}
}

// TestSpotStudy: with one of two nodes spot, taken back several times a day, the study
// counts the interruptions, pays the spot node only while it is there, at the spot price,
// and still completes the work; the run is the same for the same seed; with no spot node
// it costs what on-demand nodes cost.
func TestSpotStudy(t *testing.T) {
	o := studyOptions()
	o.Duration, o.Rate = 24*time.Hour, 2
	s := SpotStudy{SpotNodes: 1, InterruptionsPerDay: 4, Downtime: 30 * time.Minute, OnDemandPrice: 3, SpotPrice: 1}
	o.Spot = &s
	rep, err := RunWorkload(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Cost
	onDemandPart := 24.0 * 8 * 3 // one on-demand node all day
	if c == nil || c.Interruptions == 0 || c.Cost <= onDemandPart || c.Cost > onDemandPart+24*8*1 {
		t.Fatalf("spot outcome %+v: want interruptions, and a cost above the on-demand node's %g and at most %g", c, onDemandPart, onDemandPart+24*8)
	}
	if away := onDemandPart + 24*8 - c.Cost; away > float64(c.Interruptions)*0.5*8+1e-9 {
		t.Errorf("the spot node went unpaid %.1f GPU-hours over %d interruptions of 30 minutes", away, c.Interruptions)
	}
	if rep.Completion.Done == 0 {
		t.Error("no job completed")
	}
	again, _ := RunWorkload(context.Background(), o)
	if !reflect.DeepEqual(rep, again) {
		t.Error("same seed, different spot study")
	}
	none := SpotStudy{OnDemandPrice: 3, SpotPrice: 1}
	o.Spot = &none
	if rep, err := RunWorkload(context.Background(), o); err != nil || rep.Cost.Cost != 2*24*8*3 || rep.Cost.Interruptions != 0 {
		t.Errorf("all on-demand: %+v, %v", rep.Cost, err)
	}
	o.Spot = &SpotStudy{SpotNodes: 3}
	if _, err := RunWorkload(context.Background(), o); err == nil {
		t.Error("3 spot nodes of 2 accepted")
	}
}
