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
