package admission

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/kube/workload"
)

// gang is what a pod's owners make of it: its class, and the gang it joins (name "" for
// none) with the gang's size (0: not known here; the PodGroup says).
type gang struct {
	class string
	name  string
	pods  int64
}

// gangOf reads a pod's gang and class from its owners (docs/integrations.md). The class is
// the top owner's kind's (a RayJob's cluster trains, a RayService's serves), else the
// nearest owner's that has one. The gang is found at the owner that makes it, which need
// not be the top one: one group of a LeaderWorkerSet, a RayCluster under a RayJob or
// RayService, the trainer's nodes of a TrainJob; else the top owner's, for the kinds whose
// pods are all one gang.
func gangOf(p *corev1.Pod, w Workload) gang {
	chain := w.Chain
	if len(chain) == 0 && w.Kind != "" {
		// Told only the top owner (its kind, not its group): the kind names it.
		chain = []Owner{{APIVersion: apiVersionOfKind(w.Kind), Kind: w.Kind, Name: w.Name, Object: w.Object}}
	}
	var g gang
	for i := len(chain) - 1; i >= 0 && g.class == ""; i-- {
		if _, k, ok := workload.KindOf(chain[i].APIVersion, chain[i].Kind); ok {
			g.class = k.Class
		}
	}
	for i, o := range chain {
		gvr, k, ok := workload.KindOf(o.APIVersion, o.Kind)
		if !ok {
			continue
		}
		switch gvr.GroupResource() {
		case workload.LeaderWorkerSets.GroupResource():
			// The group's leader pod names the gang: the pod itself when the LWS's own
			// StatefulSet made it, else the pod that owns its worker StatefulSet.
			g.name = p.Name
			for _, below := range chain[:i] {
				if below.Kind == "Pod" && groupOf(below.APIVersion) == "" {
					g.name = below.Name
				}
			}
			g.pods = sizeOf(o.Object)
			return g
		case workload.RayClusters.GroupResource():
			g.name, g.pods = o.Name, sizeOf(o.Object)
			return g
		case workload.TrainJobs.GroupResource():
			return trainerGang(p, chain[:i], o, g)
		}
		if i == len(chain)-1 && k.Gang {
			g.name, g.pods = o.Name, sizeOf(o.Object)
		}
	}
	return g
}

// trainerGang: a TrainJob's pod is made by a Job of its JobSet (below, nearest first); the
// pods of its initializer jobs are in no gang, the others in the TrainJob's, of the
// JobSet's trainer shape.
func trainerGang(p *corev1.Pod, below []Owner, tj Owner, g gang) gang {
	rj := p.Labels[workload.LabelReplicatedJob]
	var jobLabels map[string]string
	for _, o := range below {
		switch {
		case o.Kind == "Job" && o.Object != nil:
			jobLabels = o.Object.GetLabels()
			if v, ok := jobLabels[workload.LabelReplicatedJob]; ok {
				rj = v // the Job's, which its pod cannot have changed
			}
		case o.Kind == "JobSet" && o.Object != nil:
			_, g.pods = workload.TrainerShape(o.Object)
		}
	}
	if workload.IsInitializer(rj, jobLabels) {
		return gang{class: g.class}
	}
	g.name = tj.Name
	return g
}

// sizeOf is a gang's size from its object, 0 when it could not be read.
func sizeOf(u *unstructured.Unstructured) int64 {
	if u == nil {
		return 0
	}
	n, _, ok := workload.Gang(u)
	if !ok || n < 1 {
		return 0
	}
	return n
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return "?"
	}
	return gv.Group
}

// apiVersionOfKind is the API version of the first kind Allot knows by that name, for a
// workload told by kind alone.
func apiVersionOfKind(kind string) string {
	for gk := range workload.Kinds {
		if gk.Kind == kind {
			return schema.GroupVersion{Group: gk.Group, Version: "v1"}.String()
		}
	}
	return ""
}
