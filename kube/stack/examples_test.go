package stack_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/workload"
)

// runningPods waits until the named pods (prefixes of generated names) run.
func runningPods(t *testing.T, e *kubetest.Env, what string, want int, match func(*corev1.Pod) bool) []*corev1.Pod {
	t.Helper()
	var got []*corev1.Pod
	e.WaitFor(t, what, func() (bool, string) {
		got = got[:0]
		for _, p := range e.Pods(t, "default") {
			if match(p) && kubetest.Running(p) {
				got = append(got, p)
			}
		}
		return len(got) == want, fmt.Sprintf("%d of %d running", len(got), want)
	})
	return got
}

func named(prefix string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, prefix) }
}

// TestExamplesRun applies every file of examples/kube to the demo cluster (two nodes of
// eight GPUs, queues team-a/b/c/d with quotas 4/2/2/8) and checks each does what its
// comment says. JobSet and Kubeflow jobs get their CRDs but no operator here: the check is
// the gang Allot makes for them.
func TestExamplesRun(t *testing.T) {
	e := start(t, 2, 8)
	for q, quota := range map[string]int64{"team-a": 4, "team-b": 2, "team-c": 2, "team-d": 8} {
		e.Queue(t, q, quota, nil)
	}
	dir := filepath.Join("..", "..", "examples", "kube")

	t.Run("pod", func(t *testing.T) {
		objs := e.Apply(t, filepath.Join(dir, "pod.yaml"))
		p := runningPods(t, e, "train-resnet", 1, named("train-resnet"))[0]
		if n := len(strings.Split(p.Annotations[v1alpha1.AnnotationGPUs], ",")); n != 2 || p.Labels[v1alpha1.LabelClass] != "" {
			t.Fatalf("pod holds %d GPUs, class %q", n, p.Labels[v1alpha1.LabelClass])
		}
		e.Remove(t, objs)
	})
	t.Run("fractions", func(t *testing.T) {
		objs := e.Apply(t, filepath.Join(dir, "fractions.yaml"))
		runningPods(t, e, "notebooks and embedder", 3, func(*corev1.Pod) bool { return true })
		_, ga, _ := gpuOf(t, e, "notebook-alice")
		_, gb, _ := gpuOf(t, e, "notebook-bob")
		_, _, env := gpuOf(t, e, "embed-service")
		if ga != gb {
			t.Fatalf("notebooks on GPUs %s and %s, want one", ga, gb)
		}
		if env["CUDA_DEVICE_MEMORY_LIMIT"] != "20480m" || env["CUDA_DEVICE_SM_LIMIT"] != "30" || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "30" {
			t.Fatalf("embedder environment %v, want 20Gi and 30%%", env)
		}
		e.Remove(t, objs)
	})
	t.Run("job", func(t *testing.T) {
		objs := e.Apply(t, filepath.Join(dir, "job.yaml"))
		for _, p := range runningPods(t, e, "sweep", 4, named("sweep-")) {
			if p.Labels[v1alpha1.LabelPodGroup] != "sweep" || p.Labels[v1alpha1.LabelQueue] != "team-b" {
				t.Fatalf("pod %s labels %v", p.Name, p.Labels)
			}
		}
		e.Remove(t, objs)
	})
	t.Run("distributed", func(t *testing.T) {
		objs := e.Apply(t, filepath.Join(dir, "distributed.yaml"))
		hosts := map[string]bool{}
		for _, p := range runningPods(t, e, "ddp workers", 2, named("ddp-")) {
			hosts[p.Spec.Hostname+"."+p.Spec.Subdomain] = true
		}
		if !hosts["ddp-0.ddp"] || !hosts["ddp-1.ddp"] {
			t.Fatalf("worker hostnames %v, want ddp-0.ddp and ddp-1.ddp", hosts)
		}
		e.Remove(t, objs)
	})
	t.Run("inference", func(t *testing.T) {
		objs := e.Apply(t, filepath.Join(dir, "inference.yaml"))
		for _, p := range runningPods(t, e, "llm replicas", 2, named("llm-")) {
			if p.Labels[v1alpha1.LabelClass] != v1alpha1.ClassInference || p.Labels[v1alpha1.LabelQueue] != "team-c" {
				t.Fatalf("replica %s labels %v", p.Name, p.Labels)
			}
		}
		e.Remove(t, objs)
	})
	t.Run("pod-group", func(t *testing.T) {
		objs := e.Apply(t, filepath.Join(dir, "pod-group.yaml"))
		runningPods(t, e, "the pair", 2, named("pair-"))
		e.Remove(t, objs)
	})

	t.Run("constraints", func(t *testing.T) {
		// dgx-2 is a tainted GPU node in zone-b; dgx-1 is in zone-a.
		for node, patch := range map[string]string{
			"dgx-1": `{"metadata":{"labels":{"topology.kubernetes.io/zone":"zone-a"}}}`,
			"dgx-2": `{"metadata":{"labels":{"topology.kubernetes.io/zone":"zone-b"}},"spec":{"taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}]}}`,
		} {
			if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		objs := e.Apply(t, filepath.Join(dir, "constraints.yaml"))
		for _, p := range runningPods(t, e, "zonal-train", 2, named("zonal-train-")) {
			if p.Spec.NodeName != "dgx-2" {
				t.Fatalf("pod %s on %s, want the tainted zone-b node dgx-2", p.Name, p.Spec.NodeName)
			}
		}
		e.Remove(t, objs)
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-2", types.StrategicMergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	installCRD(t, e, "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
	installCRD(t, e, "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
	installCRD(t, e, "kubeflow.org", "v2beta1", "MPIJob", "mpijobs")
	// The workload controller looks for the CRDs when it starts: start one that sees them.
	go workload.New(e.Client, e.Dyn, e.Allot).Run(e.Ctx)
	for file, want := range map[string]struct {
		name, queue string
		min         int64
	}{"jobset.yaml": {"llm-pretrain", "team-d", 3}, "pytorchjob.yaml": {"bert", "team-b", 4}, "mpijob.yaml": {"horovod", "team-b", 3}} {
		e.Apply(t, filepath.Join(dir, file))
		e.WaitFor(t, file+" gang", func() (bool, string) {
			pg, err := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Get(e.Ctx, want.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			m, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember")
			q, _, _ := unstructured.NestedString(pg.Object, "spec", "queue")
			return m == want.min && q == want.queue, fmt.Sprintf("minMember %d queue %q", m, q)
		})
	}
}

// installCRD serves a kind with an open schema, as a stand-in for an operator's CRD.
func installCRD(t *testing.T, e *kubetest.Env, group, version, kind, plural string) {
	t.Helper()
	open := true
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, Plural: plural},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &open}}}}}}
	client := apiextensions.NewForConfigOrDie(e.Cluster.Config)
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(e.Ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, kind+" served", func() (bool, string) {
		_, err := e.Client.Discovery().ServerResourcesForGroupVersion(group + "/" + version)
		return err == nil, fmt.Sprint(err)
	})
	time.Sleep(200 * time.Millisecond)
}
