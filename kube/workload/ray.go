package workload

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// KubeRay's resources. A RayCluster owns its pods (a head and the workers of its worker
// groups) and is one gang; a RayJob or RayService owns the RayClusters it makes and gives
// them its queue, class and topology.
var (
	RayClusters = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}
	RayJobs     = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}
	RayServices = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayservices"}
)

// rayClusterShape: whether the cluster's pods are Allot's, and its gang's minimum: the head
// and, per worker group not suspended, its workers times numOfHosts (pods per worker, for
// multi-host TPU or GPU slices). With the Ray autoscaler on, a group's minimum is
// minReplicas (the autoscaler adds pods above it: elastic members of the gang); without it,
// KubeRay runs replicas held to [minReplicas, maxReplicas], and all of them are the gang.
// Only the pods Allot schedules count: a head on the default scheduler (a CPU head beside
// GPU workers) never joins the gang, which would otherwise wait for it forever.
func rayClusterShape(u *unstructured.Unstructured) (bool, int64) {
	ours := false
	pods := int64(0)
	if allots(u.Object, "spec", "headGroupSpec", "template") {
		ours, pods = true, 1
	}
	autoscaled, _, _ := unstructured.NestedBool(u.Object, "spec", "enableInTreeAutoscaling")
	groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "workerGroupSpecs")
	for _, o := range groups {
		g, ok := o.(map[string]any)
		if !ok || !allots(g, "template") {
			continue
		}
		ours = true
		if off, _, _ := unstructured.NestedBool(g, "suspend"); off {
			continue
		}
		lo := intOr(g, 0, "minReplicas")
		n := lo
		if !autoscaled {
			n = min(max(intOr(g, lo, "replicas"), lo), intOr(g, MaxGang, "maxReplicas"))
		}
		pods = bounded(pods + bounded(n*max(intOr(g, 1, "numOfHosts"), 1)))
	}
	return ours, pods
}

// allots tells whether the pod template at path in o is scheduled by Allot.
func allots(o map[string]any, path ...string) bool {
	s, _, _ := unstructured.NestedString(o, append(path, "spec", "schedulerName")...)
	return s == v1alpha1.SchedulerName
}

// syncRayCluster keeps a RayCluster's PodGroup, with the queue and topology of the cluster
// or, where it says none, of the RayJob or RayService that made it.
func (c *Controller) syncRayCluster(ctx context.Context, k kind, u *unstructured.Unstructured) {
	ours, pods := rayClusterShape(u)
	if !ours || pods < 1 {
		return // none of its pods is Allot's, or only suspended groups are
	}
	labels, annotations := c.upward(ctx, u)
	c.ensure(ctx, u.GetNamespace(), u.GetName(), labels, annotations, pods, nil,
		metav1.OwnerReference{APIVersion: k.gvr.GroupVersion().String(), Kind: k.kind, Name: u.GetName(), UID: u.GetUID()})
}
