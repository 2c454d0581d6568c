package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// newClustersCmd: allot clusters, the worker clusters a manager dispatches to.
func newClustersCmd() *cobra.Command {
	var c *conn
	var output string
	cmd := &cobra.Command{
		Use:     "clusters",
		GroupID: "admin",
		Short:   "Worker clusters of a multi-cluster manager: health, GPUs, use and models",
		Long: `allot clusters lists the worker clusters the manager (the cluster of the current kubeconfig,
running allot scheduler --multicluster-manager) dispatches Jobs to: whether it reaches each and why
not, their GPU nodes and GPUs, how many GPUs no pod holds, and their GPU models
(docs/multicluster.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, c, output, func(ctx context.Context) ([]v1alpha1.WorkerCluster, error) {
				l, err := c.allot.AllotV1alpha1().WorkerClusters().List(ctx, metav1.ListOptions{})
				if err != nil {
					if meta.IsNoMatchError(err) || strings.Contains(err.Error(), "the server could not find the requested resource") {
						return nil, fmt.Errorf("this cluster has no WorkerCluster kind: it is not a multi-cluster manager (install Allot's CRDs, docs/multicluster.md)")
					}
					return nil, err
				}
				sort.Slice(l.Items, func(a, b int) bool { return l.Items[a].Name < l.Items[b].Name })
				return l.Items, nil
			}, func(out io.Writer, wcs []v1alpha1.WorkerCluster) error { return printClusters(out, wcs, time.Now()) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	c = addConn(cmd)
	return cmd
}

// printClusters writes one row per worker and, under a worker that is not ready, why.
func printClusters(out io.Writer, wcs []v1alpha1.WorkerCluster, now time.Time) error {
	if len(wcs) == 0 {
		_, err := fmt.Fprintln(out, "No worker clusters: register one with a WorkerCluster and its kubeconfig Secret (docs/multicluster.md).")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tREADY\tNODES\tGPUS\tFREE\tUSE\tMODELS\tLAST SEEN\t")
	var why []string
	for _, wc := range wcs {
		ready := "?"
		if c := meta.FindStatusCondition(wc.Status.Conditions, "Ready"); c != nil {
			ready = string(c.Status)
			if c.Status != metav1.ConditionTrue {
				ready = "False (" + c.Reason + ")"
				why = append(why, fmt.Sprintf("  %s: %s", wc.Name, c.Message))
			}
		}
		if wc.Spec.Paused {
			ready += ", paused"
		}
		seen := "never"
		if wc.Status.LastSeen != nil {
			seen = now.Sub(wc.Status.LastSeen.Time).Round(time.Second).String() + " ago"
		}
		used := float64(wc.Status.GPUs - wc.Status.FreeGPUs)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", wc.Name, ready, wc.Status.Nodes, wc.Status.GPUs, wc.Status.FreeGPUs,
			bar(used, used, float64(max(wc.Status.GPUs, 1)), 10), strings.Join(wc.Status.Models, ","), seen)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(why) > 0 {
		fmt.Fprintln(out, "\nNot ready:")
		fmt.Fprintln(out, strings.Join(why, "\n"))
	}
	return nil
}
