package cli

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestUpWithRay runs `allot up --with ray` and uses it as a user would: a RayCluster
// applied through the kubeconfig gets its head pod from KubeRay's own controller, and the
// default scheduler binds it to a simulated node.
func TestUpWithRay(t *testing.T) {
	up := startUp(t, "--nodes", "1", "--with", "ray")
	rc, err := clientcmd.BuildConfigFromFlags("", up.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": "tune", "namespace": "default"},
		"spec": map[string]any{"headGroupSpec": map[string]any{"rayStartParams": map[string]any{},
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "ray-head", "image": "rayproject/ray"}}}}}},
	}}
	rayClusters := schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}
	if _, err := dynamic.NewForConfigOrDie(rc).Resource(rayClusters).Namespace("default").Create(up.ctx, cluster, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a RayCluster: %v\n%s", err, up.out.String())
	}
	client := kubernetes.NewForConfigOrDie(rc)
	last := ""
	err = wait.PollUntilContextTimeout(up.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=tune,ray.io/node-type=head"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 {
			last = fmt.Sprintf("%d head pods", len(pods.Items))
			return false, nil
		}
		last = "head pod not bound"
		return pods.Items[0].Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("the RayCluster's head pod: %v (last: %s)", err, last)
	}
}
