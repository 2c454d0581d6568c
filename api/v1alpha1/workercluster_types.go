package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// WorkerCluster is a cluster a manager dispatches work to (docs/multicluster.md): an
// admin of the manager registers it with a kubeconfig kept in a Secret, and the manager
// writes what it finds there (whether it answers, its GPUs) into the status.
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=wcl
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpus`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.freeGPUs`
type WorkerCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkerClusterSpec   `json:"spec"`
	Status WorkerClusterStatus `json:"status,omitempty"`
}

// WorkerClusterList is a list of WorkerClusters.
// +kubebuilder:object:root=true
type WorkerClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkerCluster `json:"items"`
}

// WorkerClusterSpec says how the manager reaches the worker.
type WorkerClusterSpec struct {
	// KubeconfigSecret holds the kubeconfig the manager uses on the worker: its current
	// context, with the rights docs/multicluster.md lists.
	KubeconfigSecret SecretKey `json:"kubeconfigSecret"`
	// Paused keeps new work off the worker; what runs there goes on and is mirrored.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// SecretKey names one key of a Secret.
type SecretKey struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key is the Secret's data key holding the kubeconfig; default kubeconfig.
	// +optional
	Key string `json:"key,omitempty"`
}

// WorkerClusterStatus is what the manager last found on the worker.
type WorkerClusterStatus struct {
	// Conditions: Ready (reasons Connected, SecretMissing, BadKubeconfig, Unauthorized,
	// Unreachable).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Nodes, GPUs and FreeGPUs count the worker's GPU nodes and their whole GPUs, and
	// those no pod holds.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// +optional
	FreeGPUs int32 `json:"freeGPUs,omitempty"`
	// Models are the GPU models of its nodes.
	// +listType=atomic
	// +optional
	Models []string `json:"models,omitempty"`
	// LastSeen is when the worker last answered.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
}

// ClusterPart is the part of a manager Queue's quota kept in one worker cluster.
type ClusterPart struct {
	// Quota is how many of the queue's guaranteed GPUs are guaranteed in that cluster.
	// +kubebuilder:validation:Minimum=0
	Quota int32 `json:"quota"`
}
