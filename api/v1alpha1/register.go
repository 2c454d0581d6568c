package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is GroupVersion by the name the generated clientset, listers and
// informers (kube/client) use.
var SchemeGroupVersion = GroupVersion

// Resource is a resource of the group, such as queues, for the generated listers' errors.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func metav1AddToGroupVersion(s *runtime.Scheme) { metav1.AddToGroupVersion(s, GroupVersion) }
