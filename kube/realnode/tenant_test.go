package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/kubetest"
)

// What a tenant with edit in its namespace gets on the real node is what its queue books:
//
//	real-1 (4 GPUs): alice/side: [server: a sidecar asking 1 GPU, naming no scheduler] [main: none]
//	                 queue alice-q books 1, the kubelet gives the sidecar exactly one device
//
// and the ways past the books are refused before any container starts: a whole-GPU pod
// reading a ConfigMap of hers whole (NVIDIA_VISIBLE_DEVICES=all under the legacy runtime),
// and a GPU pod she places on the node herself.
func TestTenantGetsOnlyWhatItsQueueBooks(t *testing.T) {
	need(t)
	ctx := context.Background()
	const ns = "alice"
	alice := kubetest.Tenant(t, ctx, cluster.Config, ns, "alice")
	queue(t, "alice-q", ns, 2)
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}

	if _, err := alice.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "devices", Namespace: ns},
		Data: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	envFrom := shellPod(ns, "envfrom", script("main"))
	envFrom.Spec.NodeName, envFrom.Labels = "", map[string]string{v1alpha1.LabelQueue: "alice-q"}
	envFrom.Spec.Containers[0].Resources.Limits = gpu
	envFrom.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "devices"}}}}
	byHand := shellPod(ns, "by-hand", script("main"))
	byHand.Labels = map[string]string{v1alpha1.LabelQueue: "alice-q"}
	byHand.Spec.Containers[0].Resources.Limits = gpu
	// The webhooks know alice's namespace for a tenant's once their informers have seen
	// alice-q, which names it; until then a pod naming no scheduler is left to it. Asked
	// with a server-side dry run (nothing is made) until the webhooks answer as the
	// tenant's.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := alice.CoreV1().Pods(ns).Create(ctx, envFrom.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("the webhooks never took namespace %s for alice-q's: %v", ns, err)
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{envFrom, `containers[main].envFrom configMapRef "devices"`},
		{byHand, `spec.nodeName: "real-1" is not allowed`},
	} {
		if _, err := alice.CoreV1().Pods(ns).Create(ctx, c.pod, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %s", c.pod.Name, err, c.want)
		}
	}

	always := corev1.ContainerRestartPolicyAlways
	server := script("server")
	server.RestartPolicy, server.Resources.Limits = &always, gpu
	side := shellPod(ns, "side", script("main"))
	side.Spec.NodeName, side.Labels = "", map[string]string{v1alpha1.LabelQueue: "alice-q"}
	server.Image, server.ImagePullPolicy = side.Spec.Containers[0].Image, corev1.PullNever
	side.Spec.InitContainers = []corev1.Container{server}
	seen := runAndReadAs(t, alice, side, "server", "main")
	if got := gpuDevices(seen["server"]); len(got) != 1 {
		t.Errorf("the sidecar asking one GPU sees %v, want exactly one /dev/nvidiaN", got)
	}
	if got := seen["main"].NVIDIA(); len(got) != 0 {
		t.Errorf("main asked for no GPU and sees %v", got)
	}
	p, err := client.CoreV1().Pods(ns).Get(ctx, "side", metav1.GetOptions{})
	if err != nil || p.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Errorf("side, naming no scheduler: %v, schedulerName %q, want Allot's", err, p.Spec.SchedulerName)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		q, err := allotclient.NewForConfigOrDie(cluster.Config).AllotV1alpha1().Queues().Get(ctx, "alice-q", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := q.Status.Allocated[v1alpha1.GPUResource]
		last = got.String()
		return got.Value() == 1, nil
	})
	if err != nil {
		t.Errorf("queue alice-q books %s GPUs, want the sidecar's 1: %v", last, err)
	}
	t.Logf("the sidecar sees %v; alice-q books %s", fmt.Sprint(gpuDevices(seen["server"])), last)
}
