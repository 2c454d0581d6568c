package localcluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestControlPlaneServesAndKeepsState(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1"}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Stop()

	c2, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Stop()
	client2 := kubernetes.NewForConfigOrDie(c2.Config)
	if _, err := client2.CoreV1().Nodes().Get(ctx, "dgx-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("node lost across restart: %v", err)
	}
}

// TestAPIServerRefusesBadQueuesAndTopologies: the CRD schema makes the API server itself refuse a bad
// Queue or Topology with a message naming the field.
func TestAPIServerRefusesBadQueuesAndTopologies(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	queues := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Group: "allot.dev", Version: "v1alpha1", Resource: "queues"})
	queue := func(name string, gpu map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "allot.dev/v1alpha1", "kind": "Queue",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"gpu": gpu}}}
	}
	// A time limit the scheduler could not read is refused, not stored.
	forever := queue("bad-time-limit", map[string]any{"quota": int64(1)})
	forever.Object["spec"].(map[string]any)["interactiveTimeLimit"] = "forever"
	if _, err := queues.Create(ctx, forever, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "interactiveTimeLimit must be a positive duration such as 30m, 4h or 1h30m") {
		t.Errorf("interactiveTimeLimit forever: got %v", err)
	}
	for field, want := range map[string]string{"reclaimMinRuntime": "reclaimMinRuntime must be a duration such as 10m or 1h30m",
		"preemptMinRuntime": "preemptMinRuntime must be a duration such as 10m or 1h30m"} {
		bad := queue("bad-"+strings.ToLower(field), map[string]any{"quota": int64(1)})
		bad.Object["spec"].(map[string]any)[field] = "a while"
		if _, err := queues.Create(ctx, bad, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s \"a while\": got %v", field, err)
		}
	}
	// Every duration is parsed as Go parses it: one past what a duration holds is refused
	// (stored, it would stall every typed reader), and the forms Go writes are taken
	// ("500µs" is how a typed client writes half a millisecond).
	for v, ok := range map[string]bool{"100000000h": false, "1h30m0s": true, "500µs": true, "500us": true} {
		q := queue("d-"+strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return 'x'
		}, v), map[string]any{"quota": int64(1)})
		q.Object["spec"].(map[string]any)["reclaimMinRuntime"] = v
		if _, err := queues.Create(ctx, q, metav1.CreateOptions{}); (err == nil) != ok {
			t.Errorf("reclaimMinRuntime %q: %v, want accepted %v", v, err, ok)
		}
	}
	for name, c := range map[string]struct {
		gpu  map[string]any
		want string
	}{
		"negative": {map[string]any{"quota": int64(-2)}, "spec.gpu.quota: Invalid value: -2: spec.gpu.quota in body should be greater than or equal to 0"},
		"limit":    {map[string]any{"quota": int64(4), "limit": int64(2)}, "limit must be at least quota"},
		"pool-limit": {map[string]any{"pools": map[string]any{"h100": map[string]any{"quota": int64(4), "limit": int64(2)}}},
			"spec.gpu.pools[h100]: Invalid value: limit must be at least quota"},
		"default-pool": {map[string]any{"pools": map[string]any{"default": map[string]any{"quota": int64(4)}}},
			"the default pool's quota is gpu.quota itself"},
		"pool-name": {map[string]any{"pools": map[string]any{"h 100": map[string]any{"quota": int64(4)}}}, "a pool's name is the value of its nodes' label"},
	} {
		_, err := queues.Create(ctx, queue("bad-"+name, c.gpu), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
	if _, err := queues.Create(ctx, queue("team-a", map[string]any{"quota": int64(4), "limit": int64(8)}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid queue was refused: %v", err)
	}
	if _, err := queues.Create(ctx, queue("no-quota", map[string]any{"limit": int64(2)}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a queue with only a limit was refused: %v", err)
	}
	pooled := queue("pooled", map[string]any{"quota": int64(1), "pools": map[string]any{"h100": map[string]any{"quota": int64(4), "limit": int64(6)}}})
	pooled.Object["spec"].(map[string]any)["nodePools"] = []any{"h100", "default"}
	pooled.Object["spec"].(map[string]any)["classNodePools"] = map[string]any{"interactive": []any{"h100"}}
	if _, err := queues.Create(ctx, pooled, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a queue with quotas per pool was refused: %v", err)
	}
	for name, c := range map[string]struct {
		spot map[string]any
		want string
	}{
		"policy": {map[string]any{"policy": "sometimes"}, `spec.spot.policy: Unsupported value: "sometimes": supported values: "allowed", "never", "first"`},
		"wait":   {map[string]any{"policy": "first", "onDemandAfter": "soon"}, "spot.onDemandAfter must be a positive duration such as 10m"},
		"budget": {map[string]any{"interruptionBudget": int64(-1)}, "spec.spot.interruptionBudget: Invalid value: -1"},
	} {
		q := queue("bad-spot-"+name, map[string]any{"quota": int64(1)})
		q.Object["spec"].(map[string]any)["spot"] = c.spot
		if _, err := queues.Create(ctx, q, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("spot %s: got %v, want %q", name, err, c.want)
		}
	}
	badClass := queue("bad-class-pools", map[string]any{"quota": int64(1)})
	badClass.Object["spec"].(map[string]any)["classNodePools"] = map[string]any{"notebooks": []any{"h100"}}
	if _, err := queues.Create(ctx, badClass, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "classNodePools: a class is train, interactive or inference") {
		t.Errorf("classNodePools of an unknown class: got %v", err)
	}
	kindPools := queue("bad-kind-pools", map[string]any{"quota": int64(1)})
	kindPools.Object["spec"].(map[string]any)["accelerators"] = map[string]any{"ascend": map[string]any{"quota": int64(1), "pools": map[string]any{"x": map[string]any{"quota": int64(1)}}}}
	if _, err := queues.Create(ctx, kindPools, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "quotas per node pool are for NVIDIA GPUs only") {
		t.Errorf("pools under accelerators: got %v", err)
	}

	// A Topology whose levels repeat a node label, or have none, is refused too.
	topologies := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Group: "allot.dev", Version: "v1alpha1", Resource: "topologies"})
	topology := func(name string, levels ...map[string]any) *unstructured.Unstructured {
		l := []any{}
		for _, lv := range levels {
			l = append(l, lv)
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "Topology",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"levels": l}}}
	}
	rack := map[string]any{"name": "rack", "nodeLabel": "example.com/rack"}
	for name, c := range map[string]struct {
		t    *unstructured.Unstructured
		want string
	}{
		"repeated label": {topology("twice", rack, map[string]any{"name": "rack2", "nodeLabel": "example.com/rack"}), "levels must name distinct node labels"},
		"repeated name":  {topology("names", rack, map[string]any{"name": "rack", "nodeLabel": "example.com/row"}), "levels must have distinct names"},
		"no levels":      {topology("empty"), "spec.levels: Invalid value"},
	} {
		if _, err := topologies.Create(ctx, c.t, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("topology %s: got %v, want %q", name, err, c.want)
		}
	}
	if _, err := topologies.Create(ctx, topology("default", rack, map[string]any{"nodeLabel": "kubernetes.io/hostname"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid topology was refused: %v", err)
	}
}

// TestControllerManagerRunsWorkloads: the embedded kube-controller-manager turns a
// Deployment into pods in a fresh namespace (which gets its service account, so the
// ServiceAccount admission plugin lets them in) and garbage-collects them with it.
func TestControllerManagerRunsWorkloads(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	client := kubernetes.NewForConfigOrDie(c.Config)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := int32(2)
	labels := map[string]string{"app": "serve"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: "team-a"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "vllm"}}}}}}
	if _, err := client.AppsV1().Deployments("team-a").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func() int {
		l, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	poll := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("deployment's pods", func() bool { return pods() == 2 })
	bg := metav1.DeletePropagationBackground
	if err := client.AppsV1().Deployments("team-a").Delete(ctx, "serve", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	poll("pods garbage-collected with their deployment", func() bool { return pods() == 0 })
}
