package workload

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Known is what Allot knows of one kind of owner of pods.
type Known struct {
	Resource string
	// Class is the class its pods get when neither they nor their owners name one; ""
	// leaves it to an owner further up.
	Class string
	// Gang: its pods (all of them, as its shape says) are one gang named after it.
	Gang bool
}

// Kinds are the owners a pod's controller references are followed through, by API group
// and kind (a Knative Service is not a core Service). The webhook climbs them to the top
// owner Allot knows, whose labels give the queue and whose kind the class; the workload
// controller reads the owners of the objects it groups the same way.
var Kinds = map[schema.GroupKind]Known{
	{Group: "batch", Kind: "Job"}:                            {"jobs", v1alpha1.ClassTrain, true},
	{Group: "jobset.x-k8s.io", Kind: "JobSet"}:               {"jobsets", v1alpha1.ClassTrain, true},
	{Group: "kubeflow.org", Kind: "PyTorchJob"}:              {"pytorchjobs", v1alpha1.ClassTrain, true},
	{Group: "kubeflow.org", Kind: "MPIJob"}:                  {"mpijobs", v1alpha1.ClassTrain, true},
	{Group: TrainJobs.Group, Kind: "TrainJob"}:               {TrainJobs.Resource, v1alpha1.ClassTrain, true},
	{Group: "apps", Kind: "ReplicaSet"}:                      {"replicasets", v1alpha1.ClassInference, false},
	{Group: "apps", Kind: "Deployment"}:                      {"deployments", v1alpha1.ClassInference, false},
	{Group: "apps", Kind: "StatefulSet"}:                     {"statefulsets", v1alpha1.ClassInference, false},
	{Group: LeaderWorkerSets.Group, Kind: "LeaderWorkerSet"}: {LeaderWorkerSets.Resource, v1alpha1.ClassInference, false},
	// A bare RayCluster is a long-lived cluster people attach work to (a notebook, jobs
	// submitted to its head): stopping it loses every actor and object on it, and nothing
	// would submit its work again. Interactive keeps it within quota and out of reclaims,
	// as a notebook; a RayJob's (train) or RayService's (inference) says otherwise.
	{Group: RayClusters.Group, Kind: "RayCluster"}: {RayClusters.Resource, v1alpha1.ClassInteractive, false},
	{Group: RayJobs.Group, Kind: "RayJob"}:         {RayJobs.Resource, v1alpha1.ClassTrain, false},
	{Group: RayServices.Group, Kind: "RayService"}: {RayServices.Resource, v1alpha1.ClassInference, false},
	// Knative Serving: a Service owns a Configuration, which owns Revisions, each of which
	// owns a Deployment; KServe's InferenceService owns a Knative Service (serverless) or a
	// Deployment (raw deployment).
	{Group: "serving.knative.dev", Kind: "Service"}:        {"services", v1alpha1.ClassInference, false},
	{Group: "serving.knative.dev", Kind: "Configuration"}:  {"configurations", v1alpha1.ClassInference, false},
	{Group: "serving.knative.dev", Kind: "Revision"}:       {"revisions", v1alpha1.ClassInference, false},
	{Group: "serving.kserve.io", Kind: "InferenceService"}: {"inferenceservices", v1alpha1.ClassInference, false},
	// A LeaderWorkerSet's worker StatefulSet is owned by the group's leader pod.
	{Group: "", Kind: "Pod"}: {"pods", "", false},
}

// KindOf is the resource of an owner reference's kind, and what Allot knows of it.
func KindOf(apiVersion, kind string) (schema.GroupVersionResource, Known, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, Known{}, false
	}
	k, ok := Kinds[schema.GroupKind{Group: gv.Group, Kind: kind}]
	if !ok {
		return schema.GroupVersionResource{}, Known{}, false
	}
	return gv.WithResource(k.Resource), k, true
}

// MaxOwners bounds the climb up controller references: a Knative pod's chain, the longest,
// is ReplicaSet, Deployment, Revision, Configuration, Service and InferenceService.
const MaxOwners = 8

// upward is an object's labels and annotations over those of its controllers up through
// the kinds Allot knows, the nearest first (as the webhook gives them to pods): a
// RayCluster's own queue label, else its RayJob's.
func (c *Controller) upward(ctx context.Context, u *unstructured.Unstructured) (labels, annotations map[string]string) {
	labels, annotations = map[string]string{}, map[string]string{}
	under := func(dst, src map[string]string) {
		for k, v := range src {
			if _, set := dst[k]; !set {
				dst[k] = v
			}
		}
	}
	o := u
	for range MaxOwners {
		under(labels, o.GetLabels())
		under(annotations, o.GetAnnotations())
		ref := metav1.GetControllerOfNoCopy(o)
		if ref == nil {
			break
		}
		gvr, _, ok := KindOf(ref.APIVersion, ref.Kind)
		if !ok {
			break
		}
		next, err := c.dyn.Resource(gvr).Namespace(u.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || next.GetUID() != ref.UID {
			break
		}
		o = next
	}
	return labels, annotations
}
