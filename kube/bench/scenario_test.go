package bench

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchScenariosSmall runs every Scenario on 4 nodes (restart on 10) with the allot
// binary built from this tree: each binds every pod it times, its phases come in order
// (the first binding before the last; a reclaim's victims gone before its last rebind),
// each reclaim evicts exactly the GPUs it needs, and the scheduler's requests and memory
// are read. reclaim-one's victims take 2s to stop: no reclaim completes before they do.
// restart runs the scheduler with the custom metrics API too, as the chart does: the
// process watches pods once, whoever else in it reads them.
// Not timed: nothing here asserts a speed.
func TestBenchScenariosSmall(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "allot")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/allot-dev/allot/cmd/allot").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	const nodes, gpus = 4, 8
	for _, c := range []struct {
		name      string
		nodes     int
		stopAfter time.Duration
		want      int // pods bound in the timed phase
		evictions int // victims evicted
		metrics   bool
	}{
		{"fill", nodes, 0, nodes * gpus, 0, false},
		{"big-gang", nodes, 0, nodes, 0, false},
		{"reclaim-one", nodes, 2 * time.Second, reclaimSamples, reclaimSamples, false},
		{"reclaim-all", nodes, 0, nodes * gpus, nodes * gpus, false},
		{"reclaim-big", nodes, 0, nodes / 2, nodes / 2 * gpus, false},
		{"restart", 10, 0, 1, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := FindScenario(c.name)
			if err != nil {
				t.Fatal(err)
			}
			var out, prog bytes.Buffer
			rep, err := RunScenario(context.Background(), &out, &prog, bin, s, ScenarioOptions{Nodes: c.nodes, GPUs: gpus, StopAfter: c.stopAfter, CustomMetrics: c.metrics})
			if err != nil {
				t.Fatalf("%v\n%s", err, prog.String())
			}
			t.Log(out.String())
			if rep.Bound != c.want || rep.Want != c.want {
				t.Errorf("%d of %d pods bound, want %d", rep.Bound, rep.Want, c.want)
			}
			if rep.FirstBind <= 0 || rep.FirstBind > rep.LastBind || rep.Total <= 0 {
				t.Errorf("first bind %s, last %s, total %s: want 0 < first ≤ last, a total", rep.FirstBind, rep.LastBind, rep.Total)
			}
			if rep.EvictionsDone != c.evictions || rep.EvictionsIssued != c.evictions || rep.EvictionsNeeded != c.evictions {
				t.Errorf("%d evictions issued, %d done, %d counted as needed, want %d", rep.EvictionsIssued, rep.EvictionsDone, rep.EvictionsNeeded, c.evictions)
			}
			// A victim's devices are free once its containers stop, a moment before it is
			// removed: no rebind may come before that stop.
			if c.evictions > 0 && rep.LastVictimStopped > rep.LastBind {
				t.Errorf("the last victim stopped at %s, after the last rebind at %s", rep.LastVictimStopped, rep.LastBind)
			}
			for _, d := range rep.Samples {
				// The deletion's time is kept in whole seconds: a victim may stop up to a
				// second early.
				if d < c.stopAfter-time.Second {
					t.Errorf("a reclaim took %s, before its victim could stop (%s)", d, c.stopAfter)
				}
			}
			if rep.Sched.MaxRSS <= 0 || rep.Sched.Requests["create pods/binding"] < c.want {
				t.Errorf("scheduler report %+v: want its peak memory and a binding request per pod", rep.Sched)
			}
			if pods := rep.Sched.Requests["watch pods"] + rep.Sched.Requests["list pods"]; pods != 1 {
				t.Errorf("the scheduler process listed or watched pods %d times, want once (its informer, which every reader shares): %v", pods, rep.Sched.Requests)
			}
			if !strings.Contains(out.String(), "scenario "+c.name+": ") || !strings.Contains(out.String(), "  total: ") {
				t.Errorf("output lacks the scenario's name or total:\n%s", out.String())
			}
		})
	}
}

// TestRequestKey names requests as the API server's metrics do.
func TestRequestKey(t *testing.T) {
	for url, want := range map[string]string{
		"GET /api/v1/pods?watch=true":                                      "watch pods",
		"GET /api/v1/namespaces/default/pods":                              "list pods",
		"GET /api/v1/namespaces/default/pods/p":                            "get pods",
		"POST /api/v1/namespaces/default/pods/p/binding":                   "create pods/binding",
		"POST /api/v1/namespaces/default/pods/p/eviction":                  "create pods/eviction",
		"PATCH /apis/allot.dev/v1alpha1/queues/q/status":                   "patch queues/status",
		"DELETE /api/v1/namespaces/default/pods":                           "deletecollection pods",
		"GET /api/v1/namespaces/kube-system":                               "get namespaces",
		"PUT /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l": "update leases",
		"GET /api": "get discovery",
	} {
		method, path, _ := strings.Cut(url, " ")
		r, err := http.NewRequest(method, "https://127.0.0.1"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := requestKey(r); got != want {
			t.Errorf("%s: %q, want %q", url, got, want)
		}
	}
}

// TestBenchKueueSmall runs Kueue's shape on 4 nodes: the scheduler's binds settle with
// pods bound, and the ceiling (the bench binding the pods left bound, on a fresh cluster
// of the same shape) is measured and compared. Not timed.
func TestBenchKueueSmall(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "allot")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/allot-dev/allot/cmd/allot").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	s, err := FindScenario("kueue")
	if err != nil {
		t.Fatal(err)
	}
	var out, prog bytes.Buffer
	rep, err := RunScenario(context.Background(), &out, &prog, bin, s, ScenarioOptions{Nodes: 4, GPUs: 8})
	if err != nil {
		t.Fatalf("%v\n%s", err, prog.String())
	}
	t.Log(out.String())
	if rep.Bound == 0 || rep.Created < 200 || rep.Total <= 0 {
		t.Errorf("%d bound of %d pods made, total %s: want pods bound", rep.Bound, rep.Created, rep.Total)
	}
	if !strings.Contains(out.String(), "the ceiling, the bench binding the same ") || !strings.Contains(out.String(), "% of it") {
		t.Errorf("no ceiling in the output:\n%s", out.String())
	}
}
