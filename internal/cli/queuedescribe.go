package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// newQueueDescribeCmd: allot queue describe NAME, one queue's rules and where it stands,
// node pool by node pool. Anyone who may read queues may run it (the chart's researcher
// role can): it reads the Queue alone.
func newQueueDescribeCmd() *cobra.Command {
	var c *conn
	var output string
	cmd := &cobra.Command{Use: "describe NAME", Short: "One queue: its rules, and its GPUs in each node pool (quota, fair share, allocated)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(cmd, c, output, func(ctx context.Context) (*v1alpha1.Queue, error) {
				q, err := c.allot.AllotV1alpha1().Queues().Get(ctx, args[0], metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("queue %q does not exist; queues: %s", args[0], strings.Join(inspect.QueueNames(ctx, c.allot), ", "))
				}
				return q, err
			}, printQueueDescribe)
		}}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	c = addConn(cmd)
	return cmd
}

// printQueueDescribe writes the queue's settings as fields, then its GPUs by node pool as
// a table: the pools divided apart (spec.gpu.pools) each with its own row, the other
// pools together in the first.
func printQueueDescribe(out io.Writer, q *v1alpha1.Queue) error {
	s := q.Spec
	field := func(name, value string) { fmt.Fprintf(out, "%-22s %s\n", name+":", value) }
	field("Name", q.Name)
	field("Parent", orNone(s.Parent, "(none: a top-level queue)"))
	field("Priority", strconv.Itoa(int(s.Priority)))
	field("Namespaces", orNone(strings.Join(s.Namespaces, ", "), "any namespace no other queue lists"))
	pools := "the default pool (nodes without " + v1alpha1.LabelNodePool + ")"
	if len(s.NodePools) > 0 {
		pools = strings.Join(s.NodePools, ", ") + " (tried in this order; work may name only these)"
	}
	field("Node pools", pools)
	for _, class := range slices.Sorted(maps.Keys(s.ClassNodePools)) {
		field("  for "+class, strings.Join(s.ClassNodePools[class], ", "))
	}
	if s.Spot != nil {
		spot := orNone(s.Spot.Policy, v1alpha1.SpotAllowed)
		if s.Spot.OnDemandAfter != nil {
			spot += ", on-demand after " + s.Spot.OnDemandAfter.Duration.String()
		}
		if s.Spot.InterruptionBudget != nil {
			spot += fmt.Sprintf(", %d interruptions survived", *s.Spot.InterruptionBudget)
		}
		field("Spot capacity", spot)
	}
	for _, d := range []struct {
		name string
		v    *metav1.Duration
	}{{"Reclaim min runtime", s.ReclaimMinRuntime}, {"Preempt min runtime", s.PreemptMinRuntime},
		{"Interactive limit", s.InteractiveTimeLimit}, {"Gang stale grace", s.GangStaleGracePeriod}} {
		if d.v != nil {
			field(d.name, d.v.Duration.String())
		}
	}
	field("Workloads", fmt.Sprintf("%d running, %d pending", q.Status.Running, q.Status.Pending))

	fmt.Fprintln(out, "\nGPUs by node pool:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tQUOTA\tLIMIT\tWEIGHT\tFAIR SHARE\tALLOCATED\tREQUESTED\t")
	first := "all pools"
	divided := inspect.QueuePools(*q)
	if len(divided) > 0 {
		first = "the others"
	}
	fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", first, s.GPU.Quota, optInt(s.GPU.Limit), weightOf(s.GPU.OverQuotaWeight),
		gpuAmount(queueGPUs(q.Status.FairShare)), gpuAmount(queueGPUs(q.Status.Allocated)), gpuAmount(queueGPUs(q.Status.Requested)),
		bar(queueGPUs(q.Status.Allocated), float64(s.GPU.Quota), max(1, queueGPUs(q.Status.FairShare), queueGPUs(q.Status.Allocated), float64(s.GPU.Quota)), 12))
	for _, p := range divided {
		scale := max(1, p.FairShare, p.Allocated, float64(p.Quota))
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Quota, optInt(p.Limit), weightOf(s.GPU.Pools[p.Name].OverQuotaWeight),
			gpuAmount(p.FairShare), gpuAmount(p.Allocated), gpuAmount(p.Requested), bar(p.Allocated, float64(p.Quota), scale, 12))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(divided) > 0 {
		fmt.Fprintln(out, "Pools with a row of their own are divided apart: each is guaranteed, borrowed and reclaimed by its own quota.")
	}
	return printKinds(out, []v1alpha1.Queue{*q})
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func optInt(p *int32) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(int(*p))
}

// weightOf shows an over-quota weight; unset, the quota stands for it.
func weightOf(p *int32) string {
	if p == nil {
		return "(quota)"
	}
	return strconv.Itoa(int(*p))
}
