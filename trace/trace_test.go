package trace

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/allot-dev/allot/engine"
)

const traces = "../traces/alibaba-gpu-v2023/"

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "list.csv")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadPodsErrorsNameFileAndLine(t *testing.T) {
	head := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
	cases := map[string]struct{ body, want string }{
		"not a number":     {head + "p0,1000,10,1,1000,\np1,lots,10,1,1000,\n", `list.csv:3: column cpu_milli: "lots" is not a whole number`},
		"negative":         {head + "p0,1000,-5,1,1000,\n", "list.csv:2: column memory_mib: -5 is not allowed"},
		"milli above 1000": {head + "p0,1000,10,1,1500,\n", "list.csv:2: column gpu_milli: 1500 is not allowed: gpu_milli is between 0 and 1000"},
		"fraction of many": {head + "p0,1000,10,2,500,\n", "list.csv:2: column gpu_milli: 500 is not allowed with num_gpu 2"},
		"missing column":   {"name,cpu_milli,memory_mib,num_gpu\np0,1,1,1\n", `list.csv:1: the header lacks column "gpu_milli"`},
		"short row":        {head + "p0,1000,10\n", "list.csv:2: 3 columns, the header has 6"},
		"empty":            {head, "no rows after the header"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ReadPods(write(t, c.body))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	if _, err := ReadNodes(write(t, "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,10,two,T4\n")); err == nil || !strings.Contains(err.Error(), `list.csv:2: column gpu: "two"`) {
		t.Fatalf("nodes: %v", err)
	}
	// An unterminated quoted field once panicked the reader (issue 20).
	if _, err := ReadNodes(write(t, "sn,cpu_milli,memory_mib,gpu,model\n\"0000000")); err == nil || !strings.Contains(err.Error(), "list.csv: parse error on line 2") {
		t.Fatalf("unterminated quote: %v", err)
	}
}

// published reads the GPU node list and one pod list of traces/ (at the repository root).
func published(t *testing.T, list string) ([]engine.Node, []Pod) {
	t.Helper()
	nodes, err := ReadNodes(traces + "openb_node_list_gpu_node.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPods(traces + "openb_pod_list_" + list + ".csv")
	if err != nil {
		t.Fatal(err)
	}
	return nodes, pods
}

func TestReadPublishedTrace(t *testing.T) {
	nodes, _ := published(t, "default")
	if len(nodes) != 1213 || Capacity(nodes) != 6212*engine.OneGPU {
		t.Fatalf("%d nodes, %s GPUs; traces/README.md says 1213 and 6212", len(nodes), Capacity(nodes))
	}
	for _, f := range []string{"default", "multigpu20", "gpuspec20"} {
		pods, err := ReadPods(traces + "openb_pod_list_" + f + ".csv")
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) < 7000 {
			t.Fatalf("%s: %d pods", f, len(pods))
		}
	}
}

// TestTuneLandsWithinOnePodOf130 checks the protocol's tuning step on the real list.
func TestTuneLandsWithinOnePodOf130(t *testing.T) {
	nodes, pods := published(t, "default")
	var largest engine.MilliGPU
	for _, p := range pods {
		largest = max(largest, p.Demand())
	}
	target := Capacity(nodes) * 13 / 10
	for seed := uint64(1); seed <= 5; seed++ {
		tuned := Tune(pods, target, NewRand(seed))
		var total engine.MilliGPU
		for _, p := range tuned {
			total += p.Demand()
		}
		if total > target || target-total > largest {
			t.Fatalf("seed %d: demand %s for target %s (largest pod %s)", seed, total, target, largest)
		}
		if len(tuned) <= len(pods) {
			t.Fatalf("seed %d: nothing appended", seed)
		}
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	nodes, pods := published(t, "gpushare40")
	opts := ReplayOptions{Policies: []engine.Placement{engine.PlacementRandom, engine.PlacementBestFit}, Seeds: []uint64{7}, Tune: 1.3}
	a, err := Replay(context.Background(), nodes, pods, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Workers = 1
	b, _ := Replay(context.Background(), nodes, pods, opts)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seeds gave different replays")
	}
	opts.Seeds = []uint64{8}
	c, _ := Replay(context.Background(), nodes, pods, opts)
	if reflect.DeepEqual(a[0].Curve, c[0].Curve) {
		t.Fatal("different seeds gave the same random replay")
	}
}

// TestDefaultBeatsPublishedFGD replays every published pod list with three seeds: the
// engine's default placement must reach at least the paper's FGD mean at 130% on each (the
// seeds are fixed, so the figures are too: this fails only when a change lowers them), and
// beat our own FGD on the default list. Measured here: gpushare40 94.23% against 94.15%,
// gpushare60 91.43% against 91.40%, the two closest.
func TestDefaultBeatsPublishedFGD(t *testing.T) {
	for _, list := range slices.Sorted(maps.Keys(PublishedFGD)) {
		nodes, pods := published(t, list)
		policies := []engine.Placement{engine.PlacementAllot}
		if list == "default" {
			policies = append(policies, engine.PlacementFGD)
		}
		mean := replayMeans(t, list, nodes, pods, policies)
		if got := mean[engine.PlacementAllot]; got < PublishedFGD[list] {
			t.Errorf("%s: default placement %.4f over seeds 42-44, below the published FGD %.4f", list, got, PublishedFGD[list])
		}
		if list == "default" && mean[engine.PlacementAllot] <= mean[engine.PlacementFGD] {
			t.Errorf("default: default placement %.4f does not beat our FGD %.4f", mean[engine.PlacementAllot], mean[engine.PlacementFGD])
		}
	}
}

// TestDefaultBestOnHeavierMixes derives, as docs/simulation.md's commands do (`allot sim variant`,
// seed 1), lists with 2.5 times the CPU-only pods of default and of gpuspec20 (a fifth of
// whose GPU pods name a model) and one where fractional pods carry 80% of the GPU demand:
// mixes where the hosts' CPU runs out with the GPUs. The default must place at least as
// much as bin-packing and as our FGD there (seeds 42-44). Measured here: 90.03% against
// binpack's 89.22% and fgd's 88.45% (CPU-heavy), 87.98% against 86.82% and 84.39%
// (sharing-heavy); with the packed measure at 0.1 whatever the mix, the default lost to
// binpack on both. gpuspec20's CPU-heavy list: 89.90% against 84.70% and 87.78%; before
// the default charged for the capacity that pods naming a model need (spokenFor), 87.74%,
// below fgd.
func TestDefaultBestOnHeavierMixes(t *testing.T) {
	for _, c := range []struct {
		base, name string
		v          Variant
	}{
		{"default", "--cpu-only 2.5", Variant{CPUOnly: 2.5, Seed: 1}},
		{"default", "--sharing 0.8", Variant{Sharing: 0.8, Seed: 1}},
		{"gpuspec20", "--cpu-only 2.5", Variant{CPUOnly: 2.5, Seed: 1}},
	} {
		nodes, pods := published(t, c.base)
		name := c.base + " " + c.name
		list, err := Derive(pods, c.v)
		if err != nil {
			t.Fatal(err)
		}
		mean := replayMeans(t, name, nodes, list, []engine.Placement{engine.PlacementAllot, engine.PlacementBinPack, engine.PlacementFGD})
		t.Logf("%s: default %.4f, binpack %.4f, fgd %.4f", name, mean[engine.PlacementAllot], mean[engine.PlacementBinPack], mean[engine.PlacementFGD])
		for _, rival := range []engine.Placement{engine.PlacementBinPack, engine.PlacementFGD} {
			if mean[engine.PlacementAllot] < mean[rival] {
				t.Errorf("%s: default placement %.4f over seeds 42-44, below %s's %.4f", name, mean[engine.PlacementAllot], rival, mean[rival])
			}
		}
	}
}

// replayMeans replays the policies with seeds 42-44 and gives each one's mean allocation
// at 130% of capacity.
func replayMeans(t *testing.T, list string, nodes []engine.Node, pods []Pod, policies []engine.Placement) map[engine.Placement]float64 {
	t.Helper()
	runs, err := Replay(context.Background(), nodes, pods, ReplayOptions{Policies: policies, Seeds: []uint64{42, 43, 44}, Tune: 1.3})
	if err != nil {
		t.Fatal(err)
	}
	mean := map[engine.Placement]float64{}
	for _, p := range policies {
		var sum float64
		var n int
		for _, r := range runs {
			if r.Policy == PolicyLabel(p) {
				sum += r.AtEnd
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%s: %d runs of %s, want 3", list, n, p)
		}
		mean[p] = sum / float64(n)
	}
	for _, r := range runs {
		if r.At100 <= 0 || r.At100 > r.AtEnd || r.Stranded <= 0 {
			t.Fatalf("%s: implausible run: %+v", list, r)
		}
	}
	return mean
}

// TestReplayAsIs: --order as-is places the file's pods once, in the file's order: as many
// pods as the file has, the same whatever the seed for a policy that has no randomness.
func TestReplayAsIs(t *testing.T) {
	nodes, pods := published(t, "gpushare40")
	opts := ReplayOptions{Policies: []engine.Placement{engine.PlacementBestFit}, Seeds: []uint64{1, 2}, Tune: 1.3, AsIs: true}
	runs, err := Replay(context.Background(), nodes, pods, opts)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].Pods != len(pods) || runs[1].Pods != len(pods) {
		t.Fatalf("replayed %d and %d pods, the file has %d", runs[0].Pods, runs[1].Pods, len(pods))
	}
	if !reflect.DeepEqual(runs[0].Curve, runs[1].Curve) {
		t.Fatal("best-fit on the file's order differs between seeds")
	}
}

// TestDeriveVariants: the derived lists have the proportions asked for, the same seed gives
// the same list, and bad factors are refused naming the flag.
func TestDeriveVariants(t *testing.T) {
	_, pods := published(t, "default")
	count := func(ps []Pod) (cpuOnly int, frac, all int64) {
		for _, p := range ps {
			switch {
			case p.GPUs == 0:
				cpuOnly++
			case p.GPUs == 1 && p.GPUMilli < 1000:
				frac += int64(p.Demand())
			}
			all += int64(p.Demand())
		}
		return
	}
	c0, _, _ := count(pods)
	twice, err := Derive(pods, Variant{CPUOnly: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := count(twice); c != 2*c0 || len(twice) != len(pods)+c0 {
		t.Fatalf("--cpu-only 2: %d CPU-only pods of %d, want %d", c, len(twice), 2*c0)
	}
	again, _ := Derive(pods, Variant{CPUOnly: 2, Seed: 1})
	if !reflect.DeepEqual(twice, again) {
		t.Fatal("the same seed gave two lists")
	}
	shared, err := Derive(pods, Variant{Sharing: 0.8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, frac, all := count(shared); float64(frac)/float64(all) < 0.8 || float64(frac)/float64(all) > 0.81 {
		t.Fatalf("--sharing 0.8: fractional pods carry %.3f of the GPU demand", float64(frac)/float64(all))
	}
	var buf bytes.Buffer
	if err := WritePods(&buf, shared[:3]); err != nil || !strings.HasPrefix(buf.String(), "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n") {
		t.Fatalf("written: %v\n%s", err, buf.String())
	}
	for _, c := range []struct {
		v    Variant
		want string
	}{{Variant{CPUOnly: -1}, "--cpu-only -1 is not allowed"}, {Variant{Sharing: 1.5}, "--sharing 1.5 is not allowed"}} {
		if _, err := Derive(pods, c.v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.v, err, c.want)
		}
	}
}
