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

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client/clientset/versioned"
)

// TestUpWithRay runs `allot up --with ray` on a fresh data directory and uses it as a user
// would: a RayCluster applied through the kubeconfig, its head on the default scheduler and
// two GPU workers on Allot, gets its head pod from KubeRay's own controller, which the
// default scheduler binds to a simulated node, and a PodGroup of the two workers (the
// head, not Allot's, is not in the gang).
func TestUpWithRay(t *testing.T) {
	up := startUp(t, "--nodes", "1", "--with", "ray")
	rc, err := clientcmd.BuildConfigFromFlags("", up.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": "tune", "namespace": "default", "labels": map[string]any{v1alpha1.LabelQueue: "team-a"}},
		"spec": map[string]any{"headGroupSpec": map[string]any{"rayStartParams": map[string]any{},
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "ray-head", "image": "rayproject/ray"}}}}},
			"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": int64(2), "minReplicas": int64(2), "maxReplicas": int64(2),
				"rayStartParams": map[string]any{},
				"template": map[string]any{"spec": map[string]any{"schedulerName": v1alpha1.SchedulerName,
					"containers": []any{map[string]any{"name": "ray-worker", "image": "rayproject/ray",
						"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "1"}}}}}}}}},
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
	groups := allotclient.NewForConfigOrDie(rc).AllotV1alpha1().PodGroups("default")
	err = wait.PollUntilContextTimeout(up.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pg, err := groups.Get(ctx, "tune", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("PodGroup tune of minMember %d", pg.Spec.MinMember)
		return pg.Spec.MinMember == 2, nil
	})
	if err != nil {
		t.Fatalf("the RayCluster's gang: %v (last: %s); want a PodGroup of its 2 workers", err, last)
	}
}
