package inspect

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/kube/submit"
	"github.com/allot-dev/allot/kube/workload"
)

// What other projects' controllers make of their workloads, as allot list shows them:
// LeaderWorkerSets, RayClusters with their RayJobs and RayServices, TrainJobs, Knative
// Services and KServe InferenceServices (docs/integrations.md).

// climbsTo tells the controller references a workload is climbed through: a ReplicaSet to
// its Deployment, a Job to its JobSet, a JobSet to its TrainJob, a RayCluster to the RayJob
// or RayService that made it.
func climbsTo(from, to string) bool {
	switch from {
	case "ReplicaSet":
		return to == "Deployment"
	case "Job":
		return to == "JobSet"
	case "JobSet":
		return to == "TrainJob"
	case "RayCluster":
		return to == "RayJob" || to == "RayService"
	}
	return false
}

// labelledTop is the workload a pod (or a Deployment) belongs to by the labels its project's
// controllers give it, where its owner references pass through objects allot list does not read (a
// LeaderWorkerSet's StatefulSets and leader pod, a Knative Revision's Deployment). The
// labels say only which workload to show the pod under; nothing is booked by them.
func labelledTop(labels map[string]string) (owner, bool) {
	for _, l := range []struct{ label, apiVersion, kind string }{
		{"serving.kserve.io/inferenceservice", "serving.kserve.io/v1beta1", "InferenceService"},
		{"serving.knative.dev/service", "serving.knative.dev/v1", "Service"},
		{"leaderworkerset.sigs.k8s.io/name", workload.LeaderWorkerSets.GroupVersion().String(), "LeaderWorkerSet"},
	} {
		if name := labels[l.label]; name != "" {
			return owner{ref: Ref{Kind: l.kind, Name: name}, apiVersion: l.apiVersion}, true
		}
	}
	return owner{}, false
}

// ecosystemType is a workload's type by the kinds of the other projects.
func ecosystemType(kind string) string {
	switch kind {
	case "TrainJob", "RayJob":
		return submit.TypeDistributed
	case "LeaderWorkerSet", "RayService", "InferenceService", "Service":
		return submit.TypeInference
	case "RayCluster":
		return submit.TypeInteractive
	}
	return ""
}

// Other is one object of another project's kind, as allot list reads it.
type Other struct {
	metav1.PartialObjectMetadata
	// Ours: its pods are scheduled by Allot (a RayCluster's, RayJob's or LeaderWorkerSet's
	// templates say so); then it is listed also while it has no pod.
	Ours bool
	// Suspended: its spec.suspend is set, or allot suspend scaled it to zero.
	Suspended bool
}

// otherKinds are read by allot list: JobSets and RayClusters for the TrainJobs, RayJobs and
// RayServices that own them, and the workloads that can be suspended with no pod left.
var otherKinds = []struct {
	gvr  schema.GroupVersionResource
	kind string
}{
	{workload.JobSets, "JobSet"}, {workload.RayClusters, "RayCluster"}, {workload.RayJobs, "RayJob"},
	{workload.TrainJobs, "TrainJob"}, {workload.LeaderWorkerSets, "LeaderWorkerSet"},
}

// ecosystemObjects reads the objects of otherKinds where the API server serves them and
// the user may list them; what cannot be read is left out, and a workload is then shown at
// the nearest owner known.
func ecosystemObjects(ctx context.Context, client kubernetes.Interface, namespace string) []Other {
	d := client.Discovery()
	if d == nil || d.RESTClient() == nil {
		return nil
	}
	var out []Other
	for _, k := range otherKinds {
		path := "/apis/" + k.gvr.Group + "/" + k.gvr.Version + "/"
		if namespace != "" {
			path += "namespaces/" + namespace + "/"
		}
		body, err := d.RESTClient().Get().AbsPath(path+k.gvr.Resource).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			continue
		}
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if json.Unmarshal(body, &l) != nil {
			continue
		}
		for _, item := range l.Items {
			u := &unstructured.Unstructured{Object: item}
			u.SetAPIVersion(k.gvr.GroupVersion().String())
			u.SetKind(k.kind)
			out = append(out, OtherOf(u))
		}
	}
	return out
}

// OtherOf reads what allot list needs of one object of otherKinds.
func OtherOf(u *unstructured.Unstructured) Other {
	o := Other{PartialObjectMetadata: metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), Labels: u.GetLabels(),
			Annotations: u.GetAnnotations(), OwnerReferences: u.GetOwnerReferences(), CreationTimestamp: u.GetCreationTimestamp()}}}
	o.Suspended, _, _ = unstructured.NestedBool(u.Object, "spec", "suspend")
	if u.GetAnnotations()[AnnotationSuspendedReplicas] != "" {
		o.Suspended = true
	}
	switch u.GetKind() {
	case "RayCluster", "LeaderWorkerSet":
		_, o.Ours, _ = workload.Gang(u)
	case "RayJob":
		spec, _, _ := unstructured.NestedMap(u.Object, "spec", "rayClusterSpec")
		_, o.Ours, _ = workload.Gang(&unstructured.Unstructured{Object: map[string]any{"kind": "RayCluster", "spec": spec}})
	}
	return o
}

// addOthers lists the workloads of otherKinds that are Allot's but have no pod (suspended,
// or scaled to zero groups), and marks the suspended ones.
func addOthers(others []Other, get func(ns string, top owner) *Workload, known func(ns string, top owner) bool, status map[*Workload]string) {
	for i := range others {
		o := &others[i]
		if up := metav1.GetControllerOfNoCopy(o); up != nil && climbsTo(o.Kind, up.Kind) || o.Kind == "JobSet" {
			continue // listed as its owner
		}
		top := owner{ref: Ref{Kind: o.Kind, Name: o.Name, UID: o.UID}, apiVersion: o.APIVersion, meta: &o.ObjectMeta}
		if !o.Ours && !known(o.Namespace, top) {
			continue
		}
		w := get(o.Namespace, top)
		if w.Type == "" {
			w.Type = ecosystemType(o.Kind)
		}
		if o.Suspended {
			status[w] = "Suspended"
		}
	}
}
