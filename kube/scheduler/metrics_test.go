package scheduler

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/allot-dev/allot/engine"
)

// TestGrafanaDashboardUsesRealSeries: every allot_ series the dashboard under deploy/grafana
// queries is one the scheduler exports, so the dashboard cannot drift from the code.
func TestGrafanaDashboardUsesRealSeries(t *testing.T) {
	m := NewMetrics()
	m.observe(0.01, &engine.Plan{Queues: map[engine.QueueID]engine.QueueStatus{}}, nil)
	m.bindDone(nil)
	m.evicted.WithLabelValues("Reclaimed")
	m.quota.WithLabelValues("q")
	m.fairShare.WithLabelValues("q")
	m.allocated.WithLabelValues("q")
	m.pending.WithLabelValues("q")
	m.waiting.WithLabelValues("FairShare")
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			have[f.GetName()+"_bucket"] = true
		}
	}
	b, err := os.ReadFile("../../deploy/grafana/allot-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`allot_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, s := range series.FindAllString(tg.Expr, -1) {
				n++
				if !have[s] {
					t.Errorf("panel %q queries %s, which the scheduler does not export", p.Title, s)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no allot_ series")
	}
}
