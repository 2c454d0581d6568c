package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/controller-manager/pkg/healthz"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
)

// controllers are the kube-controller-manager loops the embedded cluster runs: everything a
// workload on simulated nodes touches. Left out are the loops that need real machines or a
// cloud (node IPAM, volume attach/detach and binding, CSR signing, service load balancers),
// so that a laptop spends its CPU on scheduling.
var controllers = []string{
	"serviceaccount-controller", "root-ca-certificate-publisher-controller",
	"namespace-controller", "garbage-collector-controller", "pod-garbage-collector-controller",
	"job-controller", "cronjob-controller", "ttl-after-finished-controller",
	"deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller",
	"replicationcontroller-controller", "disruption-controller", "resourcequota-controller",
	"endpoints-controller", "endpointslice-controller", "clusterrole-aggregation-controller",
	// Makes a pod's ResourceClaims from its templates, and frees a claim once no pod uses
	// it: the half of DRA that is not the scheduler's.
	"resourceclaim-controller",
	// Scales Deployments on the custom metrics API (allot submit --inference --replicas,
	// the GPU utilisation Allot's scheduler serves as an aggregated API).
	"horizontal-pod-autoscaler-controller",
}

// startControllers runs kube-controller-manager from the upstream module in this process,
// without leader election or a serving port, against the API server rc points at.
func startControllers(ctx context.Context, dir string, rc *rest.Config) (<-chan error, error) {
	kubeconfig := filepath.Join(dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(rc, kubeconfig); err != nil {
		return nil, err
	}
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	s.Generic.ClientConnection.Kubeconfig = kubeconfig
	s.Generic.ClientConnection.QPS = 500
	s.Generic.ClientConnection.Burst = 1000
	s.Generic.LeaderElection.LeaderElect = false
	s.Generic.Controllers = controllers
	s.SecureServing.BindPort = 0
	s.SAController.RootCAFile = filepath.Join(dir, "pki", "ca.crt")
	// Upstream looks every 15 s; a laptop's cluster answers a load change sooner.
	s.HPAController.HorizontalPodAutoscalerSyncPeriod.Duration = 5 * time.Second
	cfg, err := s.Config(ctx, app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases())
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	c := cfg.Complete()
	// The pieces of app.Run without its HTTP server, and with errors returned rather than
	// ending the process: a test that stops early must not take the test binary with it.
	builder := clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}
	cctx, err := app.CreateControllerContext(ctx, c, builder, builder)
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager: %w", err)
	}
	descriptors := app.NewControllerDescriptors()
	// Pods get projected tokens from the TokenRequest API; the legacy token-secret
	// controller is not needed.
	delete(descriptors, names.ServiceAccountTokenController)
	built, err := app.BuildControllers(ctx, cctx, descriptors, nil, healthz.NewMutableHealthzHandler())
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager: %w", err)
	}
	c.EventBroadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	cctx.InformerFactory.Start(ctx.Done())
	cctx.ObjectOrMetadataInformerFactory.Start(ctx.Done())
	close(cctx.InformersStarted)
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer c.EventBroadcaster.Shutdown()
		if !app.RunControllers(ctx, cctx, built, 0, c.ControllerShutdownTimeout) {
			done <- fmt.Errorf("kube-controller-manager: controllers did not stop within %v", c.ControllerShutdownTimeout)
		}
	}()
	return done, nil
}
