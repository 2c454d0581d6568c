package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/internal/progress"
	"github.com/allot-dev/allot/kube/bench"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/scheduler"
)

func newBenchCmd() *cobra.Command {
	var kubeconfig, queue string
	var pods, nodes, rounds int
	var mode, against, scenarioName, asScheduler string
	var sopts bench.ScenarioOptions
	cmd := &cobra.Command{
		Use:     "bench",
		GroupID: "run",
		Short:   "Measure scheduling throughput: submit one-GPU pods and time their binding",
		Long: `Submit --pods one-GPU pods to a running Allot (a real cluster, or allot up) in a queue of
their own, watch them bind, and print pods bound per second and the p50/p99 time from
creation to binding. The pods are deleted afterwards.

--mode backlog closes the queue (limit 0) while the pods are submitted and opens it once
the scheduler counts them all: the figures are then from the opening to each binding, the
scheduler draining a backlog rather than keeping pace with the API server's creations.
--mode create submits pods that no scheduler owns (no webhook, no binding) and times only
their creation: the most pods per second this API server can take, whatever schedules them.

--against KUBE-SCHEDULER runs upstream kube-scheduler and Allot in turn, each on a fresh
embedded API server with --nodes simulated nodes: --mode stream as above; --mode backlog
creates the pods before the scheduler starts and times from its start (listing, first
cycle, binds), and prints how close to the API server's own creation rate each drains.
Each run also shows the time to its first binding (a scheduler's start) and its pods per
second from the first binding to the last (its binds alone). Each round also times the
bench binding the pods itself, deciding nothing ("direct binds"): the most any scheduler
could show on that API server, the ceiling; the order is reversed every other round, so
Allot's runs and the ceiling's alternate. A last table gives each scheduler's pods/s as a
part of the ceiling's. --mode both runs stream, then backlog, in one sitting.

--scenario NAME runs one of the scale scenarios, each on a fresh embedded API server with
--nodes simulated nodes of --gpus-per-node GPUs and Allot's scheduler as a process of its
own, and prints its phases (creation, first and last binding, evictions issued and done),
the scheduler's API requests by verb and resource, and its peak memory:
  fill         an empty cluster filled with one-GPU pods, beside pods waiting in a closed queue
  big-gang     one gang of a pod per node, two GPUs each
  reclaim-one  a full cluster of borrowed GPUs; one-GPU pods of a queue with quota, one at a time
  reclaim-all  as many one-GPU pods of that queue as the cluster has GPUs, all reclaimed
  reclaim-big  one gang of whole nodes, half the cluster, reclaimed
  restart      a scheduler restart among 28 pods a node (default 5000 nodes: 140,000 pods)
docs/performance.md has the shapes and the figures.`,
		Example: "  allot up --nodes 250 --gpus-per-node 8 --data-dir /tmp/bench &\n  allot bench --kubeconfig /tmp/bench/kubeconfig --pods 2000\n  allot bench --kubeconfig /tmp/bench/kubeconfig --pods 2000 --mode backlog\n" +
			"  make bench-kube   # allot bench --against bin/kube-scheduler --nodes 250 --pods 2000\n" +
			"  make bench-kube MODE=backlog\n  make bench-kube MODE=both\n" +
			"  allot bench --scenario fill\n  allot bench --scenario reclaim-one --nodes 50",
		Args: func(cmd *cobra.Command, args []string) error {
			if asScheduler != "" {
				return nil // allot scheduler's flags, after --
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if asScheduler != "" {
				return runBenchScheduler(cmd, asScheduler, sopts.CPUProfile, args)
			}
			if scenarioName != "" {
				s, err := bench.FindScenario(scenarioName)
				if err != nil {
					return err
				}
				sopts.Nodes = s.Nodes
				if cmd.Flags().Changed("nodes") {
					sopts.Nodes = nodes
				}
				switch {
				case sopts.Nodes < 1 || sopts.Nodes > 10000:
					return fmt.Errorf("--nodes %d is not allowed with --scenario: 1 to 10000", sopts.Nodes)
				case sopts.GPUs < 1 || sopts.GPUs > 64:
					return fmt.Errorf("--gpus-per-node %d is not allowed: 1 to 64", sopts.GPUs)
				case sopts.StopAfter < 0 || sopts.StopAfter > 30*time.Second:
					return fmt.Errorf("--stop-after %s is not allowed: 0 to 30s (the pods' grace period)", sopts.StopAfter)
				}
				self, err := os.Executable()
				if err != nil {
					return err
				}
				_, err = bench.RunScenario(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), self, s, sopts)
				return err
			}
			if pods < 1 {
				return fmt.Errorf("--pods %d is not allowed: 1 or more", pods)
			}
			if against != "" {
				switch {
				case mode != bench.Stream && mode != bench.Backlog && mode != bench.Both:
					return fmt.Errorf("--mode %s is not allowed with --against: stream, backlog or both", mode)
				case nodes < 1 || nodes > 5000:
					return fmt.Errorf("--nodes %d is not allowed: 1 to 5000", nodes)
				case pods < 2:
					return fmt.Errorf("--pods %d is not allowed with --against: 2 or more (a rate needs a first and a last pod)", pods)
				case rounds < 1:
					return fmt.Errorf("--rounds %d is not allowed: 1 or more", rounds)
				case pods > nodes*8:
					return fmt.Errorf("--pods %d is not allowed with --nodes %d: at most %d, one GPU each", pods, nodes, nodes*8)
				}
				if _, err := os.Stat(against); err != nil {
					return fmt.Errorf("--against %s: %w (make bench-kube builds kube-scheduler from the k8s.io/kubernetes module into bin/)", against, err)
				}
				self, err := os.Executable()
				if err != nil {
					return err
				}
				_, err = bench.Against(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), self, against, mode, nodes, pods, rounds)
				return err
			}
			if mode != bench.Stream && mode != bench.Backlog && mode != bench.Create {
				return fmt.Errorf("--mode %q is not allowed: %s, %s or %s", mode, bench.Stream, bench.Backlog, bench.Create)
			}
			rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
			}
			rc.QPS, rc.Burst = 2000, 4000
			// Protobuf, as kubectl and the controllers use for built-in kinds: cheaper for
			// the API server than JSON.
			rc.ContentType = runtime.ContentTypeProtobuf
			res, err := bench.Run(cmd.Context(), kubernetes.NewForConfigOrDie(rc), allotclient.NewForConfigOrDie(rc), queue, pods, mode, scheduler.SchedulerName, nil,
				progress.Bar(cmd.ErrOrStderr(), pods, "binding"))
			if err != nil {
				return err
			}
			if mode == bench.Create {
				fmt.Fprintf(cmd.OutOrStdout(), "%d pods created in %s: %.0f pods/s (no scheduler, no webhook: the API server's ceiling)\n",
					res.Pods, res.Submitted.Round(time.Millisecond), res.PodsPerSecond)
				return nil
			}
			from := "creation"
			if mode == bench.Backlog {
				from = "the queue opening"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d of %d pods bound in %s: %.0f pods/s; %s to binding p50 %s, p99 %s (all submitted within %s)\n",
				res.Bound, res.Pods, res.Elapsed.Round(time.Millisecond), res.PodsPerSecond, from, res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond),
				res.Submitted.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", filepath.Join(os.TempDir(), "allot-up", "kubeconfig"), "kubeconfig of the cluster")
	cmd.Flags().IntVar(&pods, "pods", 2000, "one-GPU pods to submit")
	cmd.Flags().StringVar(&queue, "queue", "bench", "queue to create and submit to")
	cmd.Flags().StringVar(&against, "against", "", "a kube-scheduler binary: run it and Allot in turn, each on a fresh embedded API server of --nodes simulated nodes, and print both")
	cmd.Flags().IntVar(&nodes, "nodes", 250, "with --against: simulated nodes of 8 GPUs; with --scenario: simulated nodes (default: the scenario's, 500, 5000 for restart, 1000 for kueue)")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "with --against: rounds, the order alternating")
	cmd.Flags().StringVar(&scenarioName, "scenario", "", "run a scale scenario on a fresh embedded API server with simulated nodes: "+bench.ScenarioNames())
	cmd.Flags().IntVar(&sopts.GPUs, "gpus-per-node", 8, "with --scenario: GPUs of each simulated node")
	cmd.Flags().DurationVar(&sopts.StopAfter, "stop-after", 0, "with --scenario: how long an evicted pod's containers take to stop (0: at once; at most its 30s grace period)")
	cmd.Flags().BoolVar(&sopts.CustomMetrics, "custom-metrics", false, "with --scenario: the scheduler serves the custom metrics API too, as the chart runs it (its memory with every reader of pods in the process)")
	cmd.Flags().StringVar(&sopts.CPUProfile, "cpu-profile", "", "with --scenario: write a CPU profile of the measured scheduler to this file")
	// The scheduler a scenario runs: allot bench --as-scheduler REPORT -- [scheduler flags].
	cmd.Flags().StringVar(&asScheduler, "as-scheduler", "", "run allot scheduler with the flags after --, its API requests counted, and write them and its peak memory to this file when it stops")
	_ = cmd.Flags().MarkHidden("as-scheduler")
	cmd.Flags().StringVar(&mode, "mode", bench.Stream, "stream (creation to binding), backlog (a closed queue opened: opening to binding) or create (creation alone); with --against also both (stream, then backlog)")
	return cmd
}
