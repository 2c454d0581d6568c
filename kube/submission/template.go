package submission

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
)

// Template reads the workspace template a submission names: the namespace's own
// WorkspaceTemplate, else the ClusterWorkspaceTemplate of that name. Not found, the error
// names where it looked and the templates there are.
func Template(ctx context.Context, allot versioned.Interface, namespace, name string) (*v1alpha1.WorkspaceTemplateSpec, error) {
	rc := allot.AllotV1alpha1().RESTClient()
	var wt v1alpha1.WorkspaceTemplate
	err := rc.Get().Namespace(namespace).Resource("workspacetemplates").Name(name).Do(ctx).Into(&wt)
	if err == nil {
		return &wt.Spec, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("--template %s: %w", name, err)
	}
	var cwt v1alpha1.ClusterWorkspaceTemplate
	err = rc.Get().Resource("clusterworkspacetemplates").Name(name).Do(ctx).Into(&cwt)
	if err == nil {
		return &cwt.Spec, nil
	}
	if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("--template %s: %w", name, err)
	}
	var have []string
	for _, t := range Templates(ctx, allot, namespace) {
		have = append(have, t.String())
	}
	list := "none"
	if len(have) > 0 {
		list = strings.Join(have, ", ")
	}
	return nil, fmt.Errorf("--template %q: no WorkspaceTemplate of that name in namespace %s, nor a ClusterWorkspaceTemplate; templates: %s", name, namespace, list)
}

// TemplateRef is a template a submission may name.
type TemplateRef struct {
	Name        string `json:"name"`
	Cluster     bool   `json:"cluster,omitempty"` // a ClusterWorkspaceTemplate
	Description string `json:"description,omitempty"`
}

func (t TemplateRef) String() string {
	if t.Cluster {
		return t.Name + " (cluster)"
	}
	return t.Name
}

// Templates are the templates a submission in namespace may use, those of the namespace
// first; what cannot be listed is left out.
func Templates(ctx context.Context, allot versioned.Interface, namespace string) []TemplateRef {
	rc := allot.AllotV1alpha1().RESTClient()
	out := []TemplateRef{}
	var wts v1alpha1.WorkspaceTemplateList
	if rc.Get().Namespace(namespace).Resource("workspacetemplates").Do(ctx).Into(&wts) == nil {
		for _, t := range wts.Items {
			out = append(out, TemplateRef{Name: t.Name, Description: t.Spec.Description})
		}
	}
	var cwts v1alpha1.ClusterWorkspaceTemplateList
	if rc.Get().Resource("clusterworkspacetemplates").Do(ctx).Into(&cwts) == nil {
		for _, t := range cwts.Items {
			out = append(out, TemplateRef{Name: t.Name, Cluster: true, Description: t.Spec.Description})
		}
	}
	return out
}
