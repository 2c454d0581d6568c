package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/allot-dev/allot/engine"
)

// Run plays a scenario and reports the state after every step. It fails if the engine
// does not settle or an expectation written in the file does not hold; the reports up to
// that point are returned either way.
func Run(sc *Scenario) ([]StepReport, error) { return RunWith(sc, RunOptions{}) }

// RunOptions tunes a run.
type RunOptions struct {
	// ExtraCycles are run after each step settles; each must plan nothing.
	ExtraCycles int
}

// RunWith is Run with options.
func RunWith(sc *Scenario, opts RunOptions) ([]StepReport, error) {
	m := sc.model
	w := NewWorld(engine.New(engine.Options{Placement: m.placement, GPUPacking: m.gpuPacking, UsageStrength: m.strength}), m.nodes, m.queues)
	if m.halfLife > 0 {
		w.KeepHistory(m.halfLife, m.usage)
	}
	w.DividePools(DividedPools(sc.Queues))
	if m.anyAnti {
		w.meta = m.meta
	}
	if m.dra != nil {
		w.Hold(m.dra.held...)
	}
	var reports []StepReport
	var failures []string
	for _, st := range m.steps {
		for _, id := range st.deletes {
			w.Delete(id)
		}
		for _, id := range st.interrupts {
			w.Interrupt(id)
		}
		for _, id := range st.fails {
			w.Fail(id)
		}
		for _, id := range slices.Sorted(maps.Keys(st.uses)) {
			w.Use(id, st.uses[id])
		}
		for _, sub := range st.submits {
			w.Submit(sub.job, sub.duration)
		}
		if err := w.Advance(st.advance); err != nil {
			return reports, fmt.Errorf("%s: step %s: %w", sc.file, st.name, err)
		}
		if err := w.checkQuiet(opts.ExtraCycles); err != nil {
			return reports, fmt.Errorf("%s: step %s: %w", sc.file, st.name, err)
		}
		r := w.Report(st.name)
		reports = append(reports, r)
		for _, f := range checkExpect(st.expect, r) {
			failures = append(failures, fmt.Sprintf("%s:%d: step %s: %s", sc.file, sc.lines[st.path+".expect"], st.name, f))
		}
	}
	if len(failures) > 0 {
		return reports, fmt.Errorf("%d expectation(s) not met:\n  %s", len(failures), strings.Join(failures, "\n  "))
	}
	return reports, nil
}

func checkExpect(e *Expect, r StepReport) []string {
	if e == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(e.Jobs)) {
		want, got := e.Jobs[name], r.Jobs[name]
		ctx := ""
		if got.Reason != "" {
			ctx = " (" + got.Reason + ")"
		}
		if want.Status != "" && want.Status != got.Status {
			out = append(out, fmt.Sprintf("job %s: status %s, want %s%s", name, got.Status, want.Status, ctx))
		}
		if want.GPUs != nil && !near(*want.GPUs, got.GPUs) {
			out = append(out, fmt.Sprintf("job %s: %v GPUs, want %v%s", name, got.GPUs, *want.GPUs, ctx))
		}
		if want.Nodes != nil {
			var nodes []string
			for _, p := range got.Pods {
				if !slices.Contains(nodes, p.Node) {
					nodes = append(nodes, p.Node)
				}
			}
			slices.Sort(nodes)
			w := slices.Clone(want.Nodes)
			slices.Sort(w)
			if !slices.Equal(nodes, w) {
				out = append(out, fmt.Sprintf("job %s: on nodes %v, want %v", name, nodes, w))
			}
		}
		if want.Reason != "" && !strings.Contains(got.Reason, want.Reason) {
			out = append(out, fmt.Sprintf("job %s: reason %q does not contain %q", name, got.Reason, want.Reason))
		}
		if want.Placement != "" && placement(got.Pods) != want.Placement {
			out = append(out, fmt.Sprintf("job %s: placed %s, want %s", name, placement(got.Pods), want.Placement))
		}
	}
	for _, want := range e.Events {
		if !slices.ContainsFunc(r.Events, func(ev string) bool { return strings.Contains(ev, want) }) {
			out = append(out, fmt.Sprintf("no event contains %q; events: %q", want, r.Events))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(e.Queues)) {
		want, got := e.Queues[name], r.Queues[name]
		if want.FairShare != nil && !near(*want.FairShare, got.FairShare) {
			out = append(out, fmt.Sprintf("queue %s: fair share %v, want %v", name, got.FairShare, *want.FairShare))
		}
		if want.Usage != nil && math.Abs(*want.Usage-got.Usage) > 0.01*max(*want.Usage, 1) {
			out = append(out, fmt.Sprintf("queue %s: usage %.1f GPU-hours, want %v", name, got.Usage, *want.Usage))
		}
		if want.Allocated != nil && !near(*want.Allocated, got.Allocated) {
			out = append(out, fmt.Sprintf("queue %s: allocated %v, want %v", name, got.Allocated, *want.Allocated))
		}
		if want.Pending != nil && *want.Pending != got.Pending {
			out = append(out, fmt.Sprintf("queue %s: %d pending, want %d", name, got.Pending, *want.Pending))
		}
		out = append(out, kindMisses("queue "+name+": pool ", want.Pools, got.Pools)...)
		out = append(out, kindMisses("queue "+name+": ", want.Accelerators, got.Accelerators)...)
	}
	return out
}

// kindMisses are the fair shares and allocations of each kind (a pool, an accelerator)
// that differ from what is expected; each line starts with prefix and the kind.
func kindMisses(prefix string, want map[string]KindExpect, got map[string]KindReport) []string {
	var out []string
	for _, kind := range slices.Sorted(maps.Keys(want)) {
		wk, gk := want[kind], got[kind]
		if wk.FairShare != nil && !near(*wk.FairShare, gk.FairShare) {
			out = append(out, fmt.Sprintf("%s%s fair share %v, want %v", prefix, kind, gk.FairShare, *wk.FairShare))
		}
		if wk.Allocated != nil && !near(*wk.Allocated, gk.Allocated) {
			out = append(out, fmt.Sprintf("%s%s allocated %v, want %v", prefix, kind, gk.Allocated, *wk.Allocated))
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.0005 }
