package ecosystem

import (
	"context"
	"errors"

	trainerv1alpha1 "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainercontroller "github.com/kubeflow/trainer/v2/pkg/controller"
	trainerruntime "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	rayconfig "github.com/ray-project/kuberay/ray-operator/apis/config/v1alpha1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/batchscheduler"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetcontrollers "sigs.k8s.io/jobset/pkg/controllers"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"
	lwscontrollers "sigs.k8s.io/lws/pkg/controllers"
	schedpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Each setup does what the project's own main does once its flags are read, with their
// defaults: no gang-scheduling provider or batch scheduler of theirs (Allot is the one
// that gangs), and nothing that would exit the process.
//
// Their webhooks are not run. The webhook packages of these versions call
// controller-runtime's ctrl.NewWebhookManagedBy(mgr), which v0.23 made generic
// (NewWebhookManagedBy(mgr, obj)), so they do not compile against Allot's v0.23.3; the
// versions written for the new call need k8s.io v0.36 and controller-runtime v0.24.
// What that leaves out is in docs/integrations.md; most visibly, LeaderWorkerSet's
// pod webhook labels each pod with its group: without it the groups' pods are made but
// their group labels are empty, and the LWS's status is not worked out.
// KubeRay's webhook is off by default in its own operator too.

var projects = map[string]project{
	LWS: {
		module: "sigs.k8s.io/lws",
		crds:   []string{"config/crd/bases"},
		scheme: schemes(clientgoscheme.AddToScheme, lwsv1.AddToScheme, volcanov1beta1.AddToScheme),
		setup: func(_ context.Context, _ *rest.Config, mgr ctrl.Manager) error {
			recorder := mgr.GetEventRecorderFor("leaderworkerset") //nolint:staticcheck // the reconcilers take the old recorder
			return errors.Join(
				lwscontrollers.SetupIndexes(mgr.GetFieldIndexer()),
				lwscontrollers.NewLeaderWorkerSetReconciler(mgr.GetClient(), mgr.GetScheme(), recorder).SetupWithManager(mgr),
				lwscontrollers.NewPodReconciler(mgr.GetClient(), mgr.GetScheme(), recorder, nil).SetupWithManager(mgr),
			)
		},
	},
	JobSet: {
		module: "sigs.k8s.io/jobset",
		crds:   []string{"config/components/crd/bases"},
		scheme: schemes(clientgoscheme.AddToScheme, jobsetv1alpha2.AddToScheme),
		setup: func(ctx context.Context, _ *rest.Config, mgr ctrl.Manager) error {
			return errors.Join(
				jobsetcontrollers.SetupJobSetIndexes(ctx, mgr.GetFieldIndexer()),
				jobsetcontrollers.SetupPodIndexes(ctx, mgr.GetFieldIndexer()),
				jobsetcontrollers.NewJobSetReconciler(mgr.GetClient(), mgr.GetScheme(), mgr.GetEventRecorderFor("jobset")).SetupWithManager(mgr), //nolint:staticcheck
				jobsetcontrollers.NewPodReconciler(mgr.GetClient(), mgr.GetScheme(), mgr.GetEventRecorderFor("pod")).SetupWithManager(mgr),       //nolint:staticcheck
			)
		},
	},
	Trainer: {
		module: "github.com/kubeflow/trainer/v2",
		crds:   []string{"manifests/base/crds"},
		needs:  []string{JobSet},
		scheme: schemes(clientgoscheme.AddToScheme, trainerv1alpha1.AddToScheme, jobsetv1alpha2.AddToScheme,
			schedpluginsv1alpha1.AddToScheme, volcanov1beta1.AddToScheme),
		options: func(o *ctrl.Options) error {
			// The runtimes read their templates' objects unstructured, through the cache.
			o.Client = client.Options{Cache: &client.CacheOptions{Unstructured: true}}
			return nil
		},
		setup: func(ctx context.Context, _ *rest.Config, mgr ctrl.Manager) error {
			runtimes, err := trainerruntime.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer())
			if err != nil {
				return err
			}
			_, err = trainercontroller.SetupControllers(mgr, runtimes, controller.Options{})
			return err
		},
	},
	Ray: {
		module: "github.com/ray-project/kuberay/ray-operator",
		crds:   []string{"config/crd/bases"},
		scheme: schemes(clientgoscheme.AddToScheme, rayv1.AddToScheme, batchv1.AddToScheme),
		options: func(o *ctrl.Options) error {
			// Its RayJob submitters are Jobs; it watches only those it made.
			created, err := labels.NewRequirement(rayutils.KubernetesCreatedByLabelKey, selection.Equals, []string{rayutils.ComponentName})
			if err != nil {
				return err
			}
			o.Cache.ByObject = map[client.Object]cache.ByObject{&batchv1.Job{}: {Label: labels.NewSelector().Add(*created)}}
			return nil
		},
		setup: func(ctx context.Context, cfg *rest.Config, mgr ctrl.Manager) error {
			var config rayconfig.Configuration
			rayconfig.SetDefaults_Configuration(&config)
			batch, err := batchscheduler.NewSchedulerManager(ctx, config, cfg, mgr.GetClient())
			if err != nil {
				return err
			}
			batch.AddToScheme(mgr.GetScheme())
			concurrency := config.ReconcileConcurrency
			return errors.Join(
				ray.NewReconciler(ctx, mgr, ray.RayClusterReconcilerOptions{BatchSchedulerManager: batch}).SetupWithManager(mgr, concurrency),
				ray.NewRayServiceReconciler(ctx, mgr, config).SetupWithManager(mgr, concurrency),
				ray.NewRayJobReconciler(ctx, mgr, ray.RayJobReconcilerOptions{BatchSchedulerManager: batch}, config).SetupWithManager(mgr, concurrency),
			)
		},
	},
}

func schemes(add ...func(*runtime.Scheme) error) func(*runtime.Scheme) error {
	return func(s *runtime.Scheme) error {
		for _, a := range add {
			if err := a(s); err != nil {
				return err
			}
		}
		return nil
	}
}
