// Package stack starts what Allot runs against a cluster, in one process: the admission
// webhooks, the workload controller that makes gangs of Jobs, the idle controller, and the
// scheduler. `allot up`
// and the integration tests run it next to the embedded control plane; `allot scheduler`
// runs it on a real cluster.
package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/admission"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/consumption"
	"github.com/allot-dev/allot/kube/idle"
	"github.com/allot-dev/allot/kube/metricsapi"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/workload"
)

// Options say what to run.
type Options struct {
	Scheduler scheduler.Options
	// Webhook serves admission on this listener with this certificate; nil runs none.
	Webhook net.Listener
	Cert    func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Metrics serves Prometheus metrics at /metrics on this listener; nil serves none.
	Metrics net.Listener
	// SharingRuntimeClass is given by the webhook to sharing pods that name none (the
	// runtime class under which the NVIDIA runtime reads their device variable).
	SharingRuntimeClass string
	// Peers says which other schedulers' pods the webhook takes over, and HAMi's default
	// device memory.
	Peers admission.Peers
	// Idle tunes the idle controller (queues' idleTimeout); its Leading is the scheduler's.
	Idle idle.Options
	// CustomMetrics serves the custom metrics API (GPU utilisation, kube/metricsapi) on
	// this listener with CustomMetricsCert; nil serves none.
	CustomMetrics     net.Listener
	CustomMetricsCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// CustomMetricsWarmup is how long a pod runs before its reading counts
	// (metricsapi.DefaultWarmup when zero).
	CustomMetricsWarmup time.Duration
	// FenceNamespace, when set, runs the multi-cluster fence (kube/multicluster): on a
	// worker cluster, the Jobs a manager dispatched here are suspended once the manager's
	// lease in this namespace runs out.
	FenceNamespace string
	// Manager, when set, runs the multi-cluster manager (kube/multicluster) while this
	// replica leads: Jobs handed to it by spec.managedBy are dispatched to its
	// WorkerClusters.
	Manager *multicluster.Options
}

// Run runs until ctx ends; it returns the scheduler's error.
func Run(ctx context.Context, rc *rest.Config, opts Options) error {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(protobuf(rc))
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	allot, err := allotclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	var hooks *admission.Metrics
	gangs := workload.New(client, dyn, allot)
	if opts.Metrics != nil {
		var m *scheduler.Metrics
		m, hooks, opts.Idle.Consumption = newMetrics(gangs)
		m.Registry.MustRegister(opts.Scheduler.Collectors...)
		opts.Scheduler.Metrics = m
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(opts.Metrics); err != nil && !errors.Is(err, http.ErrServerClosed) {
				slog.Error("allot: metrics server stopped", "err", err)
			}
		}()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	}
	if opts.Webhook != nil {
		view, err := admission.NewView(ctx, client, allot)
		if err != nil {
			return err
		}
		// The webhooks know the scheduler's kinds of accelerator: they let through what it
		// schedules and refuse the rest at admission.
		kinds := opts.Scheduler.Accelerators
		opts.Peers.Accelerators = kinds
		m := &admission.Mutator{View: view, Owners: admission.DynamicOwners(dyn), SharingRoot: opts.Scheduler.SharingRoot,
			RuntimeClass: opts.SharingRuntimeClass, Peers: opts.Peers}
		go func() {
			if err := admission.Serve(ctx, opts.Webhook, opts.Cert, m, &admission.Validator{View: view, Accelerators: kinds, Peers: opts.Peers, SharingRoot: opts.Scheduler.SharingRoot},
				&admission.QueueValidator{View: view, Client: client, Allot: allot, Accelerators: kinds}, hooks); err != nil {
				// The API server then refuses Allot's pods with a webhook error: say why here.
				slog.Error("allot: admission webhooks stopped", "err", err)
			}
		}()
	}
	go gangs.Run(ctx)
	opts.Scheduler.RequireGPUEnv = opts.Webhook != nil
	s, err := scheduler.New(rc, opts.Scheduler)
	if err != nil {
		return err
	}
	opts.Idle.Leading, opts.Idle.Stores = s.Leading, s.Stores
	if opts.CustomMetrics != nil {
		go func() {
			// Discovery of the API waits until it serves: HPAs see it as unavailable meanwhile.
			// It reads the scheduler's informers: one copy of every pod in the process.
			srv, err := metricsapi.New(ctx, client, s.Stores)
			if err == nil {
				srv.Warmup, srv.Simulated = opts.CustomMetricsWarmup, opts.Idle.Simulated
				err = srv.Serve(ctx, opts.CustomMetrics, opts.CustomMetricsCert)
			}
			if err != nil && ctx.Err() == nil {
				slog.Error("allot: custom metrics API stopped (HorizontalPodAutoscalers on GPU utilisation cannot read it)", "err", err)
			}
		}()
	}
	if opts.Idle.Now == nil {
		opts.Idle.Now = opts.Scheduler.Now
	}
	go idle.New(client, dyn, allot, opts.Idle).Run(ctx)
	if opts.Manager != nil {
		mo := *opts.Manager
		mo.Leading = s.Leading
		go multicluster.New(client, allot, mo).Run(ctx)
	}
	if opts.FenceNamespace != "" {
		go (&multicluster.Fence{Client: client, Namespace: opts.FenceNamespace, Now: opts.Scheduler.Now}).Run(ctx)
	}
	return s.Run(ctx)
}

// newMetrics puts the process's series in one registry, served together at /metrics: the
// scheduler's, the webhooks', the workload controller's and the GPU consumption's.
func newMetrics(gangs *workload.Controller) (*scheduler.Metrics, *admission.Metrics, *consumption.Metrics) {
	m := scheduler.NewMetrics()
	hooks := admission.NewMetrics()
	cons := consumption.NewMetrics()
	m.Registry.MustRegister(append(append(hooks.Collectors(), gangs.Collectors()...), cons.Collectors()...)...)
	return m, hooks, cons
}

func protobuf(rc *rest.Config) *rest.Config {
	rc = rest.CopyConfig(rc)
	rc.ContentType = runtime.ContentTypeProtobuf
	return rc
}

// Running is a stack started by Local.
type Running struct {
	Done       <-chan error // the scheduler's end
	MetricsURL string       // where Prometheus metrics are served
}

// Local runs the stack next to an embedded control plane: the webhooks listen on a
// loopback port with a self-signed certificate kept under dataDir, and are registered with
// the API server; metrics are served on another loopback port. It returns once the
// webhooks are registered.
func Local(ctx context.Context, rc *rest.Config, dataDir string, opts scheduler.Options) (*Running, error) {
	return LocalAs(ctx, rc, rc, dataDir, "", opts)
}

// LocalAs is Local with two identities, as the Helm chart installs Allot: admin registers
// the webhooks (the chart's objects), and everything else runs as identity (the pods'
// ServiceAccount), so that a test sees what the chart's RBAC allows.
// metricsAddr is where metrics are served, host:port; "" picks a free loopback port.
func LocalAs(ctx context.Context, admin, identity *rest.Config, dataDir, metricsAddr string, opts scheduler.Options) (*Running, error) {
	return LocalPeers(ctx, admin, identity, dataDir, metricsAddr, opts, admission.Peers{})
}

// LocalPeers is LocalAs with the webhook taking over other schedulers' pods as peers says.
func LocalPeers(ctx context.Context, admin, identity *rest.Config, dataDir, metricsAddr string, opts scheduler.Options, peers admission.Peers) (*Running, error) {
	return LocalWith(ctx, admin, identity, dataDir, metricsAddr, Options{Scheduler: opts, Peers: peers})
}

// LocalWith is LocalAs with every option of Run (the webhook's listener, certificate and
// the metrics listener are Local's own).
func LocalWith(ctx context.Context, admin, identity *rest.Config, dataDir, metricsAddr string, o Options) (*Running, error) {
	peers := o.Peers
	if o.Idle.Simulated == nil {
		// The embedded cluster's simulated nodes report their GPUs' use on the Node.
		o.Idle.Simulated = func(n *corev1.Node) bool { return n.Labels[v1alpha1.LabelSimulated] == "true" }
	}
	if metricsAddr == "" {
		metricsAddr = "127.0.0.1:0"
	}
	ca, err := admission.SelfSigned(filepath.Join(dataDir, "pki", "webhook"))
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	cert, err := admission.CertFiles(ctx, filepath.Join(dataDir, "pki", "webhook"))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	if err := admission.RegisterAdopting(ctx, client, "https://"+l.Addr().String(), ca, peers); err != nil {
		l.Close()
		return nil, fmt.Errorf("registering webhooks: %w", err)
	}
	ml, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("metrics address %s: %w", metricsAddr, err)
	}
	// The custom metrics API, on a loopback port, registered with the aggregator.
	cmDir := filepath.Join(dataDir, "pki", "custom-metrics")
	cmCA, err := metricsapi.LocalCert(cmDir)
	if err != nil {
		return nil, fmt.Errorf("custom metrics API certificate: %w", err)
	}
	cmCert, err := admission.CertFiles(ctx, cmDir)
	if err != nil {
		return nil, err
	}
	cml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := metricsapi.RegisterLocal(ctx, admin, cml.Addr().String(), cmCA); err != nil {
		cml.Close()
		return nil, fmt.Errorf("registering the custom metrics API: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		o.Webhook, o.Cert, o.Metrics, o.CustomMetrics, o.CustomMetricsCert = l, cert, ml, cml, cmCert
		done <- Run(ctx, identity, o)
	}()
	return &Running{Done: done, MetricsURL: "http://" + ml.Addr().String() + "/metrics"}, nil
}
