package ecosystem

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// project is what Start needs to know of one project: its module, where the module keeps
// its CRDs, and how its own main sets its manager up.
type project struct {
	module  string
	crds    []string // folders of CRD files in the module
	needs   []string
	scheme  func(*runtime.Scheme) error
	options func(*ctrl.Options) error
	setup   func(ctx context.Context, cfg *rest.Config, mgr ctrl.Manager) error
}

// version is the module's version as linked into this binary, for help texts (which must
// not run the go command).
func (p project) version() string {
	if v := linkedVersion(p.module); v != "" {
		return v
	}
	return "as in go.mod"
}

// The projects log through controller-runtime's global logger. Only its first setting
// takes, so where the process set one already (Allot's admission server does) that one
// stands; otherwise it is klog, where the control plane's logs go.
var setLogger sync.Once

// run starts one project's manager and returns once its caches are synced.
func run(ctx context.Context, cfg *rest.Config, name string, p project) error {
	setLogger.Do(func() { ctrllog.SetLogger(klog.Background().WithName("ecosystem")) })
	scheme := runtime.NewScheme()
	if err := p.scheme(scheme); err != nil {
		return err
	}
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		// Several projects name a controller "pod"; their managers share this process.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Logger:     ctrllog.Log.WithName(name),
	}
	if p.options != nil {
		if err := p.options(&opts); err != nil {
			return err
		}
	}
	// Their kinds have no protobuf form, and a client config of Allot's may ask for it.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType, cfg.AcceptContentTypes = "", ""
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("creating its manager: %w", err)
	}
	if err := p.setup(ctx, cfg, mgr); err != nil {
		return fmt.Errorf("setting its controllers up: %w", err)
	}
	failed := make(chan error, 1)
	go func() {
		if err := mgr.Start(ctx); err != nil {
			klog.ErrorS(err, "a project's controller manager stopped", "project", name)
			failed <- err
		}
	}()
	synced := make(chan bool, 1)
	go func() { synced <- mgr.GetCache().WaitForCacheSync(ctx) }()
	select {
	case err := <-failed:
		return fmt.Errorf("its manager failed to start: %w", err)
	case ok := <-synced:
		if !ok {
			return fmt.Errorf("its caches did not sync: %w", context.Cause(ctx))
		}
	}
	return nil
}
