package control

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotfake "github.com/allot-dev/allot/kube/client/clientset/versioned/fake"
	"github.com/allot-dev/allot/kube/inspect"
)

// TestDeletePodGroup: a PodGroup of bare pods goes with its pods; once its pods are gone a
// PodGroup already deleted is no error, and one never there is.
func TestDeletePodGroup(t *testing.T) {
	ctx := context.Background()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name)}}
	}
	client := kubefake.NewClientset(pod("ddp-0"), pod("ddp-1"), pod("other"))
	allot := allotfake.NewSimpleClientset(&v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: "ml"}})
	c := Clients{Client: client, Allot: allot}
	w := &inspect.Workload{Kind: "PodGroup", Name: "ddp", Namespace: "ml",
		Pods: []inspect.Pod{{Name: "ddp-0", UID: "uid-ddp-0", Phase: "Running"}, {Name: "ddp-1", UID: "uid-ddp-1", Phase: "Pending"}}}
	msg, err := c.Delete(ctx, w)
	if err != nil || msg != "deleted PodGroup ml/ddp, 2 pods" {
		t.Fatalf("delete: %q, %v", msg, err)
	}
	if _, err := allot.AllotV1alpha1().PodGroups("ml").Get(ctx, "ddp", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the PodGroup is still there: %v", err)
	}
	if l, _ := client.CoreV1().Pods("ml").List(ctx, metav1.ListOptions{}); len(l.Items) != 1 || l.Items[0].Name != "other" {
		t.Errorf("pods left: %v", l.Items)
	}
	w.Pods = nil
	if _, err := c.Delete(ctx, w); err == nil {
		t.Error("a PodGroup already gone, with no pods, deleted without an error")
	}
}

// TestSuspendEcosystemKinds: a RayCluster, RayJob and TrainJob are suspended by their own
// switch and resumed; a LeaderWorkerSet is scaled to zero groups and back; a RayService
// cannot be suspended, and the refusal says why and what to do instead.
func TestSuspendEcosystemKinds(t *testing.T) {
	ctx := context.Background()
	kinds := map[string]schema.GroupVersionResource{
		"RayCluster":      {Group: "ray.io", Version: "v1", Resource: "rayclusters"},
		"RayJob":          {Group: "ray.io", Version: "v1", Resource: "rayjobs"},
		"RayService":      {Group: "ray.io", Version: "v1", Resource: "rayservices"},
		"TrainJob":        {Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"},
		"LeaderWorkerSet": {Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"},
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	lists := map[schema.GroupVersionResource]string{}
	var objs []runtime.Object
	for kind, gvr := range kinds {
		mapper.Add(gvr.GroupVersion().WithKind(kind), meta.RESTScopeNamespace)
		lists[gvr] = kind + "List"
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind,
			"metadata": map[string]any{"name": "w", "namespace": "ml", "uid": kind}, "spec": map[string]any{"replicas": int64(3)}}}
		objs = append(objs, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)
	c := Clients{Dyn: dyn, Mapper: mapper}
	get := func(kind string, path ...string) any {
		u, err := dyn.Resource(kinds[kind]).Namespace("ml").Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
		return v
	}
	for _, kind := range []string{"RayCluster", "RayJob", "TrainJob", "LeaderWorkerSet"} {
		w := &inspect.Workload{Kind: kind, APIVersion: kinds[kind].GroupVersion().String(), Name: "w", Namespace: "ml", UID: types.UID(kind), Status: "Running"}
		if _, err := c.Suspend(ctx, w, false); err != nil {
			t.Fatalf("suspend %s: %v", kind, err)
		}
		if kind == "LeaderWorkerSet" {
			if r := get(kind, "spec", "replicas"); r != int64(0) {
				t.Fatalf("LeaderWorkerSet suspended with %v groups, want 0", r)
			}
		} else if s := get(kind, "spec", "suspend"); s != true {
			t.Fatalf("%s suspended: spec.suspend %v", kind, s)
		}
		if _, err := c.Suspend(ctx, w, true); err != nil {
			t.Fatalf("resume %s: %v", kind, err)
		}
		if kind == "LeaderWorkerSet" {
			if r := get(kind, "spec", "replicas"); r != int64(3) {
				t.Fatalf("LeaderWorkerSet resumed with %v groups, want its 3", r)
			}
		} else if s := get(kind, "spec", "suspend"); s != false {
			t.Fatalf("%s resumed: spec.suspend %v", kind, s)
		}
	}
	w := &inspect.Workload{Kind: "RayService", APIVersion: "ray.io/v1", Name: "w", Namespace: "ml", Status: "Running"}
	if _, err := c.Suspend(ctx, w, false); err == nil || !strings.Contains(err.Error(), "KubeRay has no suspend for a RayService") {
		t.Fatalf("suspend RayService: %v", err)
	}
}
