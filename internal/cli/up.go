package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/ecosystem"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/metricsapi"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
	"github.com/allot-dev/allot/kube/submit"
)

func newUpCmd() *cobra.Command {
	var nodes, gpus, migGPUs, realNodes, clusters int
	var gpuType, gpuMemory, dataDir, kubeconfig string
	var demo, draNodes bool
	var cpuProfile, dashboardAddr, metricsAddr string
	var warmup time.Duration
	var sharing, failGPU, history, topology string
	var accelerators, migFixed, migDynamic, migSingle, with []string
	cmd := &cobra.Command{
		Use:     "up",
		GroupID: "run",
		Short:   "Run a complete control plane with simulated GPU nodes and the scheduler in one process",
		Long: `Start etcd and kube-apiserver (built from the upstream Kubernetes modules) with Allot's CRDs,
simulated GPU nodes with the labels GPU Feature Discovery sets, a simulated kubelet, and the
Allot scheduler, all in this process. State is kept in --data-dir and survives a restart.
A kubeconfig is written so that kubectl works against it. Ctrl-C stops everything.`,
		Example: "  allot up --demo\n  allot up --nodes 4 --gpus-per-node 8 --gpu-type H100 --gpu-memory 80Gi\n  allot up --accelerator ascend:2x8 --accelerator amd:1x8\n" +
			"  allot up --demo --mig 1x2 --mig-dynamic 1x2 --accelerator ascend:1x8\n  allot up --demo --with lws,ray,trainer\n  allot up --demo --clusters 3",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 5000 {
				return fmt.Errorf("--nodes %d is not allowed: between 1 and 5000", nodes)
			}
			if gpus < 0 || gpus > 64 {
				return fmt.Errorf("--gpus-per-node %d is not allowed: between 0 and 64", gpus)
			}
			mem, err := resource.ParseQuantity(gpuMemory)
			if err != nil || mem.Sign() <= 0 {
				return fmt.Errorf("--gpu-memory %q is not a quantity such as 80Gi", gpuMemory)
			}
			if demo {
				nodes, gpus = 2, 8
			}
			if realNodes < 0 || realNodes > 1 {
				return fmt.Errorf("--real-nodes %d is not allowed: 0 or 1 (one kubelet per machine: its device-plugin socket and root directory are fixed paths)", realNodes)
			}
			if realNodes > 0 && (draNodes || gpus == 0) {
				return fmt.Errorf("--real-nodes with --dra or --gpus-per-node 0 is not offered: the real node's GPUs are offered by a device plugin")
			}
			if _, err := v1alpha1.ParseSharing(sharing); err != nil {
				return fmt.Errorf("--sharing: %w", err)
			}
			if migGPUs != 0 && (!draNodes || migGPUs < 0 || migGPUs > gpus) {
				return fmt.Errorf("--mig-gpus %d is not allowed: with --dra, from 0 to --gpus-per-node (%d)", migGPUs, gpus)
			}
			if draNodes && (sharing != "" || failGPU != "") {
				return fmt.Errorf("--dra with --sharing or --fail-gpu is not offered: nodes on DRA have no device plugin or allot agent, and GPUs are shared there through the driver's claims")
			}
			var schedOpts scheduler.Options
			if history != "" {
				strength, halfLife, err := parseHistory(history)
				if err != nil {
					return err
				}
				schedOpts.Engine.UsageStrength, schedOpts.UsageHalfLife = strength, halfLife
			}
			levels, err := parseTopologyLevels(topology)
			if err != nil {
				return err
			}
			kindNodes, err := parseAcceleratorNodes(accelerators)
			if err != nil {
				return err
			}
			migNodes, err := parseMIGNodes(migFixed, migDynamic, gpuType, mem.Value()>>20)
			if err != nil {
				return err
			}
			singleNodes, err := parseSingleMIGNodes(migSingle, gpuType, mem.Value()>>20)
			if err != nil {
				return err
			}
			migNodes = append(migNodes, singleNodes...)
			controllers, err := ecosystem.Resolve(with)
			if err != nil {
				return fmt.Errorf("--with: %w", err)
			}
			if draNodes && len(migNodes) > 0 {
				return fmt.Errorf("--mig, --mig-dynamic and --mig-single are device plugin and agent nodes: not with --dra (its MIG devices are --mig-gpus)")
			}
			if clusters < 1 || clusters > 5 {
				return fmt.Errorf("--clusters %d is not allowed: 1 (one cluster), or 2 to 5 (a manager and 1 to 4 workers)", clusters)
			}
			if clusters > 1 {
				for flag, set := range map[string]bool{"--real-nodes": realNodes > 0, "--dra": draNodes, "--mig, --mig-dynamic, --mig-single": len(migNodes) > 0,
					"--accelerator": len(kindNodes) > 0, "--with": len(controllers) > 0, "--fail-gpu": failGPU != "", "--sharing": sharing != "",
					"--topology": topology != "", "--fair-share-history": history != ""} {
					if set {
						return fmt.Errorf("--clusters %d with %s is not offered: each worker has plain simulated GPU nodes", clusters, flag)
					}
				}
			}
			// The scheduler schedules the kinds it has on by default, as allot scheduler does.
			schedOpts.Accelerators = convert.DefaultTable()
			var failNode string
			var failIndex int
			if failGPU != "" {
				n, i, ok := strings.Cut(failGPU, "/")
				idx, err := strconv.Atoi(i)
				var num int
				if _, scanErr := fmt.Sscanf(n, "dgx-%d", &num); !ok || err != nil || scanErr != nil || num < 1 || num > nodes || idx < 0 || idx >= gpus ||
					n != fmt.Sprintf("dgx-%d", num) {
					return fmt.Errorf("--fail-gpu %q is not allowed: NODE/INDEX with NODE one of dgx-1 … dgx-%d and INDEX from 0 to %d", failGPU, nodes, gpus-1)
				}
				failNode, failIndex = n, idx
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if os.Getenv("GOGC") == "" {
				// The whole control plane allocates in one heap; with Go's default the
				// collector takes a third of the CPU under load. Trading memory for it
				// (about 1 GiB at 2,000 pods/250 nodes) lifts throughput by a quarter; the
				// soft limit brings the default back if the heap grows large.
				debug.SetGCPercent(400)
				if os.Getenv("GOMEMLIMIT") == "" {
					debug.SetMemoryLimit(2 << 30)
				}
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			out := cmd.OutOrStdout()
			if err := localcluster.CheckDataDir(dataDir); err != nil {
				return err
			}
			// The control plane's own logs go to a file, not over the demo's output.
			logPath := filepath.Join(dataDir, "control-plane.log")
			logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return err
			}
			defer logFile.Close()
			localcluster.QuietLogs(logFile)
			if kubeconfig == "" {
				kubeconfig = filepath.Join(dataDir, "kubeconfig")
			}
			if clusters > 1 {
				return upClusters(ctx, out, upClustersOptions{clusters: clusters, nodes: nodes, gpus: gpus, gpuType: gpuType, memMi: mem.Value() >> 20,
					dataDir: dataDir, kubeconfig: kubeconfig, demo: demo})
			}
			fmt.Fprintf(out, "starting etcd and kube-apiserver in %s (logs: %s) …\n", dataDir, logPath)
			c, err := localcluster.Start(ctx, dataDir)
			if err != nil {
				return err
			}
			defer c.Stop()
			if err := c.WriteKubeconfig(kubeconfig); err != nil {
				return err
			}
			client := kubernetes.NewForConfigOrDie(c.Config)
			spec := simnode.Spec{Prefix: "dgx", Count: nodes, GPUs: gpus, GPUType: gpuType,
				GPUMemoryMi: mem.Value() >> 20, CPU: "128", Memory: "1Ti", Sharing: sharing, DRA: draNodes, DRAShared: draNodes, MIGGPUs: migGPUs}
			if err := simnode.Create(ctx, client, spec); err != nil {
				return err
			}
			for _, k := range kindNodes {
				if err := simnode.Create(ctx, client, k); err != nil {
					return fmt.Errorf("--accelerator %s: %w", k.Kind.Name, err)
				}
			}
			for _, m := range migNodes {
				if err := simnode.Create(ctx, client, m); err != nil {
					return fmt.Errorf("MIG nodes %s: %w", m.Prefix, err)
				}
			}
			if len(levels) > 0 {
				if err := createTopology(ctx, client, allotclient.NewForConfigOrDie(c.Config), spec, levels); err != nil {
					return fmt.Errorf("--topology: %w", err)
				}
			}
			kubeletConfig := rest.CopyConfig(c.Config)
			kubeletConfig.QPS, kubeletConfig.Burst = 1000, 2000
			kubeletConfig.ContentType = runtime.ContentTypeProtobuf
			nodeClient := kubernetes.NewForConfigOrDie(kubeletConfig)
			// Each simulated node is a real GPU node below the scheduler: its GPUs on go-nvml's
			// mock, a device plugin choosing devices its own way, the kubelet's PodResources
			// API on a unix socket (kept short: a data directory's path may be long), and the
			// real allot agent reporting it all.
			// With --dra the nodes publish the same GPUs (the same UUIDs) in ResourceSlices as
			// NVIDIA's DRA driver does, and have no device plugin or agent: the scheduler
			// allocates their claims, and the kubelet starts a pod once they are.
			if draNodes {
				go simnode.NewKubelet(nodeClient).Run(ctx)
			} else {
				sockets, err := os.MkdirTemp("", "allot-up-pr")
				if err != nil {
					return err
				}
				defer os.RemoveAll(sockets)
				devices := simnode.NewDevices(sockets)
				for _, s := range append([]simnode.Spec{spec}, migNodes...) {
					if err := devices.AddNodes(ctx, s); err != nil {
						return err
					}
				}
				go simnode.NewKubelet(nodeClient).WithDevices(devices).Run(ctx)
				agentMetrics := agent.NewMetrics()
				if err := devices.RunAgents(ctx, nodeClient, agentMetrics, 10*time.Second); err != nil {
					return err
				}
				schedOpts.Collectors = agentMetrics.Collectors()
			}
			if realNodes > 0 {
				// Sharing pods there get the sharing root mounted (the webhook's), and
				// their device by Allot's NRI plugin.
				schedOpts.SharingRoot = realSharingRoot
				stopReal, err := startRealNode(ctx, out, c.Config, kubeconfig, dataDir, gpus, sharing)
				if err != nil {
					return err
				}
				defer stopReal()
			}
			// The pods of allot up stop with it: the time it was down is no use of GPUs.
			schedOpts.UsageIdleWhileAway = true
			if warmup < time.Second {
				return fmt.Errorf("--gpu-utilization-warmup %s is not allowed: 1s or more (a reading needs the agent's interval; default %s)", warmup, metricsapi.DefaultWarmup)
			}
			running, err := stack.LocalWith(ctx, c.Config, c.Config, dataDir, metricsAddr, stack.Options{Scheduler: schedOpts, CustomMetricsWarmup: warmup})
			if err != nil {
				return err
			}
			schedDone := running.Done
			if err := startControllers(ctx, out, c.Config, controllers); err != nil {
				return err
			}
			if dashboardAddr != "" {
				if err := serveDashboard(ctx, out, c.Config, "--dashboard-address", dashboardAddr, false); err != nil {
					return err
				}
			}
			if demo {
				class := ""
				if draNodes {
					class = simnode.DRAClass
				}
				if err := startDemo(ctx, client, allotclient.NewForConfigOrDie(c.Config), class); err != nil {
					return err
				}
			}
			if failNode != "" {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, simnode.AnnotationFailGPU, strconv.Itoa(failIndex))
				if _, err := client.CoreV1().Nodes().Patch(ctx, failNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("--fail-gpu: %w", err)
				}
				fmt.Fprintf(out, "GPU %d of %s fails now (XID 79): allot top nodes shows it, the scheduler places nothing more there.\n", failIndex, failNode)
			}
			if draNodes {
				fmt.Fprintf(out, "Allot is up: %d simulated nodes × %d %s GPUs, published in ResourceSlices (DRA, device class %s).\nkubeconfig: %s\n  kubectl --kubeconfig %s get nodes,queues,pods,resourceclaims\nmetrics: %s\nCtrl-C stops it.\n",
					nodes, gpus, gpuType, simnode.DRAClass, kubeconfig, kubeconfig, running.MetricsURL)
			} else {
				fmt.Fprintf(out, "Allot is up: %d simulated nodes × %d %s GPUs, each with its allot agent.\nkubeconfig: %s\n  kubectl --kubeconfig %s get nodes,queues,pods\nmetrics: %s\nFail a GPU: kubectl --kubeconfig %s annotate node dgx-1 %s=3\nCtrl-C stops it.\n",
					nodes, gpus, gpuType, kubeconfig, kubeconfig, running.MetricsURL, kubeconfig, simnode.AnnotationFailGPU)
			}
			for _, m := range migNodes {
				switch {
				case m.MIGStrategy == "single":
					fmt.Fprintf(out, "and %d simulated nodes (%s-1 …) × %d GPUs in MIG mode, each %d × %s given as nvidia.com/gpu (the device plugin's single strategy): allot submit NAME -p QUEUE -i IMAGE --mig %s%s\n",
						m.Count, m.Prefix, m.GPUs, len(m.MIGLayout), m.MIGLayout[0], m.MIGLayout[0], singleHint(migNodes, m.MIGLayout[0]))
				case m.MIGDynamic:
					fmt.Fprintf(out, "and %d simulated nodes (%s-1 …) × %d GPUs in MIG mode that Allot lays out: allot submit NAME -p QUEUE -i IMAGE --mig-dynamic 3g.40gb (or --mig-dynamic smallest -g 0.5)\n",
						m.Count, m.Prefix, m.GPUs)
				default:
					fmt.Fprintf(out, "and %d simulated nodes (%s-1 …) × %d GPUs in MIG mode, each laid out %s: allot submit NAME -p QUEUE -i IMAGE --mig %s\n",
						m.Count, m.Prefix, m.GPUs, strings.Join(m.MIGLayout, " + "), m.MIGLayout[0])
				}
			}
			for _, k := range kindNodes {
				fmt.Fprintf(out, "and %d simulated %s nodes (%s-1 …) × %d %s devices (%s): allot submit NAME -p QUEUE -i IMAGE --accelerator %s -g N\n",
					k.Count, k.Kind.Name, k.Prefix, k.GPUs, k.GPUType, k.Kind.Resources[0], k.Kind.Name)
			}
			if demo {
				fmt.Fprint(out, demoNext(kubeconfig))
			}
			<-ctx.Done()
			fmt.Fprintln(out, "\nstopping …")
			return <-schedDone
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 2, "simulated GPU nodes (of each worker, with --clusters)")
	f.IntVar(&clusters, "clusters", 1, "run a multi-cluster manager and its workers: N control planes in this process, the manager with no nodes and N-1 workers with --nodes simulated nodes each, the first of --gpu-type, the second of H100s (docs/multicluster.md)")
	f.IntVar(&realNodes, "real-nodes", 0, "also run a real node (real-1) on this machine, as root: the kubelet, containerd and runc built from their Go modules, with --gpus-per-node GPU devices made for it (no driver) and Allot's NRI plugin; 0 or 1 (the kubelet's device-plugin socket is the machine's)")
	f.IntVar(&gpus, "gpus-per-node", 8, "GPUs per simulated node")
	f.StringVar(&gpuType, "gpu-type", "A100-SXM4-80GB", "GPU model (the nvidia.com/gpu.product label)")
	f.StringVar(&gpuMemory, "gpu-memory", "80Gi", "memory per GPU")
	f.StringVar(&dataDir, "data-dir", filepath.Join(os.TempDir(), "allot-up"), "where the cluster keeps its state")
	f.StringVar(&kubeconfig, "kubeconfig", "", "where to write the kubeconfig (default: DATA-DIR/kubeconfig)")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the whole process here (for performance work)")
	_ = f.MarkHidden("cpu-profile")
	f.StringVar(&dashboardAddr, "dashboard-address", "127.0.0.1:8090", "serve the web dashboard on this host:port (empty: none)")
	f.DurationVar(&warmup, "gpu-utilization-warmup", metricsapi.DefaultWarmup, "how long an inference pod runs before its GPU utilisation counts for its autoscaler (the scheduler's flag of that name)")
	f.StringVar(&metricsAddr, "metrics-address", "127.0.0.1:9090", "serve Prometheus metrics at /metrics on this host:port (127.0.0.1:0: any free port)")
	f.StringVar(&sharing, "sharing", "", "how the simulated nodes declare GPU sharing is enforced: mps, hami-core or none (empty: not declared)")
	f.StringVar(&failGPU, "fail-gpu", "", "make one simulated GPU fail once Allot is up, as NODE/INDEX (dgx-1/3): the health path end to end")
	f.StringVar(&history, "fair-share-history", "", "let past use tilt the division of idle GPUs, as STRENGTH[:HALF-LIFE] (1:168h): 0 ignores it, 1 is strong")
	f.StringVar(&topology, "topology", "", "simulated network topology: level names, narrowest first, such as rack,block (2 nodes to a rack, 2 racks to a block), with a Topology named default")
	f.BoolVar(&draNodes, "dra", false, "publish the simulated GPUs in ResourceSlices as NVIDIA's DRA driver does (device class gpu.nvidia.com), with no device plugin: pods claim them with ResourceClaims, as allot submit then does")
	f.IntVar(&migGPUs, "mig-gpus", 0, "with --dra: this many GPUs of each node in MIG mode, published as seven 1g.10gb devices each (device class mig.nvidia.com)")
	f.StringArrayVar(&accelerators, "accelerator", nil, "simulated nodes of another vendor's kind as KIND:NODESxDEVICES (ascend:2x8), repeatable; KIND one of "+strings.Join(convert.DefaultAcceleratorNames(), ", "))
	f.StringArrayVar(&migFixed, "mig", nil, "simulated nodes whose GPUs are in MIG mode with a fixed layout, advertised as the device plugin's mixed strategy does, as NODESxGPUS[:PROFILE+PROFILE…] (1x2, or 1x2:3g.40gb+2g.20gb+1g.10gb, the default layout), named mig-1 …; repeatable")
	f.StringArrayVar(&migDynamic, "mig-dynamic", nil, "simulated nodes whose GPUs are in MIG mode for Allot to lay out (allot.dev/mig-dynamic), as NODESxGPUS (1x2), named migdyn-1 …")
	f.StringArrayVar(&migSingle, "mig-single", nil, "simulated nodes of the device plugin's single MIG strategy: each GPU as many instances of one profile as it holds, given as nvidia.com/gpu, as NODESxGPUS[:PROFILE] (1x2, or 1x2:2g.20gb; default the model's smallest, 1g.10gb on an A100-80GB), named migsingle-1 …; repeatable")
	f.StringSliceVar(&with, "with", nil, "run these projects' real controllers in this process, comma-separated: "+ecosystem.Describe()+
		"; their CRDs are read from the Go module cache (go mod download MODULE@VERSION fills it), and their webhooks do not run (see docs/integrations.md)")
	f.BoolVar(&demo, "demo", false, "the demo: queues team-a/b/c/d with quotas 4/2/2/8 on 2 nodes of 8 GPUs, with work submitted")
	return cmd
}

// simulatedKinds are the model and device memory of the simulated nodes of each kind.
var simulatedKinds = map[string]struct {
	model string
	memGi int64
}{"amd": {"AMD_Instinct_MI300X", 192}, "intel": {"Max_1550", 128}, "ascend": {"910B3", 64}, "cambricon": {"MLU370-X8", 48},
	"hygon": {"K100_AI", 64}, "neuron": {"trn1.32xlarge", 32}}

// parseAcceleratorNodes reads allot up's --accelerator values, KIND:NODESxDEVICES, into
// groups of simulated nodes of those kinds (named KIND-1, KIND-2, …).
func parseAcceleratorNodes(values []string) ([]simnode.Spec, error) {
	kinds := convert.DefaultTable()
	var out []simnode.Spec
	for _, v := range values {
		bad := fmt.Errorf("--accelerator %q is not allowed: KIND:NODESxDEVICES such as ascend:2x8, with KIND one of %s, 1 to 5000 nodes and 1 to 64 devices each",
			v, strings.Join(kinds.Names(), ", "))
		name, size, ok := strings.Cut(v, ":")
		n, d, okSize := strings.Cut(size, "x")
		count, err1 := strconv.Atoi(n)
		devices, err2 := strconv.Atoi(d)
		k, known := kinds.Kind(name)
		if !ok || !okSize || err1 != nil || err2 != nil || !known || count < 1 || count > 5000 || devices < 1 || devices > 64 {
			return nil, bad
		}
		if slices.ContainsFunc(out, func(s simnode.Spec) bool { return s.Kind.Name == name }) {
			return nil, fmt.Errorf("--accelerator %q: kind %s is given twice; give its nodes once", v, name)
		}
		sim := simulatedKinds[name]
		out = append(out, simnode.Spec{Prefix: name, Count: count, GPUs: devices, GPUType: sim.model, GPUMemoryMi: sim.memGi << 10,
			CPU: "128", Memory: "1Ti", Kind: &k})
	}
	return out, nil
}

// startDemo creates the reference queues and some work: team-a borrows idle GPUs beyond
// its quota (10 on a quota of 4), team-b stays within its own (2), and 4 GPUs stay free:
// fewer than team-d's quota, so that a gang of team-d's as the demo suggests (2 × 4)
// reclaims what team-a borrowed.
// With a deviceClass, the work claims its GPUs through DRA.
func startDemo(ctx context.Context, client kubernetes.Interface, allot versioned.Interface, deviceClass string) error {
	queues := allot.AllotV1alpha1().Queues()
	for _, q := range []struct {
		name  string
		quota int32
	}{{"team-a", 4}, {"team-b", 2}, {"team-c", 2}, {"team-d", 8}} {
		queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: q.name}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: q.quota}}}
		if _, err := queues.Create(ctx, queue, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("demo queue %s: %w", q.name, err)
		}
	}
	// Training Jobs as allot submit makes them: pods evicted by a reclaim come back and
	// wait, keeping their place, as a real team's work would.
	work := []struct {
		queue string
		n     int
	}{{"team-a", 10}, {"team-b", 2}}
	for _, w := range work {
		for i := 0; i < w.n; i++ {
			spec := submit.Spec{Name: w.queue + "-train-" + strconv.Itoa(i), Namespace: "default", Queue: w.queue,
				Image: "pytorch/pytorch", GPUs: "1", Command: []string{"python", "train.py"}, DeviceClass: deviceClass}
			objs, err := spec.Objects()
			if err != nil {
				return err
			}
			for _, o := range objs {
				switch x := o.(type) {
				case *resourcev1.ResourceClaimTemplate:
					_, err = client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, x, metav1.CreateOptions{})
				case *batchv1.Job:
					_, err = client.BatchV1().Jobs("default").Create(ctx, x, metav1.CreateOptions{})
				}
				if err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("demo job: %w", err)
				}
			}
		}
	}
	return nil
}

// defaultMIGLayout is what --mig lays out on each GPU without a layout of its own: one
// instance of three sizes, a GPU's worth but for one compute slice.
var defaultMIGLayout = []string{"3g.40gb", "2g.20gb", "1g.10gb"}

// parseMIGNodes reads allot up's --mig (NODESxGPUS[:LAYOUT]) and --mig-dynamic
// (NODESxGPUS) into groups of simulated nodes in MIG mode, of the --gpu-type model.
func parseMIGNodes(fixed, dynamic []string, gpuType string, memMi int64) ([]simnode.Spec, error) {
	var out []simnode.Spec
	size := func(flag, v string) (int, int, error) {
		n, g, ok := strings.Cut(v, "x")
		count, err1 := strconv.Atoi(n)
		gpus, err2 := strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil || count < 1 || count > 500 || gpus < 1 || gpus > 16 {
			return 0, 0, fmt.Errorf("%s %q is not allowed: NODESxGPUS such as 1x2, 1 to 500 nodes of 1 to 16 GPUs", flag, v)
		}
		return count, gpus, nil
	}
	for i, v := range fixed {
		dims, layout, hasLayout := strings.Cut(v, ":")
		count, gpus, err := size("--mig", dims)
		if err != nil {
			return nil, err
		}
		profiles := defaultMIGLayout
		if hasLayout {
			profiles = strings.Split(layout, "+")
		}
		prefix := "mig"
		if i > 0 {
			prefix = fmt.Sprintf("mig%d", i+1)
		}
		out = append(out, simnode.Spec{Prefix: prefix, Count: count, GPUs: gpus, GPUType: gpuType, GPUMemoryMi: memMi,
			CPU: "128", Memory: "1Ti", MIGLayout: profiles})
	}
	for i, v := range dynamic {
		count, gpus, err := size("--mig-dynamic", v)
		if err != nil {
			return nil, err
		}
		prefix := "migdyn"
		if i > 0 {
			prefix = fmt.Sprintf("migdyn%d", i+1)
		}
		out = append(out, simnode.Spec{Prefix: prefix, Count: count, GPUs: gpus, GPUType: gpuType, GPUMemoryMi: memMi,
			CPU: "128", Memory: "1Ti", MIGDynamic: true})
	}
	for _, s := range out {
		if err := s.CheckMIG(); err != nil {
			return nil, fmt.Errorf("--mig: %w", err)
		}
	}
	return out, nil
}
