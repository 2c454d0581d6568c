package cli

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/submission"
	"github.com/allot-dev/allot/kube/submit"
)

func newSubmitCmd() *cobra.Command {
	var c *conn // set below, once the command exists to carry its flags
	var s submit.Spec
	var dryRun, preemptible, nonPreemptible, runAsUser, multiCluster bool
	var workers string
	var accelerator string
	gpuAPI := submission.GPUAPIAuto
	cmd := &cobra.Command{
		Use:     "submit NAME -p QUEUE -i IMAGE [flags] [-- COMMAND ARGS…]",
		GroupID: "work",
		Short:   "Submit a workload: training (default), distributed (--workers), interactive or inference",
		Long: `Submit a workload without writing YAML. Training makes a batch Job; --workers N an indexed
Job of N workers with a headless Service (worker i is NAME-i.NAME) started as one gang;
--interactive a pod that is not preemptible and stops at the queue's time limit;
--inference a Deployment (with a Service when --port is set).`,
		Example: `  allot submit resnet -p team-a -i pytorch/pytorch -g 2 -- python train.py
  allot submit notebook -p team-a -i jupyter/base -g 0.5 --interactive --port 8888
  allot submit notebook -p team-a --template jupyter
  allot submit ddp -p team-d -i pytorch/pytorch -g 4 --workers 2 -- torchrun train.py
  allot submit llm -p team-c -i vllm/vllm-openai -g 1 --inference --port 8000
  allot submit npu-train -p team-a -i ascendhub/mindspore --accelerator ascend -g 2 -- python train.py
  allot submit small -p team-a -i pytorch/pytorch --mig 3g.40gb -- python eval.py
  allot submit tiny -p team-a -i pytorch/pytorch --mig 1g.10gb --mig-strategy single -- python eval.py
  allot submit nb -p team-a -i jupyter/base --mig-dynamic smallest --gpu-memory 10Gi --interactive
  allot submit burst -p team-a -i pytorch/pytorch --gpu-memory 10Gi --gpu-memory-limit 40Gi -- python train.py`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || cmd.ArgsLenAtDash() == 0 {
				return fmt.Errorf("a NAME for the workload is required: allot submit NAME -p QUEUE -i IMAGE [flags] [-- COMMAND ARGS…]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s.Name = args[0]
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash != 1 {
					return fmt.Errorf("one NAME before --, got %v", args[:dash])
				}
				s.Command = args[1:]
			} else if len(args) > 1 {
				return fmt.Errorf("one NAME, got %v (put the command after --)", args)
			}
			if cmd.Flags().Changed("workers") {
				n, min, err := submit.ParseWorkers(workers)
				if err != nil {
					return err
				}
				if min > 0 && cmd.Flags().Changed("min-workers") {
					return fmt.Errorf("--workers %s and --min-workers are both set: write the minimum once", workers)
				}
				s.Workers = n
				if min > 0 {
					s.MinWorkers = min
				}
			}
			if multiCluster {
				if s.Interactive || s.Inference {
					return fmt.Errorf("--multicluster is for training Jobs: an interactive or inference workload runs in the cluster it is submitted to")
				}
				s.ManagedBy = multicluster.ManagedBy
			}
			if preemptible && nonPreemptible {
				return fmt.Errorf("--preemptible and --non-preemptible are both set: choose one")
			}
			if preemptible || nonPreemptible {
				s.Preemptible = &preemptible
			}
			if s.Queue == "" {
				s.Queue = loadConfig().Queue
			}
			if runAsUser {
				uid, gid := os.Getuid(), os.Getgid()
				if uid < 0 || gid < 0 {
					return fmt.Errorf("--run-as-user: this system has no uid and gid to run as (Windows); leave the flag out")
				}
				s.RunAs = &submit.RunAs{UID: int64(uid), GID: int64(gid)}
			}
			if accelerator != "" {
				// Said before connecting: the flag's values are known here.
				if _, _, err := convert.SubmitKind(accelerator); err != nil {
					return err
				}
			}
			if !dryRun || s.TemplateName != "" {
				// A template is read from the cluster, also for a dry run.
				if err := c.connect(cmd.Context()); err != nil {
					return err
				}
				s.Namespace = c.ns
			} else if s.Namespace = "default"; c.flags.Namespace != nil && *c.flags.Namespace != "" {
				s.Namespace = *c.flags.Namespace
			}
			cl := submission.Clients{Client: c.client, Allot: c.allot}
			note, knownKind, err := submission.Settle(cmd.Context(), cl, &s, gpuAPI, accelerator, dryRun)
			if err != nil {
				return err
			}
			objs, err := s.Objects()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				y, err := submission.YAML(objs)
				if err != nil {
					return err
				}
				_, err = io.WriteString(out, y)
				return err
			}
			if err := submission.Submit(cmd.Context(), cl, s, objs, knownKind); err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintf(out, "--mig %s: %s\n", s.MIG, note)
			}
			fmt.Fprintf(out, "%s %s submitted to queue %s (allot describe %s)\n", s.Type(), s.Name, s.Queue, s.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&s.Queue, "queue", "p", "", "queue (project) to submit to; default from allot config queue")
	f.StringVarP(&s.Image, "image", "i", "", "container image")
	f.StringVar(&s.TemplateName, "template", "", "start from a workspace template: the namespace's WorkspaceTemplate of this name, else the ClusterWorkspaceTemplate (image, tool and port, GPUs, CPU, memory, data); the other flags override it")
	f.StringVarP(&s.GPUs, "gpu", "g", "", "GPUs: a whole number, or a fraction of one GPU such as 0.5 (with --accelerator: a whole number of its devices)")
	f.StringVar(&accelerator, "accelerator", "", "ask -g whole devices of another vendor's kind instead of NVIDIA GPUs: amd, intel, ascend, cambricon, hygon, neuron, neuroncore, or KIND=RESOURCE for a kind defined with allot scheduler --accelerators")
	f.StringVar(&s.GPUMemory, "gpu-memory", "", "GPU memory of one shared GPU instead of -g, such as 8Gi")
	f.IntVar(&s.GPUCompute, "gpu-compute", 0, "percent of a shared GPU's compute, booked for the pod (with -g below 1 or --gpu-memory, or alone)")
	f.StringVar(&s.ComputeMode, "compute", "", "how a shared GPU's compute share holds while its other sharers are idle: capped (at all times), fair (only while others use the GPU) or shared (no cap; memory still held), within what the node's pool allows (empty: the pool's)")
	f.IntVar(&s.GPUCount, "gpu-count", 0, "take the slice (-g below 1, --gpu-memory, --gpu-compute) of each of this many GPUs of one node; with --mig, this many instances")
	f.StringVar(&s.GPUMemoryLimit, "gpu-memory-limit", "", "a slice's GPU memory limit past its request (--gpu-memory or -g below 1), used while the GPU has it free, such as 40Gi")
	f.StringVar(&s.GPUFractionLimit, "gpu-fraction-limit", "", "as --gpu-memory-limit, as a fraction of the GPU, such as 0.75")
	f.StringVar(&s.MIG, "mig", "", "a MIG instance of a layout an admin made, by profile (1g.10gb, 3g.40gb: the device plugin's nvidia.com/mig-PROFILE); --gpu-count N for N of them")
	f.StringVar(&s.MIGStrategy, "mig-strategy", "", "with --mig: how the nodes' device plugin gives the instances: mixed (nvidia.com/mig-PROFILE) or single (nvidia.com/gpu pinned to the nodes' nvidia.com/gpu.product MODEL-MIG-PROFILE); default: single where only single-strategy nodes have the profile, else mixed")
	f.StringVar(&s.MIGDynamic, "mig-dynamic", "", "a MIG instance Allot lays out on a node labelled allot.dev/mig-dynamic: a profile (3g.40gb), or smallest to hold -g below 1 or --gpu-memory")
	f.StringVar(&s.GPUUUIDs, "gpu-uuid", "", "only these GPUs, by UUID, comma-separated")
	f.StringVar(&s.ExcludeGPUUUIDs, "exclude-gpu-uuid", "", "never these GPUs, by UUID, comma-separated")
	f.StringVar(&s.ExcludeGPUTypes, "exclude-gpu-type", "", "never these GPU models, comma-separated")
	f.StringVar(&s.GPUIsland, "gpu-island", "", "required: all of a pod's GPUs on one NVLink/NUMA island, or wait")
	f.StringVar(&s.NodePolicy, "node-policy", "", "how this job's nodes are chosen: binpack or spread")
	f.StringVar(&s.GPUPolicy, "gpu-policy", "", "how this job's GPUs are chosen on a node: binpack or spread")
	f.BoolVar(&s.Interactive, "interactive", false, "interactive work (a StatefulSet of one pod, which allot suspend and resume stop and start): not preemptible, subject to the queue's time limit and idleTimeout")
	f.BoolVar(&s.Inference, "inference", false, "inference: a Deployment (and a Service with --port)")
	f.Var(replicasFlag{&s}, "replicas", "inference: N replicas, or MIN:MAX to autoscale on GPU utilisation (MIN 0: may rest at zero; docs/inference.md)")
	f.IntVar(&s.TargetGPUUtilization, "target-gpu-utilization", 0, fmt.Sprintf("inference with --replicas MIN:MAX: the GPU utilisation to scale to, in percent (default %d)", submit.DefaultTargetGPUUtilization))
	f.StringVar(&s.CPU, "cpu", "", "CPU request, such as 4")
	f.StringVar(&s.Memory, "memory", "", "memory request, such as 16Gi")
	f.StringArrayVarP(&s.Env, "env", "e", nil, "environment variable NAME=VALUE (repeatable)")
	f.StringArrayVar(&s.PVCs, "pvc", nil, "mount a PersistentVolumeClaim: CLAIM:/path (repeatable)")
	f.IntVar(&s.Port, "port", 0, "container port (inference: exposed by a Service)")
	f.StringVar(&s.ServiceType, "service-type", "", "how --port is reached: clusterip (inside the cluster), nodeport, loadbalancer, or ingress (the cluster's ingress controller at /NAMESPACE/NAME); allot list -o wide shows the URL")
	f.StringArrayVar(&s.NFS, "nfs", nil, "mount an NFS export: SERVER:/export:/mount/path, :ro at the end for read-only (repeatable)")
	f.StringArrayVarP(&s.HostPaths, "volume", "v", nil, "mount a path of the node: /node/path:/mount/path, :ro at the end for read-only (repeatable; the queue's spec.hostPaths may refuse it)")
	f.StringVar(&s.WorkingDir, "working-dir", "", "the directory the container starts in")
	f.BoolVar(&runAsUser, "run-as-user", false, "run the container's processes as your uid and gid here, not the image's user")
	f.BoolVar(&s.LargeSHM, "large-shm", false, "a memory-backed /dev/shm as large as the container's memory (the runtime gives 64M; PyTorch's data loaders want more); not with a slice of a GPU")
	f.StringVar(&s.NodePool, "node-pool", "", "run in this node pool; several, comma-separated, are tried in order (h100,a100; default: the nodes in no pool); unset, the queue's pools")
	f.StringVar(&s.TopologyRequired, "topology-required", "", "run all pods within one domain of this level of the cluster's Topology (rack, block, …)")
	f.StringVar(&s.TopologyPreferred, "topology-preferred", "", "pack the pods as tightly as the Topology's levels allow, down from this level")
	f.StringVar(&s.GPUType, "gpu-type", "", "GPU models allowed, comma-separated")
	f.StringVar(&workers, "workers", "", "distributed training with this many workers, or MIN:MAX (elastic: starts with MIN, grows to MAX); torchrun's rendezvous is set up for it")
	f.IntVar(&s.MinWorkers, "min-workers", 0, "start with at least this many workers and grow to --workers (elastic; the same as --workers MIN:MAX)")
	f.BoolVar(&preemptible, "preemptible", false, "may be evicted to give GPUs back (default for training)")
	f.BoolVar(&nonPreemptible, "non-preemptible", false, "never evicted; runs within the queue's quota only")
	f.DurationVar(&s.Duration, "duration", 0, "on simulated nodes (allot up): finish after this long")
	f.BoolVar(&dryRun, "dry-run", false, "print the objects instead of creating them")
	f.BoolVar(&multiCluster, "multicluster", false, "on a multi-cluster manager: hand the Job to the manager, which runs it on the worker cluster that can start it whole now (docs/multicluster.md)")
	f.StringVar(&gpuAPI, "gpu-api", gpuAPI, "how whole GPUs are asked for: device-plugin (nvidia.com/gpu), dra (a ResourceClaim of class gpu.nvidia.com), or auto: dra where every GPU node of the pool has its GPUs through DRA")
	c = addConn(cmd)
	return cmd
}

func newListCmd() *cobra.Command {
	var c *conn // set below, once the command exists to carry its flags
	var queue, output, cluster string
	var all, watch bool
	cmd := &cobra.Command{
		Use:     "list",
		GroupID: "work",
		Short:   "List workloads: name, queue, type, status, GPUs, pods, node, age, idle",
		Long: `List workloads: name, queue, type, status, GPUs, pods, node, age, idle time.

IDLE is how long every GPU the workload holds has stayed under its queue's idleThreshold
(5% unset), as the scheduler's idle controller last saw; '-' while one is busy or not
reported. A queue's idleTimeout stops workloads idle that long (docs/idle.md).

GPUS is held/requested: 0/8 is a job asking for 8 GPUs that holds none yet, 0.5/0.5 a
notebook running on half a GPU. PODS is running/(running and waiting), as kubectl's READY
reads: 2/4 is a job with two pods running and two waiting. The dashboard writes both the
same way.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, true); err != nil {
				return err
			}
			if err := c.connect(cmd.Context()); err != nil {
				return err
			}
			ns := c.ns
			if all {
				ns = ""
			}
			if queue != "" {
				// A misspelt queue would list nothing and look like an empty queue.
				if err := submission.QueueExists(cmd.Context(), c.allot, queue); err != nil {
					return err
				}
			}
			for {
				ws, err := inspect.Workloads(cmd.Context(), c.client, ns, queue)
				if err != nil {
					return err
				}
				if cluster != "" {
					ws = slices.DeleteFunc(ws, func(w inspect.Workload) bool { return w.Cluster != cluster })
				}
				if err := printWorkloads(cmd, ws, output, all); err != nil || !watch {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(2 * time.Second):
					fmt.Fprintln(cmd.OutOrStdout())
				}
			}
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "p", "", "only this queue's workloads")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, wide, json or yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again every 2 seconds")
	cmd.Flags().StringVar(&cluster, "worker", "", "on a multi-cluster manager: only the workloads dispatched to this worker cluster (--cluster is the kubeconfig's, as kubectl's)")
	c = addConn(cmd)
	return cmd
}

func printWorkloads(cmd *cobra.Command, ws []inspect.Workload, output string, namespaces bool) error {
	out := cmd.OutOrStdout()
	if output == "json" || output == "yaml" {
		return printData(out, output, ws)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	head := "NAME\tKIND\tQUEUE\tTYPE\tSTATUS\tGPUS\tPODS\tNODE\tAGE\tIDLE"
	// On a multi-cluster manager, where each runs.
	clusters := slices.ContainsFunc(ws, func(w inspect.Workload) bool { return w.Cluster != "" })
	if clusters {
		head = strings.Replace(head, "\tNODE\t", "\tCLUSTER\t", 1)
	}
	if namespaces {
		head = "NAMESPACE\t" + head
	}
	if output == "wide" {
		head += "\tUTIL\tUSER\tURL\tPROGRESS\tREASON"
	}
	fmt.Fprintln(tw, head)
	for _, w := range ws {
		node := "-"
		if len(w.Nodes) > 0 {
			node = strings.Join(w.Nodes, ",")
		}
		if clusters {
			node = cmp.Or(w.Cluster, "-")
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s/%s\t%d/%d\t%s\t%s\t%s", w.Name, w.Kind, w.Queue, w.Type, w.Status,
			gpuAmount(w.GPUs), gpuAmount(w.Requested), w.Running, w.Running+w.Pending, node, age(w.Created), idleFor(w.Idle, time.Now()))
		if namespaces {
			row = w.Namespace + "\t" + row
		}
		if output == "wide" {
			url := w.URL
			if url == "" {
				url = "-"
			}
			user := w.CreatedBy
			if user == "" {
				user = "-"
			}
			util := "-"
			if w.Use != nil && w.Use.Utilization != nil {
				util = strconv.Itoa(*w.Use.Utilization) + "%"
			}
			progress := w.Progress
			if progress == "" {
				progress = "-"
			}
			row += "\t" + util + "\t" + user + "\t" + url + "\t" + progress + "\t" + w.Reason
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

func newDescribeCmd() *cobra.Command {
	var c *conn // set below, once the command exists to carry its flags
	var output string
	cmd := &cobra.Command{
		Use:     "describe NAME",
		GroupID: "work",
		Short:   "Show a workload, its pods with node and GPUs, its events, and why it waits",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, false); err != nil {
				return err
			}
			if err := c.connect(cmd.Context()); err != nil {
				return err
			}
			w, err := inspect.Find(cmd.Context(), c.client, c.ns, args[0])
			if err != nil {
				return err
			}
			events, err := inspect.Events(cmd.Context(), c.client, w)
			if err != nil {
				return err
			}
			room, allRoom, err := inspect.MadeRoom(cmd.Context(), c.client, w)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output != "table" {
				type ev struct{ Type, Reason, Object, Message string }
				var evs, made []ev
				for _, e := range events {
					evs = append(evs, ev{e.Type, e.Reason, e.InvolvedObject.Name, e.Message})
				}
				for _, e := range room {
					made = append(made, ev{e.Type, e.Reason, e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name, e.Message})
				}
				return printData(out, output, struct {
					*inspect.Workload
					Events   []ev `json:"events"`
					MadeRoom []ev `json:"madeRoom,omitempty"`
				}{w, evs, made})
			}
			fmt.Fprintf(out, "Name:       %s\nNamespace:  %s\nKind:       %s\nQueue:      %s\nType:       %s\nStatus:     %s\nGPUs:       %s allocated of %s requested\nPods:       %d running, %d pending\nCreated:    %s (%s ago)\n",
				w.Name, w.Namespace, w.Kind, w.Queue, w.Type, w.Status, gpuAmount(w.GPUs), gpuAmount(w.Requested), w.Running, w.Pending,
				w.Created.Format(time.RFC3339), age(w.Created))
			if w.CreatedBy != "" {
				fmt.Fprintf(out, "Created by: %s\n", w.CreatedBy)
			}
			if w.Cluster != "" {
				fmt.Fprintf(out, "Cluster:    %s (its pods are there; allot describe %s there shows them)\n", w.Cluster, w.Name)
			}
			if !w.RunningSince.IsZero() {
				fmt.Fprintf(out, "Running:    for %s (since %s)\n", age(w.RunningSince), w.RunningSince.Format(time.RFC3339))
			}
			if w.Progress != "" {
				fmt.Fprintf(out, "Progress:   %s\n", w.Progress)
			}
			if u := w.Use; u != nil {
				fmt.Fprintf(out, "GPU use:    %s (as its nodes' agents last measured)\n", useLine(u))
			}
			if w.URL != "" {
				fmt.Fprintf(out, "URL:        %s\n", w.URL)
			}
			if w.Reason != "" {
				fmt.Fprintf(out, "Waiting:    %s\n", w.Reason)
			}
			if line := idleLine(w, time.Now()); line != "" {
				fmt.Fprintf(out, "Idle:       %s\n", line)
			}
			fmt.Fprintln(out, "\nPods:")
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  NAME\tNODE\tGPUS\tPHASE\tREASON")
			for _, p := range w.Pods {
				node, gpus := p.Node, p.GPUs
				if node == "" {
					node = "-"
				}
				if gpus == "" {
					gpus = "-"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Name, node, gpus, p.Phase, p.Reason)
			}
			tw.Flush()
			printGPUMemory(out, w.Pods)
			for _, p := range w.Pods {
				if p.Translated != "" {
					fmt.Fprintf(out, "Translated (%s): %s\n", p.Name, p.Translated)
				}
			}
			fmt.Fprintln(out, "\nEvents:")
			if len(events) == 0 {
				fmt.Fprintln(out, "  none")
			}
			tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, e := range events {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Type, e.Reason, e.InvolvedObject.Name, e.Message)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(room) > 0 || !allRoom {
				// The pods stopped or moved for it, wherever they ran (the reader's view).
				fmt.Fprintln(out, "\nMade room (pods stopped or moved for it):")
				if len(room) == 0 {
					fmt.Fprintln(out, "  none in", w.Namespace)
				}
				tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				for _, e := range room {
					fmt.Fprintf(tw, "  %s\t%s/%s\t%s\n", e.Reason, e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Message)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if !allRoom {
					fmt.Fprintln(out, "  (only namespace "+w.Namespace+" shown: you may not list Events in others)")
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	c = addConn(cmd)
	return cmd
}

func newDeleteCmd() *cobra.Command {
	var c *conn // set below, once the command exists to carry its flags
	cmd := &cobra.Command{
		Use:     "delete NAME...",
		GroupID: "work",
		Short:   "Delete workloads and their pods (NAME, or KIND/NAME when names clash)",
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
				msg, err := ctl.Delete(cmd.Context(), w)
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

// printGPUMemory shows, where a workload's pods have a GPU memory limit past their request
// (dynamic fractions), what each was last measured to hold against its request and limit,
// and what of it is past the request: lent while no request needs it, taken back (the pod
// stopped, or the request waits, as its queue's burstPolicy says) when one does.
func printGPUMemory(out io.Writer, pods []inspect.Pod) {
	var rows []inspect.Pod
	for _, p := range pods {
		if p.GPUMemory != nil {
			rows = append(rows, p)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "\nGPU memory (a limit past the request: what is past it is lent while no other request needs it):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tUSED\tREQUEST\tLIMIT\tPAST REQUEST")
	for _, p := range rows {
		m := p.GPUMemory
		used, past := "not measured yet", "-"
		if m.UsedMi != nil {
			used = gib(*m.UsedMi)
		}
		if d := m.PastRequestMi(); d > 0 {
			past = gib(d)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Name, used, memoryAsked(m.Fraction, m.RequestMi), memoryAsked(m.FractionLimit, m.LimitMi), past)
	}
	tw.Flush()
}

// memoryAsked writes an amount of GPU memory as it was asked: in GiB, or as a fraction of
// the GPU with what that is in GiB where the GPU is known ("0.25 of a GPU (20 GiB)").
func memoryAsked(fraction float64, mi int64) string {
	switch {
	case fraction > 0 && mi > 0:
		return fmt.Sprintf("%s of a GPU (%s)", gpuAmount(fraction), gib(mi))
	case fraction > 0:
		return gpuAmount(fraction) + " of a GPU"
	case mi > 0:
		return gib(mi)
	}
	return "-"
}

// idleFor is allot list's IDLE: how long the workload's GPUs have been idle, '-' while they
// are busy, not reported or not watched.
func idleFor(i inspect.Idle, now time.Time) string {
	if i.IdleSince == nil {
		return "-"
	}
	return inspect.Short(i.IdleFor(now))
}

// idleLine is allot describe's word on idleness: why Allot stopped the workload, or since
// when its GPUs have been idle.
func idleLine(w *inspect.Workload, now time.Time) string {
	if s := w.IdleSuspended; s != nil && w.Status == "Suspended" {
		return fmt.Sprintf("%s, %s ago; allot resume %s starts it again", s.Sentence(), inspect.Short(now.Sub(s.At)), w.Name)
	}
	if w.IdleSince != nil {
		return fmt.Sprintf("every GPU it holds idle for %s (since %s)", inspect.Short(w.IdleFor(now)), w.IdleSince.Format(time.RFC3339))
	}
	return ""
}

// replicasFlag is --replicas N or MIN:MAX, read into a spec's MinReplicas and MaxReplicas.
type replicasFlag struct{ s *submit.Spec }

func (f replicasFlag) String() string {
	if f.s == nil || f.s.MaxReplicas == 0 {
		return ""
	}
	if f.s.MinReplicas == f.s.MaxReplicas {
		return strconv.Itoa(f.s.MaxReplicas)
	}
	return fmt.Sprintf("%d:%d", f.s.MinReplicas, f.s.MaxReplicas)
}

func (f replicasFlag) Set(v string) error {
	lo, hi, err := submit.ParseReplicas(v)
	if err != nil {
		return err
	}
	f.s.MinReplicas, f.s.MaxReplicas = lo, hi
	return nil
}

func (replicasFlag) Type() string { return "N|MIN:MAX" }

// useLine says how busy a workload's whole GPUs were and the GPU memory it holds, or why
// either is not said.
func useLine(u *inspect.GPUUse) string {
	busy := "utilisation not its own (its GPUs are shared)"
	if u.Utilization != nil {
		busy = fmt.Sprintf("%d%% busy (mean of its %d whole GPUs)", *u.Utilization, u.GPUs)
	}
	mem := "GPU memory not reported"
	switch m := u.MemoryUsedMi; {
	case m != nil && *m >= 1024:
		mem = fmt.Sprintf("%.1f GiB of GPU memory", float64(*m)/1024)
	case m != nil:
		mem = fmt.Sprintf("%d MiB of GPU memory", *m)
	}
	return busy + ", " + mem
}
