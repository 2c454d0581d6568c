package stack

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/kube/workload"
)

// TestGrafanaDashboardUsesRealSeries: every allot_ series the dashboard under deploy/grafana
// queries is one the process exports at /metrics, so the dashboard cannot drift from the
// code.
func TestGrafanaDashboardUsesRealSeries(t *testing.T) {
	m, _, _ := newMetrics(workload.New(nil, nil, nil))
	// Describe names every series, also the labelled ones no sample has touched yet.
	descs := make(chan *prometheus.Desc)
	go func() { m.Registry.Describe(descs); close(descs) }()
	name := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	have := map[string]bool{}
	for d := range descs {
		if s := name.FindStringSubmatch(d.String()); s != nil {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				have[s[1]+suffix] = true
			}
		}
	}
	if !have["allot_queue_allocated_gpus"] || !have["allot_admission_requests_total"] || !have["allot_workload_pod_group_writes_total"] || !have["allot_gpu_seconds_allocated_total"] {
		t.Fatalf("the registry lacks the scheduler's, the webhooks' or the workload controller's series: %v", have)
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
					t.Errorf("panel %q queries %s, which Allot does not export", p.Title, s)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no allot_ series")
	}
}
