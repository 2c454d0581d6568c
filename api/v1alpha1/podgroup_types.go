package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// PodGroup is a gang: at least MinMember of its pods start together or none do.
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pg
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queue`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minMember`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodGroupSpec   `json:"spec,omitempty"`
	Status PodGroupStatus `json:"status,omitempty"`
}

// PodGroupSpec is the gang's shape.
type PodGroupSpec struct {
	// MinMember pods must be placed together for any to start.
	// +kubebuilder:validation:Minimum=1
	MinMember int32 `json:"minMember"`
	// Queue the group is submitted to.
	// +kubebuilder:validation:MinLength=1
	Queue string `json:"queue"`
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Topology names a node label whose value the group's nodes should share.
	// +optional
	Topology string `json:"topology,omitempty"`
	// StaleGracePeriod is how long the group may run with fewer than minMember pods (a
	// member's node or GPU died, or it was deleted) before the rest are stopped so that its
	// owner starts it again whole: a Go duration such as 30s or 5m. Unset, its queue's
	// gangStaleGracePeriod applies, else the scheduler's --gang-grace.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="staleGracePeriod must be a duration such as 30s or 5m"
	// +optional
	StaleGracePeriod *metav1.Duration `json:"staleGracePeriod,omitempty"`
	// Elastic is set by Allot's workload controller for a workload that grows and shrinks
	// through its own replica count (an elastic indexed Job of allot submit, a PyTorchJob
	// with an elasticPolicy): the scheduler raises the count when its members fit and
	// lowers it before it stops any of them.
	// +optional
	Elastic *PodGroupElastic `json:"elastic,omitempty"`
}

// PodGroupElastic is how far a workload may be grown, in pods of the group.
// +kubebuilder:validation:XValidation:rule="self.members <= self.maxMembers",message="elastic.members must be at most elastic.maxMembers"
type PodGroupElastic struct {
	// Members is how many pods the workload asks for now.
	// +kubebuilder:validation:Minimum=1
	Members int32 `json:"members"`
	// MaxMembers is how many pods it may be grown to.
	// +kubebuilder:validation:Minimum=1
	MaxMembers int32 `json:"maxMembers"`
}

// PodGroupStatus is the scheduler's view of the group.
type PodGroupStatus struct {
	// +kubebuilder:validation:Enum=Pending;Running;Completed
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	Running int32 `json:"running,omitempty"`
	// Reason says why the group waits.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Interruptions counts how often the group was stopped because spot capacity it ran
	// on was taken back: past its interruption budget it runs on on-demand capacity only.
	// +optional
	Interruptions int32 `json:"interruptions,omitempty"`
}

// PodGroupList is a list of pod groups.
// +kubebuilder:object:root=true
type PodGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodGroup `json:"items"`
}
