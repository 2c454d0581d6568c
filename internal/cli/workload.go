package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/internal/progress"
	"github.com/allot-dev/allot/sim"
	"github.com/allot-dev/allot/trace"
	"github.com/allot-dev/allot/traces"
)

func newWorkloadCmd() *cobra.Command {
	var o sim.WorkloadOptions
	var teams, sizes, runtimes, output string
	var days, sampleHours float64
	var study sim.SpotStudy
	var spotPolicy string
	var elastic bool
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Simulate days of multi-team arrivals and report what each team received",
		Long: `Generate job arrivals from several teams over simulated days (a Poisson process, job sizes
from --sizes, run times drawn from the Philly distribution) and play them through the engine
with a simulated clock. Reports per team the GPU-hours received against the fair-share
GPU-hours, wait-time percentiles and preemptions, and the cluster's utilisation over time.

With --usage-strength above 0, past use above quota (decayed with --usage-half-life) tilts
the division of idle GPUs, as the scheduler's flags of the same names do. The same arrivals
are then played twice, without history and with it, and a chart shows how far each team's
GPU-hours end from its fair share (by quotas and weights) in each run.`,
		Example: "  allot sim workload --teams a:4,b:2,c:2,d:8 --nodes 2 --gpus-per-node 8 --days 7 --rate 2\n" +
			"  allot sim workload --days 28 --usage-strength 1 --usage-half-life 24h",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q is not supported: allowed values are table, json", output)
			}
			if err := engine.CheckUsageStrength(o.UsageStrength); err != nil {
				return fmt.Errorf("--usage-strength %w", err) // before any file is read
			}
			var err error
			if o.Teams, err = parseTeams(teams); err != nil {
				return err
			}
			if o.Sizes, err = parseSizes(sizes); err != nil {
				return err
			}
			if runtimes == "" {
				o.Runtimes, err = trace.ParseRuntimes(bytes.NewReader(traces.PhillyRuntimes), traces.PhillyRuntimesName)
			} else {
				o.Runtimes, err = trace.ReadRuntimes(runtimes)
			}
			if err != nil {
				return err
			}
			o.Duration = time.Duration(days * 24 * float64(time.Hour))
			o.Sample = time.Duration(sampleHours * float64(time.Hour))
			if elastic && o.UsageStrength > 0 {
				return fmt.Errorf("--elastic and --usage-strength each compare runs: give one of them")
			}
			if study.SpotNodes > 0 || elastic {
				if o.UsageStrength > 0 {
					return fmt.Errorf("--spot-nodes and --usage-strength each compare two runs: give one of them")
				}
				if study.Policy, err = engine.ParseSpotPolicy(spotPolicy); err != nil {
					return fmt.Errorf("--spot-policy: %w", err)
				}
				return runSpotStudy(cmd, o, study, elastic, output)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			run := func(o sim.WorkloadOptions, label string) (*sim.WorkloadReport, error) {
				o.Progress = progress.Bar(cmd.ErrOrStderr(), int(o.Duration/time.Minute), label)
				return sim.RunWorkload(ctx, o)
			}
			if o.UsageStrength == 0 {
				rep, err := run(o, "simulating")
				if err != nil {
					return err
				}
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), rep)
				}
				writeWorkloadTable(cmd.OutOrStdout(), rep)
				return nil
			}
			without := o
			without.UsageStrength = 0
			base, err := run(without, "without history")
			if err != nil {
				return err
			}
			hist, err := run(o, "with history")
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]*sim.WorkloadReport{"withoutHistory": base, "withHistory": hist})
			}
			writeWorkloadTable(cmd.OutOrStdout(), hist)
			fmt.Fprintln(cmd.OutOrStdout())
			writeHistoryChart(cmd.OutOrStdout(), base, hist)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Nodes, "nodes", 2, "nodes in the cluster")
	f.IntVar(&o.GPUsPerNode, "gpus-per-node", 8, "GPUs per node")
	f.StringVar(&teams, "teams", "a:4,b:2,c:2,d:8", "teams as name:quota[:share of arrivals], comma-separated")
	f.Float64Var(&days, "days", 7, "simulated days")
	f.Float64Var(&o.Rate, "rate", 2, "job arrivals per hour, all teams together")
	f.StringVar(&sizes, "sizes", "1:60,2:15,4:15,8:10", "job sizes as gpus:weight, comma-separated")
	f.StringVar(&runtimes, "runtimes", "", "CSV with a runtime column in seconds (default: the Philly cluster's run times, embedded)")
	f.Uint64Var(&o.Seed, "seed", 42, "seed of the arrivals, sizes and run times")
	f.Float64Var(&sampleHours, "sample", 12, "hours per utilisation sample")
	f.Float64Var(&o.UsageStrength, "usage-strength", 0, "how much past use above quota lowers a team's part of idle GPUs: 0 ignores history, 1 is strong; above 0 the run is compared with one without history")
	f.DurationVar(&o.HalfLife, "usage-half-life", engine.DefaultUsageHalfLife, "how fast past use is forgotten: it counts half after this long")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.IntVar(&study.SpotNodes, "spot-nodes", 0, "make this many of the nodes spot capacity, and compare the run with one on on-demand nodes alone")
	f.Float64Var(&study.InterruptionsPerDay, "interruptions-per-day", 1, "how often, per spot node and day, its cloud takes it back (with --spot-nodes)")
	f.DurationVar(&study.Downtime, "spot-downtime", 15*time.Minute, "how long an interrupted spot node is gone before its replacement joins")
	f.Float64Var(&study.OnDemandPrice, "price-on-demand", 3, "price of an on-demand GPU-hour")
	f.Float64Var(&study.SpotPrice, "price-spot", 1, "price of a spot GPU-hour")
	f.StringVar(&spotPolicy, "spot-policy", "allowed", "which capacity jobs may use with --spot-nodes: allowed, first (spot first, on-demand after --on-demand-after) or never")
	f.DurationVar(&study.OnDemandAfter, "on-demand-after", 10*time.Minute, "with --spot-policy first: how long a job waits for spot capacity before it may use on-demand")
	f.BoolVar(&elastic, "elastic", false, "run each job of more than one GPU as that many one-GPU workers, and compare the runs with them rigid (a gang of all) and elastic (starting with half, growing as GPUs free, shrunk on reclaim or a spot notice, slower in proportion while smaller); with --spot-nodes, each on-demand and with spot")
	return cmd
}

// runSpotStudy plays the same arrivals on the cluster all on-demand and with some nodes
// spot (where study has spot nodes), each with the jobs as they are or, with elastic, with
// their workers rigid and elastic; and compares completion times and cost.
func runSpotStudy(cmd *cobra.Command, o sim.WorkloadOptions, study sim.SpotStudy, elastic bool, output string) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	onDemand := study
	onDemand.SpotNodes, onDemand.Policy = 0, engine.SpotAllowed // no spot to wait for
	type run struct {
		label, key, workers string
		s                   sim.SpotStudy
	}
	capacity := []run{{"on-demand only", "onDemand", "", onDemand}}
	if study.SpotNodes > 0 {
		capacity = append(capacity, run{"with spot", "spot", "", study})
	}
	runs := capacity
	if elastic {
		runs = nil
		for _, w := range []string{sim.WorkersRigid, sim.WorkersElastic} {
			for _, c := range capacity {
				runs = append(runs, run{c.label + ", " + w, c.key + strings.ToUpper(w[:1]) + w[1:], w, c.s})
			}
		}
	}
	var reps []*sim.WorkloadReport
	byKey := map[string]*sim.WorkloadReport{}
	for _, r := range runs {
		s := r.s
		o.Spot, o.Workers = &s, r.workers
		o.Progress = progress.Bar(cmd.ErrOrStderr(), int(o.Duration/time.Minute), r.label)
		rep, err := sim.RunWorkload(ctx, o)
		if err != nil {
			return err
		}
		reps = append(reps, rep)
		byKey[r.key] = rep
	}
	if output == "json" {
		return writeJSON(cmd.OutOrStdout(), byKey)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "%d jobs on %d nodes × %d GPUs over %s", reps[0].Jobs, o.Nodes, o.GPUsPerNode, o.Duration)
	if study.SpotNodes > 0 {
		fmt.Fprintf(out, "; spot: %d nodes, %g interruptions per node-day, back after %s; prices %g on-demand, %g spot per GPU-hour; spot policy %s",
			study.SpotNodes, study.InterruptionsPerDay, study.Downtime, study.OnDemandPrice, study.SpotPrice, study.Policy)
	}
	if elastic {
		fmt.Fprint(out, "; jobs of more than one GPU as one-GPU workers, rigid or elastic (from half)")
	}
	fmt.Fprint(out, "\n\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	grew := ""
	if elastic {
		grew = "\tELASTIC JOBS GROWN"
	}
	fmt.Fprintln(tw, "RUN\tDONE\tCOMPLETION P50\tP95\tMEAN\tINTERRUPTIONS\tJOBS STOPPED\tUTILISATION\tCOST\tSAVED"+grew)
	for i, r := range reps {
		preempted := 0
		for _, t := range r.Teams {
			preempted += t.Preemptions
		}
		saved := 1 - r.Cost.Cost/reps[0].Cost.Cost
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%.1f%%\t%.0f\t%.1f%%", runs[i].label, r.Completion.Done,
			r.Completion.P50, r.Completion.P95, r.Completion.Mean, r.Cost.Interruptions, preempted, 100*r.Mean, r.Cost.Cost, 100*saved)
		if elastic {
			fmt.Fprintf(tw, "\t%d of %d", r.Grew, r.Elastic)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeHistoryChart draws, per team, the GPU-hours received as a part of the fair share in
// the run without history and in the one with it; the bar's scale puts 100% at the mark.
func writeHistoryChart(out io.Writer, base, hist *sim.WorkloadReport) {
	const full, width = 40, 60 // columns for 100%, and at most
	bar := func(v float64) string {
		n := min(int(v*full+0.5), width)
		cells := []rune(strings.Repeat("█", n) + strings.Repeat(" ", max(width-n, 0)))
		if n <= full {
			cells[full] = '│'
		}
		return string(cells)
	}
	fmt.Fprintf(out, "RECEIVED OF FAIR SHARE (│ = 100%%) without history, and with strength %g, half-life %s\n", hist.UsageStrength, hist.HalfLife)
	for i, t := range hist.Teams {
		b := base.Teams[i]
		fmt.Fprintf(out, "  %-8s without %s %4.0f%%\n", t.Team, bar(b.Received), 100*b.Received)
		fmt.Fprintf(out, "  %-8s with    %s %4.0f%%\n", "", bar(t.Received), 100*t.Received)
	}
	preemptions := func(r *sim.WorkloadReport) (n int) {
		for _, t := range r.Teams {
			n += t.Preemptions
		}
		return n
	}
	fmt.Fprintf(out, "\nfrom the fair share, mean and worst team: without history %.1f%% and %.1f%%; with history %.1f%% and %.1f%%\n",
		100*base.MeanDeviation, 100*base.MaxDeviation, 100*hist.MeanDeviation, 100*hist.MaxDeviation)
	fmt.Fprintf(out, "utilisation %.1f%% and %.1f%%; preemptions %d and %d\n", 100*base.Mean, 100*hist.Mean, preemptions(base), preemptions(hist))
}

func parseTeams(s string) ([]sim.Team, error) {
	var out []sim.Team
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), ":")
		bad := fmt.Errorf("--teams: %q is not valid: write name:quota or name:quota:share, such as a:4 or a:4:2", part)
		if len(f) < 2 || len(f) > 3 || f[0] == "" {
			return nil, bad
		}
		q, err := strconv.ParseFloat(f[1], 64)
		if err != nil || q < 0 {
			return nil, bad
		}
		t := sim.Team{Name: f[0], Quota: q}
		if len(f) == 3 {
			if t.Share, err = strconv.ParseFloat(f[2], 64); err != nil || t.Share < 0 {
				return nil, bad
			}
		}
		out = append(out, t)
	}
	return out, nil
}

func parseSizes(s string) (map[int]float64, error) {
	out := map[int]float64{}
	for _, part := range strings.Split(s, ",") {
		g, wgt, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err1 := strconv.Atoi(g)
		v, err2 := strconv.ParseFloat(wgt, 64)
		if !ok || err1 != nil || err2 != nil || n < 1 || v < 0 {
			return nil, fmt.Errorf("--sizes: %q is not valid: write gpus:weight, such as 1:60,8:10", part)
		}
		out[n] = v
	}
	return out, nil
}

func writeWorkloadTable(out io.Writer, r *sim.WorkloadReport) {
	fmt.Fprintf(out, "%d jobs on %d GPUs; mean GPU utilisation %.1f%%\n\n", r.Jobs, r.GPUs, 100*r.Mean)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TEAM\tQUOTA\tJOBS\tDONE\tGPU-HOURS\tFAIR-SHARE GPU-HOURS\tRECEIVED\tWAIT P50\tWAIT P95\tPREEMPTIONS")
	for _, t := range r.Teams {
		fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%.0f\t%.0f\t%.0f%%\t%s\t%s\t%d\n", t.Team, t.Quota, t.Jobs, t.Completed,
			t.GPUHours, t.FairShareHours, 100*t.Received, t.WaitP50, t.WaitP95, t.Preemptions)
	}
	tw.Flush()
	fmt.Fprintln(out, "\nUTILISATION")
	for _, u := range r.Utilization {
		n := int(u.Utilization*40 + 0.5)
		fmt.Fprintf(out, "  %6.0fh %-40s %5.1f%%\n", u.Hour, strings.Repeat("█", n), 100*u.Utilization)
	}
}
