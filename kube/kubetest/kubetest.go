// Package kubetest gives integration tests a real Kubernetes to talk to: the embedded
// control plane (etcd, kube-apiserver, kube-controller-manager), simulated GPU nodes and
// their kubelet, and helpers that read like the cluster they build. What Allot runs on
// top (the scheduler, or the whole stack) each test starts itself.
package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/fieldpath"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/simnode"
)

// Resources of Allot's API, for the dynamic client.
var (
	Queues    = v1alpha1.Queues
	PodGroups = v1alpha1.PodGroups
)

// Env is a running cluster with simulated GPU nodes named dgx-1, dgx-2, ….
type Env struct {
	Ctx    context.Context
	Client kubernetes.Interface
	// Allot is the typed client of Allot's resources (Queues, PodGroups, Topologies);
	// Dyn reads and writes any other kind (a workload's Jobs, an example's objects).
	Allot   versioned.Interface
	Dyn     dynamic.Interface
	Cluster *localcluster.Cluster
	Dir     string
}

func newEnv(ctx context.Context, client kubernetes.Interface, c *localcluster.Cluster, dir string) *Env {
	return &Env{Ctx: ctx, Client: client, Allot: allotclient.NewForConfigOrDie(c.Config), Dyn: dynamic.NewForConfigOrDie(c.Config),
		Cluster: c, Dir: dir}
}

// cluster starts the embedded control plane for a test; it stops with the test.
func cluster(t testing.TB) (context.Context, kubernetes.Interface, *localcluster.Cluster, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	c, err := localcluster.Start(ctx, dir)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// Clients stop before the API server, or its shutdown waits for their watches.
	t.Cleanup(func() { cancel(); c.Stop() })
	return ctx, kubernetes.NewForConfigOrDie(c.Config), c, dir
}

// Start brings up a cluster of nodes × gpus A100-80GB GPUs; it stops with the test.
func Start(t *testing.T, nodes, gpus int) *Env {
	t.Helper()
	ctx, client, c, dir := cluster(t)
	if err := simnode.Create(ctx, client, simnode.Spec{Prefix: "dgx", Count: nodes, GPUs: gpus, GPUType: "A100-80GB",
		GPUMemoryMi: 81920, CPU: "64", Memory: "512Gi"}); err != nil {
		t.Fatal(err)
	}
	go simnode.NewKubelet(client).Run(ctx)
	return newEnv(ctx, client, c, dir)
}

// StartNodes brings up a cluster with the given groups of simulated nodes (a DRA group
// publishes its GPUs in ResourceSlices); it stops with the test.
func StartNodes(t testing.TB, specs ...simnode.Spec) *Env {
	t.Helper()
	ctx, client, c, dir := cluster(t)
	for _, spec := range specs {
		if spec.GPUType == "" {
			spec.GPUType, spec.GPUMemoryMi = "A100-SXM4-80GB", 81920
		}
		if spec.CPU == "" {
			spec.CPU, spec.Memory = "64", "512Gi"
		}
		if err := simnode.Create(ctx, client, spec); err != nil {
			t.Fatal(err)
		}
	}
	go simnode.NewKubelet(client).Run(ctx)
	return newEnv(ctx, client, c, dir)
}

// StartWithAgents is Start with what a real GPU node has below the scheduler: the GPUs on
// go-nvml's mock, a device plugin that hands devices out in its own order (highest free
// first), the kubelet's PodResources API on a unix socket per node, and the real allot
// agent on every node (reporting each second). sharing is the enforcement the nodes'
// agents declare ("" for none declared).
func StartWithAgents(t *testing.T, nodes, gpus int, sharing string) (*Env, *simnode.Devices) {
	t.Helper()
	e, devices := StartWithDevices(t, nodes, gpus, sharing)
	if err := devices.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	return e, devices
}

// StartWithDevices is StartWithAgents without the agents: the test runs them (as the
// Helm chart's ServiceAccount, say) with Devices.RunAgents.
func StartWithDevices(t *testing.T, nodes, gpus int, sharing string) (*Env, *simnode.Devices) {
	t.Helper()
	ctx, client, c, dir := cluster(t)
	spec := simnode.Spec{Prefix: "dgx", Count: nodes, GPUs: gpus, GPUType: "A100-SXM4-80GB",
		GPUMemoryMi: 81920, CPU: "64", Memory: "512Gi", Sharing: sharing}
	if err := simnode.Create(ctx, client, spec); err != nil {
		t.Fatal(err)
	}
	// Unix socket paths are short (108 bytes): a test's temporary directory can be longer.
	sockets, err := os.MkdirTemp("", "allot-pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockets) })
	devices := simnode.NewDevices(sockets)
	if err := devices.AddNodes(ctx, spec); err != nil {
		t.Fatal(err)
	}
	go simnode.NewKubelet(client).WithDevices(devices).Run(ctx)
	return newEnv(ctx, client, c, dir), devices
}

// StartNodesWithAgents is StartNodes where every NVIDIA group also has its GPUs on
// go-nvml's mock, the device plugin, the PodResources API and the real agent reporting
// each second (other vendors' groups have no NVML to read).
func StartNodesWithAgents(t *testing.T, specs ...simnode.Spec) (*Env, *simnode.Devices) {
	t.Helper()
	ctx, client, c, dir := cluster(t)
	sockets, err := os.MkdirTemp("", "allot-pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockets) })
	devices := simnode.NewDevices(sockets)
	for _, spec := range specs {
		if spec.GPUType == "" {
			spec.GPUType, spec.GPUMemoryMi = "A100-SXM4-80GB", 81920
		}
		if spec.CPU == "" {
			spec.CPU, spec.Memory = "64", "512Gi"
		}
		if err := simnode.Create(ctx, client, spec); err != nil {
			t.Fatal(err)
		}
		if spec.Kind == nil {
			if err := devices.AddNodes(ctx, spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A sharing root of the test's own, and a stand-in for HAMi-core's libvgpu.so (the
	// simulated kubelet runs no process to preload it), so that a group declaring mps or
	// hami-core declares it as a real agent would (a hami-core agent copies the library
	// there; without them it declares none).
	devices.SharingRoot = filepath.Join(dir, "sharing")
	devices.HAMiCoreLibrary = filepath.Join(dir, "libvgpu.so")
	if err := os.WriteFile(devices.HAMiCoreLibrary, []byte("a stand-in: nothing preloads it here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	go simnode.NewKubelet(client).WithDevices(devices).Run(ctx)
	if err := devices.RunAgents(ctx, client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	return newEnv(ctx, client, c, dir), devices
}

// Queue creates a queue; spec fields beyond the GPU quota go in extra, as in the Queue's
// YAML (map[string]any{"parent": "dept"}).
func (e *Env) Queue(t *testing.T, name string, quota int64, extra map[string]any) {
	t.Helper()
	spec := map[string]any{"gpu": map[string]any{"quota": quota}}
	for k, v := range extra {
		spec[k] = v
	}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &q.Spec); err != nil {
		t.Fatalf("queue %s: spec %v: %v", name, spec, err)
	}
	if _, err := e.Allot.AllotV1alpha1().Queues().Create(e.Ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// PodSpec describes a test pod in a few words.
type PodSpec struct {
	Name, Namespace, Queue string
	GPUs                   int64             // whole GPUs
	Labels, Annotations    map[string]string // added to the queue label
	Job                    string            // labels it job=Job (the churns of the fault test and the soak)
	// Claims are DRA claims of the pod (spec.resourceClaims), each used by its container.
	Claims []corev1.PodResourceClaim
}

// Pod builds the pod object: scheduler allot, one container, one CPU.
func (s PodSpec) Pod() *corev1.Pod {
	ns := s.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	labels := map[string]string{}
	if s.Queue != "" {
		labels[v1alpha1.LabelQueue] = s.Queue
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	if s.Job != "" {
		labels["job"] = s.Job
	}
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	if s.GPUs > 0 {
		res.Limits = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(s.GPUs, resource.DecimalSI)}
	}
	for _, c := range s.Claims {
		res.Claims = append(res.Claims, corev1.ResourceClaim{Name: c.Name})
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: ns, Labels: labels, Annotations: s.Annotations},
		Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, ResourceClaims: s.Claims,
			Containers: []corev1.Container{{Name: "main", Image: "train", Resources: res}}}}
}

// CreatePod creates the pod and returns the API server's answer.
func (e *Env) CreatePod(s PodSpec) error {
	p := s.Pod()
	_, err := e.Client.CoreV1().Pods(p.Namespace).Create(e.Ctx, p, metav1.CreateOptions{})
	time.Sleep(5 * time.Millisecond) // distinct creation order
	return err
}

// CreatePodGroup creates a PodGroup of minMember pods in queue, in the default namespace.
func (e *Env) CreatePodGroup(ctx context.Context, name, queue string, minMember int) error {
	pg := &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: v1alpha1.PodGroupSpec{MinMember: int32(minMember), Queue: queue}}
	_, err := e.Allot.AllotV1alpha1().PodGroups(metav1.NamespaceDefault).Create(ctx, pg, metav1.CreateOptions{})
	return err
}

// MustPod creates the pod or fails the test.
func (e *Env) MustPod(t *testing.T, s PodSpec) {
	t.Helper()
	if err := e.CreatePod(s); err != nil {
		t.Fatal(err)
	}
}

// WaitFor polls cond until it holds or 30 s pass.
func (e *Env) WaitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(e.Ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %s)", what, err, last)
	}
}

// Pods lists a namespace's pods by name.
func (e *Env) Pods(t *testing.T, namespace string) map[string]*corev1.Pod {
	t.Helper()
	list, err := e.Client.CoreV1().Pods(namespace).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// Count is how many of a namespace's pods satisfy pred.
func (e *Env) Count(t *testing.T, namespace string, pred func(*corev1.Pod) bool) int {
	n := 0
	for _, p := range e.Pods(t, namespace) {
		if pred(p) {
			n++
		}
	}
	return n
}

// Bound tells whether the pod has a node.
func Bound(p *corev1.Pod) bool { return p != nil && p.Spec.NodeName != "" }

// Running tells whether the pod runs on its node.
func Running(p *corev1.Pod) bool {
	return p != nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning
}

// Events returns the reasons and messages of the events about an object, one per line.
func (e *Env) Events(t *testing.T, namespace, name string) []string {
	t.Helper()
	l, err := e.Client.CoreV1().Events(namespace).List(e.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range l.Items {
		out = append(out, fmt.Sprintf("%s: %s", ev.Reason, ev.Message))
	}
	return out
}

// DecodeYAML reads a stream of YAML (or JSON) documents into objects, leaving out empty
// ones (a document of comments only, say).
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var o map[string]any
		if err := dec.Decode(&o); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		if len(o) > 0 {
			out = append(out, &unstructured.Unstructured{Object: o})
		}
	}
}

// Apply creates every object of a YAML file, as kubectl apply would on a fresh cluster,
// and returns them for deletion.
func (e *Env) Apply(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	mapper := e.mapper() // one discovery of the API server per call
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeYAML(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []*unstructured.Unstructured
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, gvk, err)
		}
		r := e.Dyn.Resource(m.Resource)
		var created *unstructured.Unstructured
		if m.Scope.Name() == "namespace" {
			created, err = r.Namespace("default").Create(e.Ctx, u, metav1.CreateOptions{})
		} else {
			created, err = r.Create(e.Ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("%s: %s %s: %v", path, gvk.Kind, u.GetName(), err)
		}
		created.SetGroupVersionKind(gvk)
		out = append(out, created)
	}
	return out
}

// Remove deletes the objects with their dependents and waits until no pod is left.
func (e *Env) Remove(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	mapper := e.mapper() // one discovery of the API server per call
	bg := metav1.DeletePropagationBackground
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Delete(e.Ctx, u.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitFor(t, "the example's pods gone", func() (bool, string) {
		n := len(e.Pods(t, "default")) + len(e.Pods(t, v1alpha1.SystemNamespace))
		return n == 0, fmt.Sprintf("%d pods left", n)
	})
}

// mapper maps kinds to resources as the API server serves them now (CRDs included).
func (e *Env) mapper() *restmapper.DeferredDiscoveryRESTMapper {
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.Client.Discovery()))
}

// ContainerEnv is the environment the kubelet would give a container of p when it starts:
// envFrom sources in order, then env in order, a later name winning (the kubelet's order,
// pkg/kubelet's makeEnvironmentVariables); values from the pod's own fields through the
// kubelet's downward API resolver (k8s.io/kubernetes/pkg/fieldpath), and from ConfigMaps
// and Secrets as they are now. Resource fields are left out (no container runs here).
func (e *Env) ContainerEnv(t *testing.T, p *corev1.Pod, container string) map[string]string {
	t.Helper()
	var c *corev1.Container
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == container {
			c = &p.Spec.InitContainers[i]
		}
	}
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == container {
			c = &p.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatalf("pod %s has no container %s", p.Name, container)
	}
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		data := map[string]string{}
		if r := from.ConfigMapRef; r != nil {
			if cm, err := e.Client.CoreV1().ConfigMaps(p.Namespace).Get(e.Ctx, r.Name, metav1.GetOptions{}); err == nil {
				data = cm.Data
			}
		} else if r := from.SecretRef; r != nil {
			if s, err := e.Client.CoreV1().Secrets(p.Namespace).Get(e.Ctx, r.Name, metav1.GetOptions{}); err == nil {
				for k, v := range s.Data {
					data[k] = string(v)
				}
			}
		}
		for k, v := range data {
			env[from.Prefix+k] = v
		}
	}
	for _, v := range c.Env {
		switch {
		case v.ValueFrom == nil:
			env[v.Name] = v.Value
		case v.ValueFrom.FieldRef != nil:
			val, err := fieldpath.ExtractFieldPathAsString(p, v.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				t.Fatalf("pod %s container %s env %s: %v", p.Name, container, v.Name, err)
			}
			env[v.Name] = val
		case v.ValueFrom.ConfigMapKeyRef != nil:
			if cm, err := e.Client.CoreV1().ConfigMaps(p.Namespace).Get(e.Ctx, v.ValueFrom.ConfigMapKeyRef.Name, metav1.GetOptions{}); err == nil {
				env[v.Name] = cm.Data[v.ValueFrom.ConfigMapKeyRef.Key]
			}
		case v.ValueFrom.SecretKeyRef != nil:
			if s, err := e.Client.CoreV1().Secrets(p.Namespace).Get(e.Ctx, v.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{}); err == nil {
				env[v.Name] = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
			}
		}
	}
	return env
}

// BuildAllot builds the allot binary, for tests that run it as a process of its own.
func BuildAllot(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "allot")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/allot-dev/allot/cmd/allot")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// EnvDuration reads a test's length from the environment variable name (FAULTS_TIME,
// SOAK_TIME…), def when unset; a value that is not a positive duration fails the test.
func EnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: a positive duration such as 30m", name, v)
	}
	return d
}

// DeviceClaim is a claim's spec of count devices of a DeviceClass, all matching the CEL
// selectors given.
func DeviceClaim(class string, count int64, selectors ...string) resourcev1.ResourceClaimSpec {
	req := resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	for _, s := range selectors {
		req.Selectors = append(req.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &req}}}}
}

// ClaimTemplate creates a ResourceClaimTemplate of spec in the default namespace.
func (e *Env) ClaimTemplate(t *testing.T, name string, spec resourcev1.ResourceClaimSpec) {
	t.Helper()
	tpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec}}
	if _, err := e.Client.ResourceV1().ResourceClaimTemplates(metav1.NamespaceDefault).Create(e.Ctx, tpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// FromTemplate is a pod's claim "gpu" made from the template named.
func FromTemplate(name string) []corev1.PodResourceClaim {
	return []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &name}}
}
