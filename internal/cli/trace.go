package cli

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/internal/progress"
	"github.com/allot-dev/allot/trace"
)

func newTraceCmd() *cobra.Command {
	var nodesPath, podsPath, seeds, policies, output, plotPath, order string
	var tune float64
	cmd := &cobra.Command{
		Use:   "trace --nodes NODES.csv --pods PODS.csv",
		Short: "Replay an Alibaba openb GPU-sharing trace and compare placement policies",
		Long: `Replay a cluster trace in the Alibaba "openb" format (Weng et al., USENIX ATC'23) through
the engine's placement, following the paper's protocol: the GPU nodes only, demand resampled
to --tune × GPU capacity, a seeded shuffle, one pod at a time placed immediately or never,
no departures, no migration. Reports the GPU allocation ratio at 100% and at the end of the
arrivals per policy (mean and spread over seeds) and the stranded GPU capacity no pod shape
of the trace could use. For the published pod lists the paper's FGD figure is shown beside.`,
		Example: `  allot sim trace --nodes traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv \
    --pods traces/alibaba-gpu-v2023/openb_pod_list_default.csv --plot default.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodesPath == "" || podsPath == "" {
				return fmt.Errorf("--nodes and --pods are required: an openb node list and pod list (CSV)")
			}
			if output != "table" && output != "json" && output != "csv" {
				return fmt.Errorf("-o %q is not supported: allowed values are table, json, csv", output)
			}
			if tune < 1 || tune > 10 {
				return fmt.Errorf("--tune %v is not allowed: the arrived demand is between 1 and 10 times capacity", tune)
			}
			if order != "shuffled" && order != "as-is" {
				return fmt.Errorf("--order %q is not allowed: shuffled (the paper's protocol) or as-is (the file's order, once)", order)
			}
			if order == "as-is" && !cmd.Flags().Changed("seeds") {
				seeds = "42" // one run per policy: the order is the file's
			}
			seedList, err := parseSeeds(seeds)
			if err != nil {
				return err
			}
			pols, err := parsePolicies(policies)
			if err != nil {
				return err
			}
			nodes, err := trace.ReadNodes(nodesPath)
			if err != nil {
				return err
			}
			pods, err := trace.ReadPods(podsPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			runs, err := trace.Replay(ctx, nodes, pods, trace.ReplayOptions{Policies: pols, Seeds: seedList, Tune: tune, AsIs: order == "as-is",
				Progress: progress.Bar(cmd.ErrOrStderr(), len(pols)*len(seedList), "replaying")})
			if err != nil {
				return err
			}
			list := trace.PodListName(podsPath)
			sums := trace.Summarize(runs, list)
			if plotPath != "" {
				title := fmt.Sprintf("openb %s: %d nodes, %d GPUs, mean of %d seeds", orDefault(list, podsPath), len(nodes), trace.Capacity(nodes)/engine.OneGPU, len(seedList))
				if err := trace.Plot(plotPath, title, sums, tune); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			switch output {
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"nodes": len(nodes), "gpus": trace.Capacity(nodes) / engine.OneGPU, "pods": len(pods),
					"tune": tune, "seeds": seedList, "policies": sums, "runs": runs})
			case "csv":
				return writeRunsCSV(out, runs)
			}
			writeTraceTable(out, sums, len(nodes), trace.Capacity(nodes), len(pods), tune, seedList)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&nodesPath, "nodes", "", "openb node list (CSV: sn, cpu_milli, memory_mib, gpu, model)")
	f.StringVar(&podsPath, "pods", "", "openb pod list (CSV: name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, …])")
	f.Float64Var(&tune, "tune", 1.3, "arrived GPU demand to reach, as a multiple of GPU capacity")
	f.StringVar(&seeds, "seeds", "42-51", "seeds: a range 42-51 or a list 1,2,3")
	f.StringVar(&policies, "policy", "random,best-fit,gpu-packing,fgd,default", "placement policies to compare: "+strings.Join(policyNames(), ", "))
	f.StringVarP(&output, "output", "o", "table", "output format: table, json or csv (one row per run and curve point)")
	f.StringVar(&order, "order", "shuffled", "shuffled: demand resampled to --tune and shuffled per seed (the paper's protocol); as-is: the pod list once, in its own order, to compare with another simulator's run of the same file")
	f.StringVar(&plotPath, "plot", "", "write allocation ratio against arrived demand to this file (.svg or .png)")
	return cmd
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func policyNames() []string { return append([]string{"default"}, engine.PlacementNames()...) }

func parsePolicies(s string) ([]engine.Placement, error) {
	var out []engine.Placement
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		p, err := engine.ParsePlacement(name)
		if err != nil || name == "" {
			return nil, fmt.Errorf("--policy: unknown policy %q; allowed values: %s", name, strings.Join(policyNames(), ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

func parseSeeds(s string) ([]uint64, error) {
	bad := fmt.Errorf("--seeds %q is not valid: give a range such as 42-51 or a list such as 1,2,3", s)
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, bad
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a || b-a >= 1000 {
				return nil, bad
			}
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	return out, nil
}

func writeTraceTable(out io.Writer, sums []trace.Summary, nodes int, capacity engine.MilliGPU, pods int, tune float64, seeds []uint64) {
	fmt.Fprintf(out, "%d nodes, %s GPUs, %d pods in the list; demand tuned to %.0f%%; %d seeds\n\n", nodes, capacity, pods, 100*tune, len(seeds))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "POLICY\tALLOC @100%%\tALLOC @%.0f%%\tSTRANDED @%.0f%%\tPAPER FGD @130%%\n", 100*tune, 100*tune)
	for _, s := range sums {
		paper := "-"
		if s.BeatsPaper != nil {
			mark := "below"
			if *s.BeatsPaper {
				mark = "beats"
			}
			paper = fmt.Sprintf("%.2f%% (%s)", 100*s.Published, mark)
		}
		fmt.Fprintf(tw, "%s\t%.2f%% ± %.2f\t%.2f%% ± %.2f\t%.2f%%\t%s\n", s.Policy, 100*s.At100Mean, 100*s.At100SD,
			100*s.AtEndMean, 100*s.AtEndSD, 100*s.Stranded, paper)
	}
	tw.Flush()
}

func writeRunsCSV(out io.Writer, runs []trace.Run) error {
	w := csv.NewWriter(out)
	_ = w.Write([]string{"policy", "seed", "arrived", "allocated"})
	for _, r := range runs {
		for _, p := range r.Curve {
			_ = w.Write([]string{r.Policy, strconv.FormatUint(r.Seed, 10), strconv.FormatFloat(p.Arrived, 'f', 4, 64), strconv.FormatFloat(p.Allocated, 'f', 6, 64)})
		}
	}
	w.Flush()
	return w.Error()
}

// newVariantCmd derives a pod list from a published one: more CPU-only pods, or fractional
// pods carrying more of the GPU demand, for mixes the published family does not cover.
func newVariantCmd() *cobra.Command {
	var podsPath string
	var v trace.Variant
	cmd := &cobra.Command{
		Use:   "variant --pods PODS.csv [--cpu-only FACTOR] [--sharing PART] [--seed N]",
		Short: "Derive an openb pod list with more CPU-only pods or more GPU sharing, seeded",
		Long: `Write to standard output a pod list derived from an openb one: --cpu-only 2 draws twice as
many CPU-only pods (with replacement, from the list's own); --sharing 0.8 leaves whole-GPU pods
out at random until fractional pods carry 80% of the GPU demand. Only proportions change, as
a replay resamples the list to its target demand anyway. The same --seed gives the same list.`,
		Example: `  allot sim variant --pods traces/alibaba-gpu-v2023/openb_pod_list_default.csv --cpu-only 2 > cpu2x.csv
  allot sim variant --pods traces/alibaba-gpu-v2023/openb_pod_list_default.csv --sharing 0.8 > share80.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if podsPath == "" {
				return fmt.Errorf("--pods is required: an openb pod list (CSV)")
			}
			if v.CPUOnly == 0 && v.Sharing == 0 {
				return fmt.Errorf("nothing to change: give --cpu-only FACTOR or --sharing PART (or both)")
			}
			pods, err := trace.ReadPods(podsPath)
			if err != nil {
				return err
			}
			out, err := trace.Derive(pods, v)
			if err != nil {
				return err
			}
			return trace.WritePods(cmd.OutOrStdout(), out)
		},
	}
	cmd.Flags().StringVar(&podsPath, "pods", "", "openb pod list to derive from")
	cmd.Flags().Float64Var(&v.CPUOnly, "cpu-only", 0, "factor on the number of CPU-only pods (2: twice as many)")
	cmd.Flags().Float64Var(&v.Sharing, "sharing", 0, "part of the GPU demand fractional pods carry, 0 to 1 (0: as in the list)")
	cmd.Flags().Uint64Var(&v.Seed, "seed", 1, "seed of the draws")
	return cmd
}
