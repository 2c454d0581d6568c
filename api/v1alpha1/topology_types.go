package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Topology describes how a cluster's nodes nest: levels of node labels from the widest
// (a zone) to the narrowest (a host). A workload asks for one domain of a level with the
// annotation allot.dev/topology-required (or allot.dev/topology-preferred) naming it.
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=topo
// +kubebuilder:printcolumn:name="Levels",type=string,JSONPath=`.spec.levels[*].name`
type Topology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TopologySpec `json:"spec"`
}

// TopologySpec lists the levels.
type TopologySpec struct {
	// Levels from the widest to the narrowest.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.nodeLabel == a.nodeLabel))",message="levels must name distinct node labels"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !has(a.name) || self.exists_one(b, has(b.name) && b.name == a.name))",message="levels must have distinct names"
	// +listType=atomic
	Levels []TopologyLevel `json:"levels"`
}

// TopologyLevel is one level: the node label whose values are its domains.
type TopologyLevel struct {
	// Name is what workloads call the level (rack); default: the node label.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`
	// NodeLabel is the label key nodes carry, such as topology.kubernetes.io/zone.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	NodeLabel string `json:"nodeLabel"`
}

// TopologyList is a list of topologies.
// +kubebuilder:object:root=true
type TopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Topology `json:"items"`
}
