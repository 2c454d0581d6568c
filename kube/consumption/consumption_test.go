package consumption

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A day of looks, a restart and a gap, against the figures worked out by hand: nothing is
// counted twice, nothing a running pod held is lost, and a look across midnight is split.
func TestLooksAddUpAcrossARestartAndMidnight(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	t0 := time.Date(2026, 12, 6, 23, 59, 0, 0, time.UTC)
	a := Key{Queue: "team-a", User: "ann", Pool: "default", Model: "A100"}
	b := Key{Queue: "team-b", User: "bob", Pool: "h100", Model: "H100"}
	train := Use{Key: a, GPUs: 2, Started: t0.Add(-time.Hour), Util: 50, Measured: true}
	// Its start in another zone (as a pod's time may come): still split at UTC midnight.
	notebook := Use{Key: b, GPUs: 0.5, Started: t0.Add(10 * time.Second).In(time.FixedZone("UTC+10", 10*3600))}

	m := NewMetrics()
	r := &Recorder{Client: client, Metrics: m}
	look := func(r *Recorder, at time.Time, uses ...Use) {
		t.Helper()
		if err := r.Observe(ctx, at, uses); err != nil {
			t.Fatal(err)
		}
	}
	look(r, t0, train)                               // the first look ever counts nothing
	look(r, t0.Add(30*time.Second), train, notebook) // train 2×30, notebook 0.5×20
	look(r, t0.Add(30*time.Second), train, notebook) // again at the same instant: nothing
	// A pod that started 15 s before midnight, its time in another zone.
	c := Key{Queue: "team-c", User: "cy", Pool: "default", Model: "A100"}
	late := Use{Key: c, GPUs: 1, Started: t0.Add(45 * time.Second).In(time.FixedZone("UTC+10", 10*3600))}
	look(&Recorder{Client: client, Metrics: m}, t0.Add(90*time.Second), train, notebook, late) // a restart: 30 s before midnight, 30 after
	// Away for two hours; the notebook ended meanwhile (lost), training ran on.
	look(&Recorder{Client: client, Metrics: m}, t0.Add(90*time.Second+2*time.Hour), train)
	// The same as counters, for Prometheus.
	if got := testutil.ToFloat64(m.given.WithLabelValues("team-a", "ann", "default", "A100")); math.Abs(got-2*(90+7200)) > 1e-6 {
		t.Errorf("allot_gpu_seconds_allocated_total of team-a %v, want %v", got, 2*(90+7200))
	}
	if got := testutil.ToFloat64(m.used.WithLabelValues("team-a", "ann", "default", "A100")); math.Abs(got-(90+7200)) > 1e-6 {
		t.Errorf("allot_gpu_seconds_used_total of team-a %v, want %v", got, 90+7200)
	}

	days, err := Read(ctx, client, "2026-12-06", "2026-12-07")
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 2 {
		t.Fatalf("%d days written, want 2: %+v", len(days), days)
	}
	want := map[string]map[Key]Figures{
		"2026-12-06": {a: {Allocated: 2 * 60, Measured: 2 * 60, Used: 60}, b: {Allocated: 0.5 * 50}, c: {Allocated: 15}},
		"2026-12-07": {a: {Allocated: 2 * (30 + 7200), Measured: 2 * (30 + 7200), Used: 30 + 7200}, b: {Allocated: 0.5 * 30}, c: {Allocated: 30}},
	}
	for _, d := range days {
		if len(d.Rows) != len(want[d.Date]) {
			t.Errorf("%s: rows %+v, want %v", d.Date, d.Rows, want[d.Date])
		}
		for _, row := range d.Rows {
			w := want[d.Date][row.Key]
			if math.Abs(row.Allocated-w.Allocated) > 1e-6 || math.Abs(row.Measured-w.Measured) > 1e-6 || math.Abs(row.Used-w.Used) > 1e-6 {
				t.Errorf("%s %+v: %+v, want %+v", d.Date, row.Key, row.Figures, w)
			}
		}
	}
	if got, want := days[1].CountedUntil, t0.Add(90*time.Second+2*time.Hour); !got.Equal(want) {
		t.Errorf("counted until %v, want %v", got, want)
	}

	sums, err := Sum(days, []string{"queue"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 3 || sums[0].By[0] != "team-a" || math.Abs(sums[0].Allocated-2*(90+7200)) > 1e-6 || sums[1].By[0] != "team-c" || math.Abs(sums[1].Allocated-45) > 1e-6 || math.Abs(sums[2].Allocated-0.5*80) > 1e-6 {
		t.Errorf("by queue: %+v", sums)
	}
	if _, err := Sum(days, []string{"team"}, nil); err == nil {
		t.Error("--by team was not refused")
	}
	// Departments: team-a and team-b under research (team-b a level further down).
	depts, err := Sum(days, []string{"department"}, map[string]string{"team-a": "research", "team-b": "vision", "vision": "research"})
	if err != nil || len(depts) != 2 || depts[0].By[0] != "research" || math.Abs(depts[0].Allocated-(2*(90+7200)+0.5*80)) > 1e-6 {
		t.Errorf("by department: %+v, %v", depts, err)
	}
}

func TestDates(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if f, l, err := Dates("", "", now); err != nil || f != "2026-12-01" || l != "2026-12-06" {
		t.Errorf("defaults: %s %s %v", f, l, err)
	}
	for _, c := range [][2]string{{"yesterday", ""}, {"", "2026-13-01"}, {"2026-12-07", "2026-12-06"}} {
		if _, _, err := Dates(c[0], c[1], now); err == nil {
			t.Errorf("--from %q --to %q was not refused", c[0], c[1])
		}
	}
}

// A look that wrote yesterday and failed on today (an API error, another writer) is tried
// again without counting yesterday's part twice.
func TestALookTriedAgainCountsNothingTwice(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	r := &Recorder{Client: client}
	t0 := time.Date(2026, 12, 6, 23, 59, 0, 0, time.UTC)
	a := Use{Key: Key{Queue: "q", User: "u", Pool: "default", Model: "A100"}, GPUs: 1, Started: t0.Add(-time.Hour)}
	if err := r.Observe(ctx, t0, []Use{a}); err != nil {
		t.Fatal(err)
	}
	failed := false
	client.PrependReactor("create", "configmaps", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if cm := action.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap); cm.Name == Name("2026-12-07") && !failed {
			failed = true
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	at := t0.Add(2 * time.Minute) // 60 s yesterday, 60 s today
	if err := r.Observe(ctx, at, []Use{a}); err == nil {
		t.Fatal("the failed write was not reported")
	}
	if err := r.Observe(ctx, at, []Use{a}); err != nil {
		t.Fatal(err)
	}
	days, err := Read(ctx, client, "2026-12-06", "2026-12-07")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{60, 60} {
		if len(days) != 2 || len(days[i].Rows) != 1 || days[i].Rows[0].Allocated != want {
			t.Fatalf("days %+v, want 60 GPU-seconds on each", days)
		}
	}
}
