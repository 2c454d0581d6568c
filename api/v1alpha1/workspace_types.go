package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// WorkspaceTemplate is a kind of workspace a team keeps ready (Run:ai's environment,
// compute resource and data sources in one object): what runs, on how much, with which
// data. `allot submit --template NAME` and the console's Submit page start from it, and
// whatever the submitter sets besides wins. One of a namespace is its team's; a
// ClusterWorkspaceTemplate of the same name, an admin's, offered to every namespace, is
// used where the namespace has none.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=wst
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.environment.image`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.environment.tool`
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.spec.compute.gpu`
type WorkspaceTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec WorkspaceTemplateSpec `json:"spec"`
}

// WorkspaceTemplateList is a list of WorkspaceTemplates.
// +kubebuilder:object:root=true
type WorkspaceTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkspaceTemplate `json:"items"`
}

// ClusterWorkspaceTemplate is a WorkspaceTemplate an admin offers to every namespace.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cwst
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.environment.image`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.environment.tool`
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.spec.compute.gpu`
type ClusterWorkspaceTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec WorkspaceTemplateSpec `json:"spec"`
}

// ClusterWorkspaceTemplateList is a list of ClusterWorkspaceTemplates.
// +kubebuilder:object:root=true
type ClusterWorkspaceTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterWorkspaceTemplate `json:"items"`
}

// WorkspaceTemplateSpec is the environment, the compute and the data of a workspace.
type WorkspaceTemplateSpec struct {
	// Description is shown where a template is chosen.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Description string `json:"description,omitempty"`
	// Environment is what runs.
	Environment WorkspaceEnvironment `json:"environment"`
	// Compute is what it runs on.
	// +optional
	Compute WorkspaceCompute `json:"compute,omitempty"`
	// Data are mounted into the workspace's container.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Data []WorkspaceData `json:"data,omitempty"`
}

// The tools a workspace serves, each on its usual port unless the template names another.
const (
	ToolJupyter     = "jupyter"     // port 8888
	ToolVSCode      = "vscode"      // code-server, port 8080
	ToolTensorBoard = "tensorboard" // port 6006
	ToolShell       = "shell"       // no port: allot bash, kept running
)

// ToolPorts are the tools' usual ports.
var ToolPorts = map[string]int32{ToolJupyter: 8888, ToolVSCode: 8080, ToolTensorBoard: 6006}

// WorkspaceEnvironment is a workspace's image, what it serves and how it starts.
type WorkspaceEnvironment struct {
	// Image is the container image (allot submit -i).
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Tool is what the workspace serves: jupyter, vscode (code-server), tensorboard, or
	// shell (nothing served; it stays up for allot bash).
	// +kubebuilder:validation:Enum=jupyter;vscode;tensorboard;shell
	// +optional
	Tool string `json:"tool,omitempty"`
	// Type is the kind of workload: interactive (the default), train or inference.
	// +kubebuilder:validation:Enum=interactive;train;inference
	// +optional
	Type string `json:"type,omitempty"`
	// Command replaces the image's entrypoint (allot submit -- COMMAND).
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Command []string `json:"command,omitempty"`
	// Port is the one the tool serves on (--port); default the tool's usual port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
	// Env are NAME=VALUE (-e).
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Env []string `json:"env,omitempty"`
	// WorkingDir is where the container starts (--working-dir).
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
}

// WorkspaceCompute is what a workspace asks, as allot submit's flags write it.
type WorkspaceCompute struct {
	// GPU is -g: whole GPUs, or a fraction of one such as 0.5.
	// +kubebuilder:validation:Pattern=`^([0-9]+|0?\.[0-9]+)$`
	// +optional
	GPU string `json:"gpu,omitempty"`
	// GPUMemory is --gpu-memory: GPU memory of one shared GPU, such as 8Gi.
	// +optional
	GPUMemory string `json:"gpuMemory,omitempty"`
	// CPU and Memory are --cpu and --memory.
	// +optional
	CPU string `json:"cpu,omitempty"`
	// +optional
	Memory string `json:"memory,omitempty"`
	// LargeSHM is --large-shm: a memory-backed /dev/shm.
	// +optional
	LargeSHM bool `json:"largeSHM,omitempty"`
}

// WorkspaceData is one source of data, mounted at MountPath: a PersistentVolumeClaim of
// the namespace, an NFS export, or a git repository cloned when the workspace starts.
// +kubebuilder:validation:XValidation:rule="[has(self.pvc), has(self.nfs), has(self.git)].filter(x, x).size() == 1",message="exactly one of pvc, nfs and git"
type WorkspaceData struct {
	// PVC is the name of a PersistentVolumeClaim in the workspace's namespace.
	// +optional
	PVC string `json:"pvc,omitempty"`
	// NFS is an export, SERVER:/exported/path.
	// +kubebuilder:validation:Pattern=`^[^:/]+:/.*$`
	// +optional
	NFS string `json:"nfs,omitempty"`
	// Git is a repository cloned into MountPath before the workspace's container starts.
	// +optional
	Git *GitSource `json:"git,omitempty"`
	// MountPath is where the data is in the container.
	// +kubebuilder:validation:Pattern=`^/`
	MountPath string `json:"mountPath"`
	// ReadOnly mounts it read-only (a PVC or NFS export).
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// GitSource is a repository to clone.
type GitSource struct {
	// Repository is what git clone is given (https://…, or a path a mounted volume has).
	// +kubebuilder:validation:MinLength=1
	Repository string `json:"repository"`
	// Revision is a branch or tag to clone (default: the repository's own).
	// +optional
	Revision string `json:"revision,omitempty"`
	// Image is the image that clones it, with git as its entrypoint; default
	// DefaultGitImage. Pin a tag, or a digest, where images are pinned.
	// +optional
	Image string `json:"image,omitempty"`
}

// DefaultGitImage clones a template's repositories where its source names no image.
const DefaultGitImage = "alpine/git"
