package cli

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/kube/consumption"
	"github.com/allot-dev/allot/kube/inspect"
)

// newReportCmd: allot report, the GPU-hours given and used over a period, from the days the
// scheduler keeps (kube/consumption).
func newReportCmd() *cobra.Command {
	var c *conn
	var from, to, by, output string
	var prices []string
	cmd := &cobra.Command{
		Use:     "report [--from DATE] [--to DATE] [--by day,queue,department,user,pool,model] [-o table|csv|json]",
		GroupID: "admin",
		Short:   "GPU-hours given and used per queue, user, node pool or GPU model, over a period; with prices, their cost",
		Long: `allot report adds up the GPU-hours the scheduler counted, day by day (UTC), into the
ConfigMaps allot-usage-DATE in allot-system: GPU-hours given to each running pod (a share of a
GPU counts as that share), and of those, where the GPUs' agent reports their utilisation, the
busy part (USED) and the share of busy time (UTIL). --price KEY=PRICE gives a price per
GPU-hour for a node pool or a GPU model (a pool's price first), and adds a COST column;
without it, the prices the chart was given (consumption.prices: the ConfigMap allot-prices in
allot-system) are used where there are any.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "table", "csv", "json":
			default:
				return fmt.Errorf("-o %q is not allowed: table, csv or json", output)
			}
			first, last, err := consumption.Dates(from, to, time.Now())
			if err != nil {
				return err
			}
			dims := strings.Split(by, ",")
			for i := range dims {
				dims[i] = strings.TrimSpace(dims[i])
			}
			price, err := parsePrices(prices)
			if err != nil {
				return err
			}
			if err := c.connect(cmd.Context()); err != nil {
				return err
			}
			days, err := consumption.Read(cmd.Context(), c.client, first, last)
			if err != nil {
				return err
			}
			var parents map[string]string
			if slices.Contains(dims, "department") {
				// A queue's department is its top-level ancestor, as the Queues are now.
				qs, err := inspect.Queues(cmd.Context(), c.allot)
				if err != nil {
					return fmt.Errorf("--by department reads the queue tree: %w", err)
				}
				parents = map[string]string{}
				for _, q := range qs {
					parents[q.Name] = q.Spec.Parent
				}
			}
			groups, err := consumption.Sum(days, dims, parents)
			if err != nil {
				return err
			}
			source := "--price"
			if len(price) == 0 {
				// The chart's consumption.prices, where it was given some.
				if price, err = consumption.Prices(cmd.Context(), c.client); err != nil {
					return err
				}
				source = "the prices in ConfigMap allot-system/" + consumption.PricesName + " (the chart's consumption.prices; --price overrides them)"
			}
			var costs []float64
			if len(price) > 0 {
				if costs, err = consumption.Costs(days, dims, parents, groups, price); err != nil {
					return fmt.Errorf("%s: %w", source, err)
				}
			}
			return printReport(cmd.OutOrStdout(), output, first, last, dims, groups, costs, len(days))
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first day, such as 2026-12-01 (default: the first of --to's month)")
	cmd.Flags().StringVar(&to, "to", "", "last day, included (default: today, UTC)")
	cmd.Flags().StringVar(&by, "by", "queue", "group by one or more of day, queue, department (a queue's top-level ancestor), user, pool, model, comma-separated")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, csv or json")
	cmd.Flags().StringSliceVar(&prices, "price", nil, "price per GPU-hour of a node pool or GPU model: h100=4.5,NVIDIA-A100-SXM4-80GB=2.1")
	c = addConn(cmd)
	return cmd
}

func parsePrices(values []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, v := range values {
		k, p, ok := strings.Cut(v, "=")
		f, err := strconv.ParseFloat(p, 64)
		if !ok || k == "" || err != nil || f < 0 {
			return nil, fmt.Errorf("--price %q is not allowed: POOL_OR_MODEL=PRICE per GPU-hour, such as h100=4.5", v)
		}
		out[k] = f
	}
	return out, nil
}

func hours(secs float64) string { return strconv.FormatFloat(secs/3600, 'f', 2, 64) }

func printReport(out io.Writer, format, first, last string, dims []string, groups []consumption.Group, costs []float64, days int) error {
	header := append([]string(nil), dims...)
	for i := range header {
		header[i] = strings.ToUpper(header[i])
	}
	header = append(header, "GPU-HOURS", "MEASURED", "USED", "UTIL")
	if costs != nil {
		header = append(header, "COST")
	}
	var rows [][]string
	for i, g := range groups {
		util := "-"
		if g.Measured > 0 {
			util = fmt.Sprintf("%.0f%%", 100*g.Used/g.Measured)
		}
		row := append(append([]string(nil), g.By...), hours(g.Allocated), hours(g.Measured), hours(g.Used), util)
		if costs != nil {
			row = append(row, strconv.FormatFloat(costs[i], 'f', 2, 64))
		}
		rows = append(rows, row)
	}
	switch format {
	case "json":
		type line struct {
			By        map[string]string `json:"by"`
			GPUHours  float64           `json:"gpuHours"`
			Measured  float64           `json:"measuredGPUHours"`
			UsedHours float64           `json:"usedGPUHours"`
			Cost      *float64          `json:"cost,omitempty"`
		}
		lines := []line{}
		for i, g := range groups {
			l := line{By: map[string]string{}, GPUHours: g.Allocated / 3600, Measured: g.Measured / 3600, UsedHours: g.Used / 3600}
			for k, d := range dims {
				l.By[d] = g.By[k]
			}
			if costs != nil {
				l.Cost = &costs[i]
			}
			lines = append(lines, l)
		}
		return printData(out, "json", map[string]any{"from": first, "to": last, "lines": lines})
	case "csv":
		w := csv.NewWriter(out)
		_ = w.Write(header)
		_ = w.WriteAll(rows)
		return w.Error()
	}
	fmt.Fprintf(out, "GPU consumption from %s to %s (UTC days; %d with figures)\n", first, last, days)
	if len(rows) == 0 {
		fmt.Fprintln(out, "nothing counted in these days")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "MEASURED: the GPU-hours whose utilisation the GPUs' agent reported; USED: their busy part; UTIL: USED / MEASURED")
	return nil
}
