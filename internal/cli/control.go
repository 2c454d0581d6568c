package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/admission"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/queueadmin"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/submission"
)

// podOf connects and picks a workload's pod for logs and exec.
func (c *conn) podOf(cmd *cobra.Command, workload, which string) (string, error) {
	if err := c.connect(cmd.Context()); err != nil {
		return "", err
	}
	w, err := inspect.Find(cmd.Context(), c.client, c.ns, workload)
	if err != nil {
		return "", err
	}
	return pickPod(w, which)
}

// pickPod chooses a workload's pod: --pod N (its index among the pods, or a name), else the
// first.
func pickPod(w *inspect.Workload, which string) (string, error) {
	if len(w.Pods) == 0 {
		return "", fmt.Errorf("%s has no pods yet", w.Name)
	}
	if which == "" {
		return w.Pods[0].Name, nil
	}
	var names []string
	for i, p := range w.Pods {
		if p.Name == which || strconv.Itoa(i) == which {
			return p.Name, nil
		}
		names = append(names, p.Name)
	}
	return "", fmt.Errorf("--pod %q: %s has pods %s (or give their index from 0)", which, w.Name, strings.Join(names, ", "))
}

func newLogsCmd() *cobra.Command {
	var c *conn
	var follow bool
	var pod string
	cmd := &cobra.Command{
		Use:     "logs NAME",
		GroupID: "work",
		Short:   "Print a workload's logs (its first pod, or --pod)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := c.podOf(cmd, args[0], pod)
			if err != nil {
				return err
			}
			if err := c.onRealNode(cmd.Context(), name, "logs"); err != nil {
				return err
			}
			stream, err := c.client.CoreV1().Pods(c.ns).GetLogs(name, &corev1.PodLogOptions{Follow: follow}).Stream(cmd.Context())
			if err != nil {
				return fmt.Errorf("logs of %s: %w (logs come from the node's kubelet, through the API server)", name, err)
			}
			defer stream.Close()
			_, err = io.Copy(cmd.OutOrStdout(), bufio.NewReader(stream))
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing as the logs grow")
	cmd.Flags().StringVar(&pod, "pod", "", "which pod: its name or index (distributed jobs)")
	c = addConn(cmd)
	return cmd
}

// onRealNode says, before the API server is asked for a pod's logs or a shell in it, when
// that cannot be: the pod is not on a node yet, or its node is one of allot up's
// simulated nodes, which run no containers (the API server would only answer that it
// found no address for their kubelet).
func (c *conn) onRealNode(ctx context.Context, pod, what string) error {
	p, err := c.client.CoreV1().Pods(c.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s of %s: %w", what, pod, err)
	}
	if p.Spec.NodeName == "" {
		return fmt.Errorf("no %s for %s: it is not running yet (allot describe says why it waits)", what, pod)
	}
	n, err := c.client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
	if err == nil && n.Labels[simnode.LabelSimulated] == "true" {
		return fmt.Errorf("no %s for %s: it runs on %s, a simulated node of allot up, and simulated nodes run no containers", what, pod, n.Name)
	}
	return nil
}

func newExecCmd() *cobra.Command {
	var c *conn
	var pod string
	var tty bool
	cmd := &cobra.Command{
		Use:     "exec NAME -- COMMAND [ARGS…]",
		GroupID: "work",
		Short:   "Run a command in a workload's container",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return fmt.Errorf("write allot exec NAME -- COMMAND")
			}
			return c.execIn(cmd, args[0], pod, args[1:], tty)
		},
	}
	cmd.Flags().StringVar(&pod, "pod", "", "which pod: its name or index")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "allocate a terminal")
	c = addConn(cmd)
	return cmd
}

// newBashCmd is Run:ai's "bash": a shell in a workload's container, on a terminal.
func newBashCmd() *cobra.Command {
	var c *conn
	var pod, shell string
	cmd := &cobra.Command{
		Use:     "bash NAME",
		GroupID: "work",
		Short:   "Open a shell in a workload's container (allot exec -t NAME -- bash)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.execIn(cmd, args[0], pod, []string{shell}, true)
		},
	}
	cmd.Flags().StringVar(&pod, "pod", "", "which pod: its name or index")
	cmd.Flags().StringVar(&shell, "shell", "bash", "the shell to run (sh where the image has no bash)")
	c = addConn(cmd)
	return cmd
}

// execIn runs command in the main container of the workload's pod, streaming this
// terminal's input and output.
func (c *conn) execIn(cmd *cobra.Command, workload, pod string, command []string, tty bool) error {
	name, err := c.podOf(cmd, workload, pod)
	if err != nil {
		return err
	}
	if err := c.onRealNode(cmd.Context(), name, "exec"); err != nil {
		return err
	}
	rc, err := c.flags.ToRESTConfig()
	if err != nil {
		return err
	}
	req := c.client.CoreV1().RESTClient().Post().Resource("pods").Name(name).Namespace(c.ns).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: command, Stdin: true, Stdout: true, Stderr: !tty, TTY: tty}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
	if err != nil {
		return err
	}
	err = exec.StreamWithContext(cmd.Context(), remotecommand.StreamOptions{Stdin: os.Stdin, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), Tty: tty})
	if err != nil {
		return fmt.Errorf("exec in %s: %w", name, err)
	}
	return nil
}

// newSuspendCmd makes suspend and resume: a Job (or JobSet, PyTorchJob, MPIJob, TrainJob,
// RayCluster, RayJob) is suspended by its own switch (its pods go, its place in the queue
// stays); a Deployment, StatefulSet or LeaderWorkerSet is scaled to zero and back.
func newSuspendCmd(resume bool) *cobra.Command {
	var c *conn
	verb := "suspend"
	if resume {
		verb = "resume"
	}
	cmd := &cobra.Command{
		Use:     verb + " NAME...",
		GroupID: "work",
		Short:   map[bool]string{false: "Stop a workload's pods and keep it, to resume later", true: "Start a suspended workload again"}[resume],
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctl, err := c.control(cmd.Context())
			if err != nil {
				return err
			}
			for _, name := range args {
				w, err := inspect.Find(cmd.Context(), c.client, c.ns, name)
				if err != nil {
					return err
				}
				msg, err := ctl.Suspend(cmd.Context(), w, resume)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), msg)
			}
			return nil
		},
	}
	c = addConn(cmd)
	return cmd
}

// newQueueCmd: allot queue create|edit|delete, for admins.
func newQueueCmd() *cobra.Command {
	q := &cobra.Command{Use: "queue", GroupID: "admin", Short: "Create, edit, describe and delete queues"}
	// The flags' values are read by name (flags, below), as queueadmin takes them.
	bind := func(cmd *cobra.Command) {
		fl := cmd.Flags()
		fl.Int("quota", 0, "GPUs guaranteed")
		fl.String("limit", "", "most GPUs the queue may hold (leave it out for no cap; on edit, none removes the cap)")
		fl.Int("weight", -1, "over-quota weight (-1: the quota)")
		fl.Int("priority", 0, "queues of higher priority get idle GPUs first")
		fl.String("parent", "", "the department this queue belongs to")
		fl.String("interactive-time-limit", "", "stop interactive workloads after this long, such as 4h")
		fl.String("reclaim-min-runtime", "", "a job of the queue is not reclaimed before it has run this long, such as 10m (default: the parent's)")
		fl.String("preempt-min-runtime", "", "a job of the queue is not preempted by a higher priority one of the queue before it has run this long (default: the parent's)")
		fl.StringSlice("idle-timeout", nil, "stop workloads whose GPUs stay idle this long, per class: interactive=2h,inference=30m (interactive ones suspended, inference ones scaled to zero; CLASS=none removes one)")
		fl.Int("idle-threshold", 0, "GPU utilisation in percent, 1 to 100, under which a GPU counts as idle for --idle-timeout (default 5; 0 on edit goes back to it)")
		fl.String("class", "", "the class of every workload of the queue: train, interactive or inference (pods naming another are refused; none on edit lets each workload name its own)")
		fl.StringSlice("namespaces", nil, "namespaces that may use the queue (default: any that no queue claims)")
		fl.StringSlice("node-pools", nil, "node pools the queue may use, in the order its workloads that name none try them (default: any, and such workloads run in the default pool)")
		fl.StringSlice("pool-quota", nil, "GPUs guaranteed in node pools divided apart, POOL=N: h100=4,a100=8 (POOL=none on edit takes the pool's quota away)")
		fl.StringSlice("pool-limit", nil, "most GPUs of a pool the queue may hold, POOL=N (POOL=none removes the cap)")
		fl.StringSlice("pool-weight", nil, "over-quota weight in a pool, POOL=N (POOL=none: the pool's quota)")
		fl.StringArray("class-node-pools", nil, "pools a class of work tries in order, CLASS=POOL,POOL: interactive=a100,h100 (repeat per class; CLASS=none removes it)")
		fl.String("host-paths", "", "directories of the node under which the queue's pods may mount paths (allot submit -v), comma-separated: /data,/scratch; none for no path of the node; any on edit removes the rule (the cluster's PodSecurity decides)")
	}
	// flags are the ones the user set, by name, with their values.
	flags := func(cmd *cobra.Command) queueadmin.Flags {
		out := queueadmin.Flags{}
		cmd.Flags().Visit(func(fl *pflag.Flag) {
			if !slices.Contains(queueadmin.Names, fl.Name) {
				return
			}
			if sv, ok := fl.Value.(pflag.SliceValue); ok {
				out[fl.Name] = sv.GetSlice()
			} else {
				out[fl.Name] = []string{fl.Value.String()}
			}
		})
		return out
	}

	var cc *conn
	create := &cobra.Command{Use: "create NAME --quota N [flags]", Short: "Create a queue", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cc.connect(cmd.Context()); err != nil {
				return err
			}
			if err := queueadmin.Create(cmd.Context(), cc.allot, args[0], flags(cmd)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s created\n", args[0])
			return nil
		}}
	bind(create)
	_ = create.MarkFlagRequired("quota")
	cc = addConn(create)

	var ec *conn
	edit := &cobra.Command{Use: "edit NAME [flags]", Short: "Change a queue's quota, limit, weight, …", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ec.connect(cmd.Context()); err != nil {
				return err
			}
			if err := queueadmin.Edit(cmd.Context(), ec.allot, args[0], flags(cmd)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s updated\n", args[0])
			return nil
		}}
	bind(edit)
	ec = addConn(edit)

	var dc *conn
	var force bool
	del := &cobra.Command{Use: "delete NAME...", Short: "Delete queues (refused while they hold work, unless --force)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := dc.connect(cmd.Context()); err != nil {
				return err
			}
			for _, name := range args {
				var err error
				if force {
					err = admission.ForceDelete(cmd.Context(), dc.allot, name)
				} else {
					err = dc.allot.AllotV1alpha1().Queues().Delete(cmd.Context(), name, metav1.DeleteOptions{})
				}
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("queue %q does not exist; queues: %s", name, strings.Join(inspect.QueueNames(cmd.Context(), dc.allot), ", "))
				} else if err != nil {
					return fmt.Errorf("refused: %s", submission.APIMessage(err))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s deleted\n", name)
			}
			return nil
		}}
	del.Flags().BoolVar(&force, "force", false, "delete even while the queue holds work: its running pods run on outside every queue's share, its pending ones wait for a queue")
	dc = addConn(del)
	q.AddCommand(create, edit, del, newQueueDescribeCmd())
	return q
}

// printQueueTop is allot top queues: each queue's GPUs and its workloads' pods.
func printQueueTop(w io.Writer, qs []v1alpha1.Queue) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tALLOCATED\tFAIR SHARE\tQUOTA\tUSE OF FAIR SHARE\tRUNNING\tPENDING")
	for _, q := range qs {
		alloc, fair := queueGPUs(q.Status.Allocated), queueGPUs(q.Status.FairShare)
		use := "-"
		if fair > 0 {
			use = fmt.Sprintf("%.0f%%", alloc/fair*100)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\n", q.Name, gpuAmount(alloc), gpuAmount(fair), q.Spec.GPU.Quota, use, q.Status.Running, q.Status.Pending)
	}
	return tw.Flush()
}
