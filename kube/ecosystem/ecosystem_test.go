package ecosystem_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	trainerv1alpha1 "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/allot-dev/allot/kube/ecosystem"
	"github.com/allot-dev/allot/kube/kubetest"
)

func TestResolveNamesWhatIsAllowed(t *testing.T) {
	got, err := ecosystem.Resolve([]string{"trainer", "lws", "lws"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"jobset", "lws", "trainer"}; !slices.Equal(got, want) {
		t.Fatalf("Resolve(trainer, lws, lws) = %v, want %v (trainer brings jobset, each once)", got, want)
	}
	_, err = ecosystem.Resolve([]string{"kueue"})
	if err == nil || !strings.Contains(err.Error(), `"kueue"`) || !strings.Contains(err.Error(), "jobset, lws, ray, trainer") {
		t.Fatalf("Resolve(kueue) = %v, want an error naming it and the allowed values", err)
	}
}

func TestStartWithoutTheModuleSaysWhatToDo(t *testing.T) {
	t.Setenv("GOMODCACHE", t.TempDir())
	err := ecosystem.Start(context.Background(), nil, []string{"lws"})
	if err == nil || !strings.Contains(err.Error(), "sigs.k8s.io/lws@v") || !strings.Contains(err.Error(), "go mod download sigs.k8s.io/lws@") {
		t.Fatalf("Start with an empty module cache = %v, want an error naming the missing directory and how to fill it", err)
	}
}

// TestRealControllersMakeTheirObjects runs the projects' own controllers against the
// embedded API server, with simulated nodes under the default scheduler, and checks that
// each makes from its custom resource what it makes on a real cluster.
func TestRealControllersMakeTheirObjects(t *testing.T) {
	env := kubetest.Start(t, 2, 8)
	if err := ecosystem.Start(env.Ctx, env.Cluster.Config, []string{ecosystem.LWS, ecosystem.Ray, ecosystem.Trainer}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, lwsv1.AddToScheme, rayv1.AddToScheme,
		trainerv1alpha1.AddToScheme, jobsetv1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.ContentType = "" // the projects' kinds have no protobuf form
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := env.Ctx
	container := []corev1.Container{{Name: "node", Image: "busybox"}}

	t.Run("LeaderWorkerSet", func(t *testing.T) {
		// The fields LeaderWorkerSet's defaulting webhook would fill are given (the webhook
		// does not run here).
		lws := &lwsv1.LeaderWorkerSet{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "default"},
			Spec: lwsv1.LeaderWorkerSetSpec{
				Replicas: ptr.To[int32](1),
				LeaderWorkerTemplate: lwsv1.LeaderWorkerTemplate{Size: ptr.To[int32](2), RestartPolicy: lwsv1.RecreateGroupOnPodRestart,
					WorkerTemplate: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: container}}},
				RolloutStrategy: lwsv1.RolloutStrategy{Type: lwsv1.RollingUpdateStrategyType, RollingUpdateConfiguration: &lwsv1.RollingUpdateConfiguration{
					MaxUnavailable: intstr.FromInt32(1), MaxSurge: intstr.FromInt32(0), Partition: ptr.To[int32](0)}},
				NetworkConfig: &lwsv1.NetworkConfig{SubdomainPolicy: ptr.To(lwsv1.SubdomainShared)},
				StartupPolicy: lwsv1.LeaderCreatedStartupPolicy,
			}}
		if err := c.Create(ctx, lws); err != nil {
			t.Fatal(err)
		}
		env.WaitFor(t, "the leader StatefulSet of the LeaderWorkerSet", func() (bool, string) {
			var sts appsv1.StatefulSet
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "llm"}, &sts); err != nil {
				return false, err.Error()
			}
			owner := metav1.GetControllerOf(&sts)
			if owner == nil || owner.Kind != "LeaderWorkerSet" || owner.UID != lws.UID {
				return false, fmt.Sprintf("StatefulSet llm is controlled by %v", owner)
			}
			return ptr.Deref(sts.Spec.Replicas, 0) == 1, fmt.Sprintf("replicas %d", ptr.Deref(sts.Spec.Replicas, 0))
		})
		env.WaitFor(t, "the leader pod, bound by the default scheduler", func() (bool, string) {
			p := env.Pods(t, "default")["llm-0"]
			if p == nil {
				return false, "no pod llm-0"
			}
			if p.Labels[lwsv1.SetNameLabelKey] != "llm" || p.Annotations[lwsv1.SizeAnnotationKey] != "2" {
				return false, fmt.Sprintf("labels %v, annotations %v", p.Labels, p.Annotations)
			}
			return kubetest.Bound(p), "not bound"
		})
	})

	t.Run("RayCluster", func(t *testing.T) {
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "tune", Namespace: "default"},
			Spec: rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray"}}}}}}}
		if err := c.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		env.WaitFor(t, "the RayCluster's head pod", func() (bool, string) {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"ray.io/cluster": "tune", "ray.io/node-type": "head"}); err != nil {
				return false, err.Error()
			}
			if len(pods.Items) != 1 {
				return false, fmt.Sprintf("%d head pods", len(pods.Items))
			}
			owner := metav1.GetControllerOf(&pods.Items[0])
			return owner != nil && owner.UID == rc.UID, fmt.Sprintf("head pod controlled by %v", owner)
		})
	})

	t.Run("TrainJob", func(t *testing.T) {
		runtime := &trainerv1alpha1.ClusterTrainingRuntime{ObjectMeta: metav1.ObjectMeta{Name: "torch-small",
			Labels: map[string]string{"trainer.kubeflow.org/framework": "torch"}},
			Spec: trainerv1alpha1.TrainingRuntimeSpec{
				MLPolicy: &trainerv1alpha1.MLPolicy{NumNodes: ptr.To[int32](1),
					MLPolicySource: trainerv1alpha1.MLPolicySource{Torch: &trainerv1alpha1.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("auto"))}}},
				// The JobSet fields JobSet's defaulting webhook would fill are given in the
				// template (the webhook does not run here).
				Template: trainerv1alpha1.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
					SuccessPolicy: &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAll},
					StartupPolicy: &jobsetv1alpha2.StartupPolicy{StartupPolicyOrder: jobsetv1alpha2.AnyOrder},
					Network:       &jobsetv1alpha2.Network{EnableDNSHostnames: ptr.To(true), PublishNotReadyAddresses: ptr.To(true)},
					ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
						Name: "node",
						Template: batchv1.JobTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
							Spec: batchv1.JobSpec{CompletionMode: ptr.To(batchv1.IndexedCompletion),
								Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: container}}}},
					}}}},
			}}
		if err := c.Create(ctx, runtime); err != nil {
			t.Fatal(err)
		}
		tj := &trainerv1alpha1.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "pretrain", Namespace: "default"},
			Spec: trainerv1alpha1.TrainJobSpec{
				RuntimeRef: trainerv1alpha1.RuntimeRef{Name: runtime.Name, APIGroup: ptr.To(trainerv1alpha1.GroupVersion.Group),
					Kind: ptr.To(trainerv1alpha1.ClusterTrainingRuntimeKind)},
				Trainer: &trainerv1alpha1.Trainer{NumNodes: ptr.To[int32](2)},
			}}
		if err := c.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
		env.WaitFor(t, "the TrainJob's JobSet", func() (bool, string) {
			var js jobsetv1alpha2.JobSet
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "pretrain"}, &js); err != nil {
				return false, err.Error()
			}
			owner := metav1.GetControllerOf(&js)
			return owner != nil && owner.UID == tj.UID, fmt.Sprintf("JobSet controlled by %v", owner)
		})
		env.WaitFor(t, "the JobSet's Job, with the TrainJob's two nodes as its parallelism", func() (bool, string) {
			var jobs batchv1.JobList
			if err := c.List(ctx, &jobs, client.InNamespace("default"), client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: "pretrain"}); err != nil {
				return false, err.Error()
			}
			if len(jobs.Items) != 1 {
				return false, fmt.Sprintf("%d Jobs", len(jobs.Items))
			}
			return ptr.Deref(jobs.Items[0].Spec.Parallelism, 0) == 2, fmt.Sprintf("Job %s parallelism %d", jobs.Items[0].Name, ptr.Deref(jobs.Items[0].Spec.Parallelism, 0))
		})
	})
}
