// Package v1alpha1 holds Allot's API types, group allot.dev: Queue, PodGroup and Topology.
// +kubebuilder:object:generate=true
// +groupName=allot.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is allot.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "allot.dev", Version: "v1alpha1"}

// AddToScheme registers the types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Queue{}, &QueueList{}, &PodGroup{}, &PodGroupList{}, &Topology{}, &TopologyList{},
		&WorkspaceTemplate{}, &WorkspaceTemplateList{}, &ClusterWorkspaceTemplate{}, &ClusterWorkspaceTemplateList{},
		&WorkerCluster{}, &WorkerClusterList{})
	metav1AddToGroupVersion(s)
	return nil
}
