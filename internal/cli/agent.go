package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
)

func newAgentCmd() *cobra.Command {
	var mpsHost bool
	var kubeconfig, node, sharing, compute, delivery, onFailure, socket, library, sharingRoot, hamiLibrary, mpsControl, procRoot, nriReady, runtimeClass, cdiIDs string
	var onTrust bool
	var interval time.Duration
	var ignoredXIDs []uint
	var metricsPort int
	cmd := &cobra.Command{
		Use:     "agent",
		GroupID: "run",
		Short:   "Run the per-node agent on a GPU node (the Helm chart's DaemonSet)",
		Long: `Report this node's GPUs to Allot: each device's UUID, model, memory, MIG mode, NUMA node and
NVLink group (read through NVIDIA's NVML), how busy each is and how much memory it uses
(every --interval), the devices the kubelet gave each pod (from its PodResources API), and
devices that fail (NVML's critical XID and ECC events, or a device off the bus). Serves
per-device metrics under DCGM exporter's names. --sharing declares how GPU sharing is
enforced on the node (the allot.dev/gpu-sharing label).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return errors.New("--node-name is required (the chart sets NODE_NAME from the pod's spec.nodeName)")
			}
			if _, err := v1alpha1.ParseSharing(sharing); err != nil {
				return fmt.Errorf("--sharing: %w", err)
			}
			if _, err := v1alpha1.ParseComputeMode("--compute", compute); err != nil {
				return err
			}
			if delivery != "" && delivery != agent.DeliveryAuto {
				if _, err := v1alpha1.ParseDelivery(delivery); err != nil || delivery == "" {
					return fmt.Errorf("--delivery %q is not allowed: cdi, env or auto", delivery)
				}
			}
			if interval < time.Second {
				return fmt.Errorf("--interval %s is not allowed: at least 1s", interval)
			}
			if procRoot != "" && !filepath.IsAbs(procRoot) {
				return fmt.Errorf("--proc-root %q is not allowed: an absolute path, where the host's /proc is mounted", procRoot)
			}
			var rc *rest.Config
			var err error
			if kubeconfig == "" {
				rc, err = rest.InClusterConfig()
			} else {
				rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			}
			if err != nil {
				return fmt.Errorf("no cluster configuration (in a pod, or pass --kubeconfig): %w", err)
			}
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			pr, closeConn, err := agent.DialPodResources(socket)
			if err != nil {
				return err
			}
			defer closeConn()
			var opts []nvml.LibraryOption
			if library != "" {
				opts = append(opts, nvml.WithLibraryPath(library))
			}
			reg := prometheus.NewRegistry()
			metrics := agent.NewMetrics()
			reg.MustRegister(metrics.Collectors()...)
			ignored := make([]uint64, len(ignoredXIDs))
			for i, x := range ignoredXIDs {
				ignored[i] = uint64(x)
			}
			a, err := agent.New(client, agent.Options{IgnoredXIDs: ignored, Node: node, NVML: nvml.New(opts...), PodResources: pr, PodResourcesSocket: socket, Sharing: sharing, Compute: compute, FractionsOnTrust: onTrust, Delivery: delivery, OnGPUFailure: onFailure, MPSHost: mpsHost,
				Interval: interval, Version: Version, Metrics: metrics, SharingRoot: sharingRoot, HAMiCoreLibrary: hamiLibrary, MPSControl: mpsControl, ProcRoot: procRoot,
				NRIReadyFile: nriReady, SharingRuntimeClass: runtimeClass, CDIDeviceIDs: cdiIDs})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if metricsPort > 0 {
				l, err := net.Listen("tcp", fmt.Sprintf(":%d", metricsPort))
				if err != nil {
					return fmt.Errorf("--metrics-port %d: %w", metricsPort, err)
				}
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				// Liveness: the loop ran within three intervals. Readiness: it reports,
				// and the kubelet and the API server answered it last time.
				mux.HandleFunc("/healthz", probe(func() error { return a.Live(3 * interval) }))
				mux.HandleFunc("/readyz", probe(a.Ready))
				srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
				go func() { _ = srv.Serve(l) }()
				defer srv.Close()
			}
			slog.Info("allot agent: reporting", "node", node, "sharing", sharing)
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: the in-cluster configuration)")
	f.StringVar(&node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default: $NODE_NAME)")
	f.BoolVar(&onTrust, "fractions-on-trust", false, "where --sharing is none (or none is declared), let pods take slices of this node's GPUs on trust: nothing holds them to their share (label allot.dev/gpu-fractions-on-trust); without it such a node takes no slice (the chart's agent.pools[].fractionsOnTrust)")
	f.StringVar(&compute, "compute", "", "the loosest compute mode this node's sharing pods may run in: capped (each held to its compute share at all times), fair (held to it only while others use the GPU) or shared (no compute cap; memory still held); a pod may ask a stricter one (allot.dev/gpu-compute-mode). Empty: capped (label allot.dev/gpu-compute-mode; the chart's agent.pools[].compute)")
	f.StringVar(&sharing, "sharing", "", "how GPU sharing is enforced on this node: mps, hami-core or none (empty: keep the node's allot.dev/gpu-sharing label)")
	f.StringVar(&delivery, "delivery", "", "how this node's container runtime gives a pod sharing a GPU its device: cdi (Allot's NRI plugin injects the CDI device the scheduler names in the pod's annotations), env (the NVIDIA runtime in legacy mode reads NVIDIA_VISIBLE_DEVICES), auto (read from the GPU Operator's ClusterPolicy); empty keeps the node's allot.dev/gpu-delivery label")
	f.StringVar(&nriReady, "nri-ready-file", "", "the file allot nri-plugin writes once registered with the container runtime: cdi is declared only if it is there when the agent starts (empty: not checked)")
	f.StringVar(&cdiIDs, "cdi-device-ids", "", "how NVIDIA's device plugin names this node's GPUs in its CDI spec, as its DEVICE_ID_STRATEGY: uuid (its default) or index (empty: keep the node's allot.dev/cdi-device-ids label)")
	f.StringVar(&runtimeClass, "sharing-runtime-class", "", "the runtime class sharing pods are given (the chart's sharing.runtimeClassName): with --delivery auto on a GPU Operator with CDI on, env is declared only with one")
	f.BoolVar(&mpsHost, "mps-host", false, "mps: the MPS daemons are started by allot mps-host (a container of their own, so that they outlive the agent's) rather than by the agent")
	f.StringVar(&onFailure, "on-gpu-failure", agent.FailureEvent, "what happens to a pod on a GPU that fails: event (an Event; its owner decides) or evict (the pod is deleted, so that its Job, Deployment or gang starts it again on a healthy GPU)")
	f.StringVar(&socket, "pod-resources-socket", agent.DefaultPodResourcesSocket, "the kubelet's PodResources API socket")
	f.StringVar(&library, "nvml-library", "", "path of libnvidia-ml.so.1 (default: found by the dynamic loader)")
	f.StringVar(&sharingRoot, "sharing-root", "", "host directory shared with pods sharing a GPU: MPS pipes and HAMi-core's library go there (needed by mps and hami-core)")
	f.StringVar(&hamiLibrary, "hami-core-library", "", "HAMi-core's libvgpu.so as the container sees it, copied under --sharing-root for sharing pods to preload (hami-core)")
	f.StringVar(&mpsControl, "mps-control", agent.DefaultMPSControl, "NVIDIA's MPS control program (mps)")
	f.StringVar(&procRoot, "proc-root", "", "the host's /proc as this container sees it (the chart mounts it at /host/proc): each pod's GPU memory is measured from the cgroups of the processes NVML lists on its GPUs (allot.dev/gpu-memory-used-mib); empty: not measured")
	f.UintSliceVar(&ignoredXIDs, "ignored-xids", nil, "XIDs that fail no device on this node (beside those NVIDIA's catalogue puts down to the application, such as 13 and 43), e.g. --ignored-xids 63,64")
	f.DurationVar(&interval, "interval", 10*time.Second, "how often to report utilisation and memory")
	f.IntVar(&metricsPort, "metrics-port", 9400, "serve per-device metrics at /metrics on this port, as DCGM exporter does (0: none)")
	cmd.AddCommand(newAgentInventoryCmd()) // hidden: checks the NVML paths on a real GPU
	return cmd
}

func probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}
}

func newMPSHostCmd() *cobra.Command {
	var root, control, shm string
	cmd := &cobra.Command{
		Use:     "mps-host",
		GroupID: "run",
		Short:   "Keep the MPS control daemons a node's agent asks for (a container of the agent's pod)",
		Long: `Start an MPS control daemon (NVIDIA's nvidia-cuda-mps-control -d) for each GPU the node's
allot agent marks as wanting one under --sharing-root, and start it again if it stops
answering. The daemons are processes of this container, so they outlive restarts of the
agent's; the agent holds them to their limits and quits them through their pipes.

An MPS server and its clients talk through POSIX shared memory: this container's /dev/shm
must be the sharing root's shm/mps, which sharing pods on the node are given as theirs
(--shm names it as this container sees it; the chart mounts it there).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !filepath.IsAbs(root) {
				return fmt.Errorf("--sharing-root %q is not allowed: an absolute path, the agent's --sharing-root", root)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			slog.Info("allot mps-host: keeping MPS daemons", "sharingRoot", root)
			return agent.MPSHost{SharingRoot: root, Control: control, Shm: shm, NVML: nvml.New()}.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&root, "sharing-root", "", "the agent's --sharing-root")
	cmd.Flags().StringVar(&control, "mps-control", agent.DefaultMPSControl, "NVIDIA's MPS control program")
	cmd.Flags().StringVar(&shm, "shm", "/dev/shm", "this container's /dev/shm, which must be the sharing root's shm/mps; empty: not checked")
	return cmd
}
