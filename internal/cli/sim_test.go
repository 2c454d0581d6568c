package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(args ...string) (string, error) {
	cmd := NewRoot()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestSimJSON checks the documented JSON shape on the reclaim example.
func TestSimJSON(t *testing.T) {
	out, err := run("sim", "--scenario", "../../examples/reclaim.yaml", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var steps []struct {
		Step string `json:"step"`
		Jobs map[string]struct {
			Queue  string  `json:"queue"`
			Status string  `json:"status"`
			GPUs   float64 `json:"gpus"`
			Pods   []struct {
				Node string `json:"node"`
				GPUs []int  `json:"gpus"`
			} `json:"pods"`
			Reason string `json:"reason"`
		} `json:"jobs"`
		Queues map[string]struct {
			Quota     float64 `json:"quota"`
			FairShare float64 `json:"fairShare"`
			Allocated float64 `json:"allocated"`
			Pending   int     `json:"pending"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(out), &steps); err != nil {
		t.Fatalf("not a JSON array of steps: %v\n%s", err, out)
	}
	if len(steps) != 2 || steps[1].Step != "team-b arrives and gets 2 back" {
		t.Fatalf("steps: %+v", steps)
	}
	last := steps[1]
	if b := last.Queues["team-b"]; b.FairShare != 2 || b.Allocated != 2 || b.Quota != 1 {
		t.Errorf("team-b: %+v", b)
	}
	if a := last.Queues["team-a"]; a.Pending != 2 {
		t.Errorf("team-a pending: %+v", a)
	}
	b1 := last.Jobs["b-1"]
	if b1.Status != "Running" || b1.GPUs != 1 || len(b1.Pods) != 1 || b1.Pods[0].Node != "node-1" || len(b1.Pods[0].GPUs) != 1 {
		t.Errorf("b-1: %+v", b1)
	}
	if a3 := last.Jobs["a-3"]; a3.Status != "Pending" || !strings.Contains(a3.Reason, "fair share") {
		t.Errorf("a-3: %+v", a3)
	}
}

func TestSimTable(t *testing.T) {
	out, err := run("sim", "--scenario", "../../examples/reclaim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"QUEUE", "FAIR SHARE", "team-b  -       1      2           2", "b-1  team-b  Running  1", "evicted: reclaimed by queue team-b"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSimErrors(t *testing.T) {
	if _, err := run("sim"); err == nil || !strings.Contains(err.Error(), "--scenario is required") {
		t.Errorf("missing flag: %v", err)
	}
	if _, err := run("sim", "-f", "../../examples/reclaim.yaml", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "allowed values are table, json") {
		t.Errorf("bad output: %v", err)
	}
	if _, err := run("sim", "-f", "nope.yaml"); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestSimWorkloadWithHistory: with a strength the same arrivals are played twice and the
// chart compares them team by team; JSON holds both reports; a bad strength is refused
// with what is allowed.
func TestSimWorkloadWithHistory(t *testing.T) {
	args := []string{"sim", "workload", "--days", "2", "--teams", "a:2:4,b:2", "--sizes", "1:60,2:40", "--rate", "3",
		"--usage-strength", "1"}
	out, err := run(args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"RECEIVED OF FAIR SHARE (│ = 100%) without history, and with strength 1, half-life 24h0m0s",
		"  a        without ", "           with    ", "from the fair share, mean and worst team: without history"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var both map[string]struct {
		UsageStrength float64 `json:"usageStrength"`
		Teams         []struct{ Team string }
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &both); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if both["withoutHistory"].UsageStrength != 0 || both["withHistory"].UsageStrength != 1 || len(both["withHistory"].Teams) != 2 {
		t.Fatalf("json: %+v", both)
	}
	if _, err := run("sim", "workload", "--usage-strength", "-1"); err == nil || !strings.Contains(err.Error(), "--usage-strength -1 is not allowed: a number 0 or more (0 ignores past use") {
		t.Errorf("negative strength: %v", err)
	}
}

// TestSimWorkloadElastic: --elastic plays the same arrivals with the jobs of several GPUs as
// rigid and as elastic one-GPU workers, on-demand and (with --spot-nodes) with spot, one
// row each.
func TestSimWorkloadElastic(t *testing.T) {
	out, err := run("sim", "workload", "--days", "2", "--nodes", "4", "--rate", "4", "--sizes", "1:2,2:1,4:1,8:1", "--elastic", "--spot-nodes", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jobs of more than one GPU as one-GPU workers, rigid or elastic (from half)", "ELASTIC JOBS GROWN",
		"on-demand only, rigid", "with spot, rigid", "on-demand only, elastic", "with spot, elastic"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if _, err := run("sim", "workload", "--elastic", "--usage-strength", "1"); err == nil || !strings.Contains(err.Error(), "--elastic and --usage-strength each compare runs") {
		t.Errorf("--elastic with --usage-strength: %v", err)
	}
}

// TestSimWorkloadWithSpot: --spot-nodes plays the same arrivals all on-demand and with
// spot nodes, and a table compares completion times and cost; bad values are refused
// naming the flag.
func TestSimWorkloadWithSpot(t *testing.T) {
	out, err := run("sim", "workload", "--days", "2", "--nodes", "4", "--rate", "4", "--spot-nodes", "2", "--interruptions-per-day", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"spot: 2 nodes, 2 interruptions per node-day, back after 15m0s; prices 3 on-demand, 1 spot per GPU-hour; spot policy allowed",
		"RUN", "COMPLETION P50", "COST", "SAVED", "on-demand only", "with spot"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--spot-nodes", "2", "--spot-policy", "sometimes"}, `--spot-policy: "sometimes" is not a spot policy: allowed, never or first`},
		{[]string{"--spot-nodes", "9", "--nodes", "4"}, "--spot-nodes 9 is not allowed: 0 to the 4 nodes"},
		{[]string{"--spot-nodes", "2", "--interruptions-per-day", "-1"}, "--interruptions-per-day -1 is not allowed"},
		{[]string{"--spot-nodes", "2", "--usage-strength", "1"}, "--spot-nodes and --usage-strength each compare two runs: give one of them"},
	} {
		if _, err := run(append([]string{"sim", "workload", "--days", "1"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
