package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/admission"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/metricsapi"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

func newSchedulerCmd() *cobra.Command {
	var kubeconfig, identity, placement, gpuPolicy string
	var leaderElect bool
	var lease scheduler.Lease
	var gangGrace, usageHalfLife, interruptionGrace time.Duration
	var mcManager, mcWorker bool
	var mcLostAfter time.Duration
	var mcLeaseNamespace string
	var usageStrength float64
	var webhookPort, metricsPort, customMetricsPort int
	var warmup time.Duration
	var certDir, sharingRoot, cdiKind, runtimeClass string
	var deviceRecorders, adopt, accelerators, foreignExempt []string
	var foreignGPUPods string
	var defaultGPUMemory string
	cmd := &cobra.Command{
		Use:     "scheduler",
		GroupID: "run",
		Short:   "Run the Allot scheduler against a cluster (pods with schedulerName: allot)",
		Long: `Schedule the pods that set schedulerName: allot on the cluster of --kubeconfig (or, inside
a pod, the in-cluster configuration). With --leader-elect, replicas take turns through a
Lease in kube-system, so that only one schedules at a time. The same process runs the
controller that makes gangs (PodGroups) of Jobs, JobSets, Kubeflow jobs, TrainJobs,
RayClusters and LeaderWorkerSet groups (docs/integrations.md), and with --webhook-port the
admission webhooks (the Helm chart registers them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lease.Duration <= 0 || lease.RenewDeadline <= 0 || lease.RetryPeriod <= 0 ||
				lease.RenewDeadline >= lease.Duration || lease.RetryPeriod >= lease.RenewDeadline {
				return fmt.Errorf("--leader-elect-lease-duration %s, --leader-elect-renew-deadline %s, --leader-elect-retry-period %s are not allowed: each positive, and retry period < renew deadline < lease duration",
					lease.Duration, lease.RenewDeadline, lease.RetryPeriod)
			}
			if err := engine.CheckUsageStrength(usageStrength); err != nil {
				return fmt.Errorf("--usage-strength %w", err)
			}
			if usageHalfLife <= 0 {
				return fmt.Errorf("--usage-half-life %s is not allowed: a positive duration such as 24h or 168h", usageHalfLife)
			}
			if mcManager && mcLostAfter < 2*multicluster.DefaultLeaseDuration {
				return fmt.Errorf("--multicluster-lost-after %s is not allowed: at least twice the manager's lease on its workers (%s), so that a lost worker has suspended its Jobs and their pods have stopped before they are dispatched again", mcLostAfter, 2*multicluster.DefaultLeaseDuration)
			}
			if interruptionGrace <= 0 {
				return fmt.Errorf("--interruption-grace %s is not allowed: a positive duration such as 60s (clouds give about two minutes' notice of a spot interruption)", interruptionGrace)
			}
			pl, err := engine.ParsePlacement(placement)
			if err != nil {
				return fmt.Errorf("--placement: %w", err)
			}
			gp, err := engine.ParsePacking(gpuPolicy)
			if err != nil {
				return fmt.Errorf("--gpu-policy: %w", err)
			}
			kinds, err := convert.ParseAccelerators(accelerators)
			if err != nil {
				return err
			}
			var rc *rest.Config
			if kubeconfig == "" {
				rc, err = rest.InClusterConfig()
			} else {
				rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			}
			if err != nil {
				return fmt.Errorf("no cluster: %w (set --kubeconfig)", err)
			}
			if _, err := applyMemoryLimit(); err != nil {
				return err
			}
			if schedulerClientHook != nil {
				schedulerClientHook(rc)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if identity == "" {
				identity = defaultIdentity(os.Getenv("POD_NAME"), time.Now())
			}
			opts := stack.Options{Scheduler: scheduler.Options{Engine: engine.Options{Placement: pl, GPUPacking: gp, GangGrace: gangGrace, UsageStrength: usageStrength}, Accelerators: kinds,
				UsageHalfLife: usageHalfLife, LeaderElection: leaderElect, Identity: identity, Lease: lease, SharingRoot: sharingRoot,
				CDIKind: cdiKind, DeviceRecorders: deviceRecorders, InterruptionGrace: interruptionGrace}, SharingRuntimeClass: runtimeClass,
				CustomMetricsWarmup: warmup}
			if mcManager {
				opts.Manager = &multicluster.Options{Name: "allot-manager", LostAfter: mcLostAfter, Namespace: mcLeaseNamespace}
			}
			if mcWorker {
				opts.FenceNamespace = mcLeaseNamespace
			}
			if warmup < time.Second {
				return fmt.Errorf("--gpu-utilization-warmup %s is not allowed: 1s or more (a reading needs the agent's interval; default %s)", warmup, metricsapi.DefaultWarmup)
			}
			if msg := admission.ForeignFlagProblem(foreignGPUPods); msg != "" {
				return errors.New(msg)
			}
			if opts.Peers, err = peersFromFlags(adopt, defaultGPUMemory); err != nil {
				return err
			}
			opts.Peers.ForeignGPUPods, opts.Peers.ForeignExempt = foreignGPUPods, foreignExempt
			if sharingRoot != "" && !filepath.IsAbs(sharingRoot) {
				return fmt.Errorf("--sharing-root %q is not allowed: an absolute path on the nodes, such as /run/allot/sharing", sharingRoot)
			}
			if webhookPort > 0 {
				if opts.Cert, err = admission.CertFiles(ctx, certDir); err != nil {
					return err
				}
				if opts.Webhook, err = net.Listen("tcp", fmt.Sprintf(":%d", webhookPort)); err != nil {
					return fmt.Errorf("--webhook-port %d: %w", webhookPort, err)
				}
			}
			if metricsPort > 0 {
				if opts.Metrics, err = net.Listen("tcp", fmt.Sprintf(":%d", metricsPort)); err != nil {
					return fmt.Errorf("--metrics-port %d: %w", metricsPort, err)
				}
			}
			if customMetricsPort > 0 {
				// The APIService trusts the webhook's CA: the same certificate serves both.
				if opts.CustomMetricsCert, err = admission.CertFiles(ctx, certDir); err != nil {
					return err
				}
				if opts.CustomMetrics, err = net.Listen("tcp", fmt.Sprintf(":%d", customMetricsPort)); err != nil {
					return fmt.Errorf("--custom-metrics-port %d: %w", customMetricsPort, err)
				}
			}
			return stack.Run(ctx, rc, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster; empty inside a pod")
	f.BoolVar(&leaderElect, "leader-elect", false, "take turns with other replicas through a Lease")
	f.StringVar(&identity, "identity", "", "this replica's name in leader election (default: $POD_NAME_<start>, as the chart sets POD_NAME, else generated)")
	f.DurationVar(&gangGrace, "gang-grace", engine.DefaultGangGrace, "how long a gang may run with fewer than its minimum of pods before the rest are stopped so that it restarts whole (negative: never)")
	f.DurationVar(&lease.Duration, "leader-elect-lease-duration", 3*time.Second, "how long a standby waits after the leader's last renewal before taking over")
	f.DurationVar(&lease.RenewDeadline, "leader-elect-renew-deadline", 2*time.Second, "how long the leader keeps trying to renew before it stops (less than the lease duration)")
	f.DurationVar(&lease.RetryPeriod, "leader-elect-retry-period", 250*time.Millisecond, "how often replicas try to take or renew the Lease")
	f.IntVar(&webhookPort, "webhook-port", 0, "serve the admission webhooks on this port (0: none)")
	f.StringVar(&certDir, "webhook-cert-dir", "/etc/allot/webhook", "directory with the webhooks' tls.crt and tls.key (reloaded when they change)")
	f.IntVar(&metricsPort, "metrics-port", 0, "serve Prometheus metrics at /metrics on this port (0: none)")
	f.DurationVar(&warmup, "gpu-utilization-warmup", metricsapi.DefaultWarmup, "how long an inference pod runs before the custom metrics API counts its GPU utilisation: a server still loading its model reads idle, and its autoscaler would take it away (raise it for large models)")
	f.IntVar(&customMetricsPort, "custom-metrics-port", 0, "serve the custom metrics API (custom.metrics.k8s.io: GPU utilisation for HorizontalPodAutoscalers) on this port, with the --webhook-cert-dir certificate; the chart registers its APIService (0: none)")
	f.StringVar(&placement, "placement", "allot", "placement policy: allot, binpack, spread, best-fit, gpu-packing, fgd, random")
	f.StringVar(&gpuPolicy, "gpu-policy", "", "how a node's GPUs are chosen, apart from nodes: binpack or spread (empty: as --placement; a pod's allot.dev/gpu-policy overrides)")
	f.StringVar(&sharingRoot, "sharing-root", "", "host directory the nodes' agents share with pods sharing a GPU (MPS pipes, HAMi-core's library), mounted into them by the webhook (empty: none, for clusters whose nodes do not enforce sharing)")
	f.StringVar(&cdiKind, "cdi-kind", v1alpha1.DefaultCDIKind, "the CDI kind a sharing pod's GPU is named by on nodes whose delivery is cdi (the device plugin's spec names GPUs by UUID under this kind; nvidia.com/gpu for a spec made with nvidia-ctk)")
	f.StringVar(&runtimeClass, "sharing-runtime-class", "", "runtime class the webhook gives pods sharing a GPU that name none: where their device goes by environment and the node's default runtime is not NVIDIA's (nvidia-legacy under the GPU Operator with CDI on, nvidia with it off)")
	f.StringSliceVar(&adopt, "adopt-scheduler-names", nil, "other schedulers whose pods the webhook takes over, rewriting their schedulerName to allot (kai-scheduler, hami-scheduler); the chart registers the webhook for them (webhook.adoptSchedulerNames)")
	f.StringVar(&foreignGPUPods, "foreign-gpu-pods", admission.ForeignAdopt, "what becomes of a pod of another scheduler (kube-scheduler's, with no schedulerName) asking for GPUs in a tenant's namespace (one a Queue names, or one labelled with a default queue): adopt (its schedulerName is rewritten to allot), refuse, or off; the chart registers the webhook for them (webhook.foreignGPUPods)")
	f.StringSliceVar(&foreignExempt, "foreign-gpu-pods-exempt", nil, "namespaces --foreign-gpu-pods leaves alone besides kube-system, kube-public, kube-node-lease and allot-system, such as gpu-operator (webhook.foreignGPUPodsExempt)")
	f.StringVar(&defaultGPUMemory, "default-gpu-memory", "", "HAMi's default device memory: a pod that came through HAMi's names (schedulerName hami-scheduler taken over, or HAMi's annotations) and asks for nvidia.com/gpu: N with no memory gets a slice of this much of each of N GPUs, such as 10Gi (empty: whole GPUs; pods written for Allot always get whole GPUs)")
	f.StringSliceVar(&deviceRecorders, "device-recorders", nil, "users who may record on a pod the devices the kubelet gave it (the agents' service account), kept by the API server's allot-pod-fields policy when the scheduler installs it")
	f.StringArrayVar(&accelerators, "accelerators", []string{strings.Join(convert.DefaultAcceleratorNames(), ",")},
		"kinds of other vendors' accelerators to schedule besides NVIDIA's GPUs, at most "+strconv.Itoa(engine.MaxAccelerators)+" (repeatable): "+convert.AcceleratorsFlagForms)
	f.Float64Var(&usageStrength, "usage-strength", 0, "how much a queue's past use above quota lowers its part of idle GPUs: 0 ignores it, 1 is strong (quotas are never touched)")
	f.DurationVar(&usageHalfLife, "usage-half-life", engine.DefaultUsageHalfLife, "how fast past use is forgotten: it counts half after this long")
	f.DurationVar(&interruptionGrace, "interruption-grace", scheduler.DefaultInterruptionGrace, "how long after a node's interruption notice (a spot node's cloud taking it back) its pods are stopped: the time they are told to checkpoint in (annotation allot.dev/interruption)")
	f.BoolVar(&mcManager, "multicluster-manager", false, "also run the multi-cluster manager: Jobs with spec.managedBy "+multicluster.ManagedBy+" are dispatched to the WorkerClusters (docs/multicluster.md)")
	f.DurationVar(&mcLostAfter, "multicluster-lost-after", multicluster.DefaultLostAfter, "how long a worker cluster may not answer the manager before its Jobs are dispatched again elsewhere (at least twice the 5m lease)")
	f.BoolVar(&mcWorker, "multicluster-worker", false, "this cluster is a worker of a multi-cluster manager: when the manager's lease here runs out (5 minutes without it), the Jobs it dispatched here are suspended, so that none runs here and elsewhere at once")
	f.StringVar(&mcLeaseNamespace, "multicluster-lease-namespace", "allot-system", "namespace of the manager's lease on its workers: where a manager renews it, and where a worker's fence reads it")
	return cmd
}

// peersFromFlags reads --adopt-scheduler-names and --default-gpu-memory.
func peersFromFlags(adopt []string, defaultGPUMemory string) (admission.Peers, error) {
	var p admission.Peers
	for _, a := range adopt {
		if !slices.Contains(admission.PeerSchedulers, a) {
			return p, fmt.Errorf("--adopt-scheduler-names %q is not allowed: %s", a, strings.Join(admission.PeerSchedulers, ", "))
		}
	}
	p.AdoptSchedulers = adopt
	if defaultGPUMemory != "" {
		q, err := resource.ParseQuantity(defaultGPUMemory)
		v, whole := q.AsInt64()
		if err != nil || !whole || v <= 0 || v > 1<<50 {
			return p, fmt.Errorf("--default-gpu-memory %q is not allowed: a positive quantity of GPU memory such as 10Gi", defaultGPUMemory)
		}
		p.DefaultGPUMemory = v
	}
	return p, nil
}

// defaultIdentity is a replica's name in the Lease: its pod's, so that the Lease says which
// pod leads, with when this process started, so that a restarted container is another
// replica (it waits for the Lease like any standby, and the fence refuses its dead
// predecessor's late binds). Without a pod's name, "" (the scheduler generates one).
func defaultIdentity(pod string, start time.Time) string {
	if pod == "" {
		return ""
	}
	return pod + "_" + strconv.FormatInt(start.UnixNano(), 36)
}
