package workload

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TrainJobs are Kubeflow Trainer v2's resource. A TrainJob owns a JobSet of its name, made
// from its runtime: initializer jobs that fetch the dataset and the model and finish, then
// the trainer's nodes (and an MPI launcher), which depend on them. The nodes are one gang;
// the initializers are not in it: they end before the nodes start, so a gang of both would
// never have all its members at once.
var TrainJobs = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}

// LabelReplicatedJob is the JobSet controller's label on its Jobs and their pods: the
// replicated job they belong to.
const LabelReplicatedJob = "jobset.sigs.k8s.io/replicatedjob-name"

// labelAncestor is Trainer's label on a runtime's replicated job: the step of the TrainJob
// it runs (dataset-initializer, model-initializer, trainer).
const labelAncestor = "trainer.kubeflow.org/trainjob-ancestor-step"

// IsInitializer tells a Trainer replicated job that runs before the nodes, by its name
// (dataset-initializer, model-initializer; initializer in Trainer's first v2 releases) or
// its step label.
func IsInitializer(replicatedJob string, labels map[string]string) bool {
	switch replicatedJob {
	case "initializer", "dataset-initializer", "model-initializer":
		return true
	}
	switch labels[labelAncestor] {
	case "dataset-initializer", "model-initializer":
		return true
	}
	return false
}

// TrainerShape is the gang of a TrainJob's JobSet: whether the trainer's pods are Allot's,
// and how many run at once (replicas × parallelism of each replicated job but the
// initializers: numNodes for the node job, and an MPI launcher).
func TrainerShape(jobSet *unstructured.Unstructured) (bool, int64) {
	return replicatedJobsShape(jobSet, func(rj map[string]any) bool {
		name, _, _ := unstructured.NestedString(rj, "name")
		labels, _, _ := unstructured.NestedStringMap(rj, "template", "metadata", "labels")
		return !IsInitializer(name, labels)
	})
}

// trainJobOf is the TrainJob controlling a JobSet, if one does.
func trainJobOf(u *unstructured.Unstructured) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(u)
	if ref == nil || ref.Kind != "TrainJob" {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != TrainJobs.Group {
		return nil
	}
	return ref
}

// syncJobSet keeps a JobSet's PodGroup: all its pods, or for a TrainJob's JobSet the
// trainer's, named and owned by the TrainJob, with its queue and topology.
func (c *Controller) syncJobSet(ctx context.Context, k kind, u *unstructured.Unstructured) {
	ref := trainJobOf(u)
	if ref == nil {
		c.syncShaped(ctx, k, u)
		return
	}
	ours, pods := TrainerShape(u)
	if !ours || pods < 1 {
		return
	}
	labels, annotations := c.upward(ctx, u)
	c.ensure(ctx, u.GetNamespace(), ref.Name, labels, annotations, pods, nil,
		metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID})
}
