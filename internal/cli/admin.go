package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

func queueGPUs(l corev1.ResourceList) float64 { return inspect.GPUs(l) }

func newQueuesCmd() *cobra.Command {
	var c *conn
	var output string
	cmd := &cobra.Command{
		Use:     "queues",
		GroupID: "admin",
		Short:   "Queues: quota, fair share, allocated, over quota and pending, with a bar each",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, c, output, func(ctx context.Context) ([]v1alpha1.Queue, error) { return inspect.Queues(ctx, c.dyn) }, printQueues)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	c = addConn(cmd)
	return cmd
}

func newTopCmd() *cobra.Command {
	top := &cobra.Command{Use: "top", GroupID: "admin", Short: "GPU use per node and GPU"}
	var c *conn
	var output string
	nodes := &cobra.Command{
		Use:   "nodes",
		Short: "Per node and GPU: allocated whole and fractional GPUs, which pods hold each, free memory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, c, output, func(ctx context.Context) ([]inspect.Node, error) { return inspect.Nodes(ctx, c.client) }, printNodes)
		},
	}
	nodes.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	c = addConn(nodes)
	var qc *conn
	var qoutput string
	queues := &cobra.Command{
		Use:   "queues",
		Short: "Per queue: GPUs allocated against fair share and quota, running and pending pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, qc, qoutput, func(ctx context.Context) ([]v1alpha1.Queue, error) { return inspect.Queues(ctx, qc.dyn) }, printQueueTop)
		},
	}
	queues.Flags().StringVarP(&qoutput, "output", "o", "table", "table, json or yaml")
	qc = addConn(queues)
	top.AddCommand(nodes, queues)
	return top
}

func newConfigCmd() *cobra.Command {
	cfg := &cobra.Command{Use: "config", GroupID: "work", Short: "The CLI's own settings"}
	cfg.AddCommand(&cobra.Command{
		Use:   "queue [NAME]",
		Short: "Show or set the default queue of allot submit",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := loadConfig()
			if len(args) == 0 {
				if c.Queue == "" {
					fmt.Fprintln(cmd.OutOrStdout(), "no default queue (allot config queue NAME sets one)")
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), c.Queue)
				}
				return nil
			}
			c.Queue = args[0]
			if err := saveConfig(c); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "default queue: %s (in %s)\n", c.Queue, configPath())
			return nil
		},
	})
	return cfg
}

func printQueues(out io.Writer, qs []v1alpha1.Queue) error {
	scale := 1.0
	for _, q := range qs {
		scale = max(scale, float64(q.Spec.GPU.Quota), queueGPUs(q.Status.FairShare), queueGPUs(q.Status.Allocated))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPARENT\tQUOTA\tFAIR SHARE\tALLOCATED\tOVER QUOTA\tPENDING\t")
	for _, q := range qs {
		parent := q.Spec.Parent
		if parent == "" {
			parent = "-"
		}
		alloc, quota := queueGPUs(q.Status.Allocated), float64(q.Spec.GPU.Quota)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", q.Name, parent, q.Spec.GPU.Quota, gpuAmount(queueGPUs(q.Status.FairShare)),
			gpuAmount(alloc), gpuAmount(max(0, alloc-quota)), q.Status.Pending, bar(alloc, quota, scale, 20))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, "█ within quota  ▒ borrowed over quota")
	return err
}

func printNodes(out io.Writer, ns []inspect.Node) error {
	var alloc, total float64
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGPU\tMODEL\tALLOCATED\tFREE MEMORY\tHELD BY")
	for _, n := range ns {
		total += float64(len(n.GPUs))
		alloc += n.Allocated
		fmt.Fprintf(tw, "%s\t\t%s\t%s/%d\t\t\n", n.Name, n.Model, gpuAmount(n.Allocated), len(n.GPUs))
		for _, g := range n.GPUs {
			var who []string
			for _, h := range g.Holders {
				if h.Share < 1 {
					who = append(who, fmt.Sprintf("%s (%s)", h.Pod, gpuAmount(h.Share)))
				} else {
					who = append(who, h.Pod)
				}
			}
			holders := strings.Join(who, ", ")
			if holders == "" {
				holders = "-"
			}
			fmt.Fprintf(tw, "\t%d\t\t%s %s\t%dMi\t%s\n", g.Index, bar(g.Used, 1, 1, 10), gpuAmount(g.Used), g.FreeMi, holders)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pct := 0.0
	if total > 0 {
		pct = alloc / total * 100
	}
	_, err := fmt.Fprintf(out, "Allocated/Total GPUs: %s/%s (%.0f%%)\n", gpuAmount(alloc), gpuAmount(total), pct)
	return err
}
