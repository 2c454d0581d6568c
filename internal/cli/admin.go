package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submission"
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
			var cluster float64
			return show(cmd, c, output, func(ctx context.Context) ([]v1alpha1.Queue, error) {
				// The cluster's GPUs, not who holds them: a researcher may read the nodes
				// (the chart's researcher role) but not every namespace's pods.
				nodes, err := inspect.EmptyNodes(ctx, c.client)
				switch {
				case apierrors.IsForbidden(err):
					cluster = -1 // unread: the bars' scale is the queues' own largest figure
				case err != nil:
					return nil, err
				}
				for _, n := range nodes {
					if n.Accelerator == "" { // the bars' scale is NVIDIA's GPUs
						cluster += float64(len(n.GPUs))
					}
				}
				return inspect.Queues(ctx, c.allot)
			}, func(out io.Writer, qs []v1alpha1.Queue) error { return printQueues(out, qs, cluster) })
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
			return show(cmd, c, output, func(ctx context.Context) ([]inspect.Node, error) { return inspect.PlacedNodes(ctx, c.client, c.allot) }, printNodes)
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
			return show(cmd, qc, qoutput, func(ctx context.Context) ([]v1alpha1.Queue, error) { return inspect.Queues(ctx, qc.allot) }, printQueueTop)
		},
	}
	queues.Flags().StringVarP(&qoutput, "output", "o", "table", "table, json or yaml")
	qc = addConn(queues)
	top.AddCommand(nodes, queues)
	return top
}

func newConfigCmd() *cobra.Command {
	cfg := &cobra.Command{Use: "config", GroupID: "work", Short: "The CLI's own settings"}
	var qc *conn // set below, once the command exists to carry its flags
	queue := &cobra.Command{
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
			// The queue is checked where a cluster is at hand: a misspelt default would
			// only fail at the next submit. Without one (configuring before allot up),
			// it is kept and said so.
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			if err := qc.connect(ctx); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "queue %s not checked: %v\n", args[0], err)
			} else if err := submission.QueueExists(ctx, qc.allot, args[0]); err != nil {
				return err
			}
			c.Queue = args[0]
			if err := saveConfig(c); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "default queue: %s (in %s)\n", c.Queue, configPath())
			return nil
		},
	}
	qc = addConn(queue)
	cfg.AddCommand(queue)
	return cfg
}

// printQueues shows the queue tree, children indented under their parent, each with a
// bar on one scale for all: the cluster's GPUs, so that bars compare between queues and
// between runs. Quotas that promise more than there is are warned of.
func printQueues(out io.Writer, qs []v1alpha1.Queue, clusterGPUs float64) error {
	scale := clusterGPUs
	if scale <= 0 {
		scale = 1
		for _, q := range qs {
			scale = max(scale, float64(q.Spec.GPU.Quota), queueGPUs(q.Status.FairShare), queueGPUs(q.Status.Allocated))
		}
	}
	kids := map[string][]v1alpha1.Queue{}
	known := map[string]bool{}
	for _, q := range qs {
		known[q.Name] = true
	}
	for _, q := range qs {
		parent := q.Spec.Parent
		if !known[parent] {
			parent = "" // an unknown parent: shown at the top, its reason in the scheduler's
		}
		kids[parent] = append(kids[parent], q)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tQUOTA\tLIMIT\tFAIR SHARE\tALLOCATED\tOVER QUOTA\tPAST USE\tPENDING\t")
	var warnings []string
	seen := map[string]bool{}
	var walk func(parent string, depth int, quota int64)
	walk = func(parent string, depth int, quota int64) {
		list := kids[parent]
		sort.Slice(list, func(a, b int) bool { return list[a].Name < list[b].Name })
		var sum int64
		for _, q := range list {
			sum += int64(q.Spec.GPU.Quota)
		}
		switch {
		case parent != "" && sum > quota:
			warnings = append(warnings, fmt.Sprintf("warning: the quotas of %s's child queues add up to %d GPUs, more than its own quota of %d", parent, sum, quota))
		case parent == "" && clusterGPUs > 0 && float64(sum) > clusterGPUs:
			warnings = append(warnings, fmt.Sprintf("warning: the top-level quotas add up to %d GPUs, more than the cluster's %s: not all of them can be met at once", sum, gpuAmount(clusterGPUs)))
		}
		for _, q := range list {
			if seen[q.Name] {
				continue // a cycle of parents: each queue once
			}
			seen[q.Name] = true
			limit := "-"
			if q.Spec.GPU.Limit != nil {
				limit = strconv.FormatInt(int64(*q.Spec.GPU.Limit), 10)
			}
			alloc, quota := queueGPUs(q.Status.Allocated), float64(q.Spec.GPU.Quota)
			fmt.Fprintf(tw, "%s%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", strings.Repeat("  ", depth), q.Name, q.Spec.GPU.Quota, limit,
				gpuAmount(queueGPUs(q.Status.FairShare)), gpuAmount(alloc), gpuAmount(max(0, alloc-quota)), pastUse(q.Status.Usage),
				q.Status.Pending, bar(alloc, quota, scale, 20))
			walk(q.Name, depth+1, int64(q.Spec.GPU.Quota))
		}
	}
	walk("", 0, 0)
	if err := tw.Flush(); err != nil {
		return err
	}
	if clusterGPUs > 0 {
		fmt.Fprintf(out, "█ within quota  ▒ borrowed over quota  (bar width: the cluster's %s GPUs)\n", gpuAmount(scale))
	} else {
		why := "the cluster has no GPU node"
		if clusterGPUs < 0 {
			why = "you may not read the nodes"
		}
		fmt.Fprintf(out, "█ within quota  ▒ borrowed over quota  (bar width: %s GPUs, the largest figure above: %s)\n", gpuAmount(scale), why)
	}
	fmt.Fprintln(out, "PAST USE: GPU-hours above quota, each halved per half-life since (allot scheduler --usage-half-life)")
	for _, w := range warnings {
		fmt.Fprintln(out, w)
	}
	if err := printPools(out, qs, scale); err != nil {
		return err
	}
	return printKinds(out, qs)
}

// printPools shows, where any queue has them, each queue's GPUs of each node pool divided
// apart: its quota of the pool (spec.gpu.pools), fair share and allocation there, which
// its status keys pool.allot.dev/<pool>, with a bar on the same scale as the queues'.
func printPools(out io.Writer, qs []v1alpha1.Queue, scale float64) error {
	var lines []string
	for _, q := range qs {
		for _, p := range inspect.QueuePools(q) {
			limit := "-"
			if p.Limit != nil {
				limit = strconv.Itoa(int(*p.Limit))
			}
			lines = append(lines, fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s", q.Name, p.Name, p.Quota, limit,
				gpuAmount(p.FairShare), gpuAmount(p.Allocated), gpuAmount(max(0, p.Allocated-float64(p.Quota))), bar(p.Allocated, float64(p.Quota), scale, 20)))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nNODE POOLS DIVIDED APART (each with its own quotas; a queue's line above counts the other pools' GPUs)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPOOL\tQUOTA\tLIMIT\tFAIR SHARE\tALLOCATED\tOVER QUOTA\t")
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	return tw.Flush()
}

// printKinds shows, where any queue has them, each queue's devices of other vendors'
// kinds: its quota (spec.accelerators), fair share and allocation, which its status keys
// by the kind's first resource.
func printKinds(out io.Writer, qs []v1alpha1.Queue) error {
	kindOf := map[corev1.ResourceName]string{} // first resource → kind, of the kinds the CLI knows
	resOf := map[string]corev1.ResourceName{}
	for _, k := range convert.DefaultAccelerators() {
		kindOf[k.Resources[0]], resOf[k.Name] = k.Name, k.Resources[0]
	}
	var lines []string
	for _, q := range qs {
		found := map[string]corev1.ResourceName{}
		for name := range q.Spec.Accelerators {
			found[name] = resOf[name]
		}
		for _, l := range []corev1.ResourceList{q.Status.FairShare, q.Status.Allocated, q.Status.Requested} {
			for r := range l {
				if r == corev1.ResourceName(v1alpha1.GPUResource) || r == corev1.ResourceCPU || r == corev1.ResourceMemory ||
					strings.HasPrefix(string(r), v1alpha1.PoolStatusPrefix) {
					continue
				}
				name := kindOf[r]
				if name == "" {
					name = string(r) // a kind defined on the scheduler: its resource is its name here
				}
				found[name] = r
			}
		}
		names := make([]string, 0, len(found))
		for name := range found {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			quota, limit := "-", "-"
			if d, ok := q.Spec.Accelerators[name]; ok {
				quota = strconv.Itoa(int(d.Quota))
				if d.Limit != nil {
					limit = strconv.Itoa(int(*d.Limit))
				}
			}
			r := found[name]
			lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", q.Name, name, quota, limit,
				gpuAmount(inspect.Devices(q.Status.FairShare, r)), gpuAmount(inspect.Devices(q.Status.Allocated, r)), gpuAmount(inspect.Devices(q.Status.Requested, r))))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nOTHER ACCELERATORS (whole devices of each kind, apart from NVIDIA's GPUs)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tKIND\tQUOTA\tLIMIT\tFAIR SHARE\tALLOCATED\tREQUESTED")
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	return tw.Flush()
}

// pastUse shows a queue's decayed use above quota in GPU-hours; "-" before the scheduler
// has counted any.
func pastUse(u *v1alpha1.QueueUsage) string {
	if u == nil {
		return "-"
	}
	return fmt.Sprintf("%s GPU-h", gpuAmount(math.Round(float64(u.GPUSeconds)/360)/10))
}

func printNodes(out io.Writer, ns []inspect.Node) error {
	var alloc, total float64
	// Other vendors' devices are totalled by kind, apart from NVIDIA's GPUs.
	kindAlloc, kindTotal := map[string]float64{}, map[string]int{}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGPU\tMODEL\tALLOCATED\tUTILISATION\tFREE MEMORY\tHELD BY")
	// With a Topology the nodes come grouped by it: a line per domain as it begins, with
	// what its nodes have allocated, and the nodes indented under the narrowest.
	path := func(n inspect.Node, k int) string {
		var b strings.Builder
		for _, p := range n.Topology[:k+1] {
			b.WriteString(p.Domain + "\x00")
		}
		return b.String()
	}
	domAlloc, domTotal := map[string]float64{}, map[string]int{}
	for _, n := range ns {
		if n.Accelerator != "" {
			continue // a domain's line counts NVIDIA's GPUs, as the total below
		}
		for k := range n.Topology {
			domAlloc[path(n, k)] += n.Allocated
			domTotal[path(n, k)] += len(n.GPUs)
		}
	}
	var prev *inspect.Node
	for i, n := range ns {
		for k, p := range n.Topology {
			if prev != nil && len(prev.Topology) == len(n.Topology) && path(*prev, k) == path(n, k) {
				continue
			}
			domain := p.Domain
			if domain == "" {
				domain = "(none)"
			}
			fmt.Fprintf(tw, "%s%s %s\t\t\t%s/%d\t\t\t\n", strings.Repeat("  ", k), p.Level, domain, gpuAmount(domAlloc[path(n, k)]), domTotal[path(n, k)])
		}
		prev = &ns[i]
		if n.Accelerator == "" {
			total += float64(len(n.GPUs))
			alloc += n.Allocated
		} else {
			kindAlloc[n.Accelerator] += n.Allocated
			kindTotal[n.Accelerator] += len(n.GPUs)
		}
		model := n.Model
		if n.Accelerator != "" {
			model = strings.TrimSpace(model + " [" + n.Accelerator + "]") // the kind of its devices
		}
		switch n.Sharing {
		case "":
		case v1alpha1.SharingNone:
			model += " [sharing not enforced]"
		default:
			model += " [sharing: " + n.Sharing
			if n.Compute != "" && n.Compute != v1alpha1.ComputeCapped {
				model += ", compute " + n.Compute // capped, the default, goes unsaid
			}
			model += "]"
		}
		if n.DRA {
			model += " [DRA]" // its GPUs are claimed through ResourceClaims
		}
		fmt.Fprintf(tw, "%s%s\t\t%s\t%s/%d\t\t\t\n", strings.Repeat("  ", len(n.Topology)), n.Name, model, gpuAmount(n.Allocated), len(n.GPUs))
		for _, g := range n.GPUs {
			var who []string
			for _, h := range g.Holders {
				if g.MIG != nil {
					who = append(who, fmt.Sprintf("%s (%s)", h.Pod, g.MIG.Held(h.Pod))) // its instances, as the layout below names them
				} else if h.Share < 1 {
					who = append(who, fmt.Sprintf("%s (%s)", h.Pod, gpuAmount(h.Share)))
				} else {
					who = append(who, h.Pod)
				}
			}
			holders := strings.Join(who, ", ")
			if holders == "" {
				holders = "-"
			}
			if g.Cordoned != "" {
				holders = "CORDONED: " + g.Cordoned + "; " + holders
			}
			if g.Unhealthy != "" {
				holders = "FAILED: " + g.Unhealthy + "; " + holders
			}
			util := "-" // no agent reports for the node
			if g.Utilization != nil {
				util = fmt.Sprintf("%d%%", *g.Utilization)
			}
			index := strconv.Itoa(g.Index)
			if g.Device != "" {
				index += " " + g.Device // the device's name in its ResourceSlice
			}
			if g.MIG != nil {
				index += " MIG" // given out as the instances listed below the table
			}
			fmt.Fprintf(tw, "\t%s\t\t%s %s\t%s\t%s\t%s\n", index, bar(g.Used, 1, 1, 10), gpuAmount(g.Used), util, gib(g.FreeMi), holders)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pct := 0.0
	if total > 0 {
		pct = alloc / total * 100
	}
	if _, err := fmt.Fprintf(out, "Allocated/Total GPUs: %s/%s (%.0f%%)\n", gpuAmount(alloc), gpuAmount(total), pct); err != nil {
		return err
	}
	kinds := make([]string, 0, len(kindTotal))
	for k := range kindTotal {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if _, err := fmt.Fprintf(out, "Allocated/Total %s devices: %s/%d\n", k, gpuAmount(kindAlloc[k]), kindTotal[k]); err != nil {
			return err
		}
	}
	// Each warning once, with the nodes it is about (not enforced; on trust).
	byWarning := map[string][]string{}
	var warnings []string
	for _, n := range ns {
		if n.SharingWarning == "" {
			continue
		}
		if _, seen := byWarning[n.SharingWarning]; !seen {
			warnings = append(warnings, n.SharingWarning)
		}
		byWarning[n.SharingWarning] = append(byWarning[n.SharingWarning], n.Name)
	}
	for _, w := range warnings {
		if _, err := fmt.Fprintf(out, "On %s: %s.\n", strings.Join(byWarning[w], ", "), w); err != nil {
			return err
		}
	}
	return printMIG(out, ns)
}

// printMIG lists, under the nodes' table and only where a GPU is in MIG mode, each such
// GPU's layout: an instance a row (its profile at its first memory slice), who holds it,
// and on a GPU Allot lays out the slices still free to lay out. A table of its own keeps
// the nodes' table one row per GPU.
func printMIG(out io.Writer, ns []inspect.Node) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	shown := false
	for _, n := range ns {
		name := n.Name
		for _, g := range n.GPUs {
			l := g.MIG
			if l == nil {
				continue
			}
			if !shown {
				fmt.Fprintln(out, "\nMIG: GPUs given out as instances (PROFILE@SLICE: the first memory slice it takes)")
				fmt.Fprintln(tw, "NODE\tGPU\tLAYOUT\tINSTANCE\tHELD BY")
				shown = true
			}
			layout := "fixed, " + l.Model // an admin's: pods take the instances it has
			if l.Dynamic {
				layout = "dynamic, " + l.Model // Allot makes and destroys instances as pods need them
			}
			first := true
			row := func(instance, holder string) {
				if first {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", name, g.Index, layout, instance, holder)
					name, first = "", false
					return
				}
				fmt.Fprintf(tw, "\t\t\t%s\t%s\n", instance, holder)
			}
			for _, in := range l.Instances {
				switch {
				case in.Making:
					row(in.Name(), "being made for "+in.Pod)
				case in.Pod != "":
					row(in.Name(), in.Pod)
				case in.InUse:
					row(in.Name(), "in use, by no pod of Allot's")
				default:
					row(in.Name(), "idle")
				}
			}
			if free := l.FreeSlices(); len(free) > 0 {
				what := "not laid out" // a fixed layout gives nothing there
				if l.Dynamic {
					what = "free to lay out"
				}
				row("slices "+strings.Join(free, ", "), what)
			}
			if len(l.Instances) == 0 && len(l.FreeSlices()) == 0 {
				row("-", "no instance")
			}
		}
	}
	if !shown {
		return nil
	}
	return tw.Flush()
}

// gib writes MiB as GiB, with one decimal when it is not whole.
func gib(mi int64) string {
	return strconv.FormatFloat(math.Round(float64(mi)/1024*10)/10, 'f', -1, 64) + " GiB"
}
