package submit

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// How a workload's --port is reached (--service-type, Run:ai's names).
const (
	ServiceClusterIP    = "clusterip"    // inside the cluster: NAME.NAMESPACE.svc
	ServiceNodePort     = "nodeport"     // every node's address, at a port Kubernetes picks
	ServiceLoadBalancer = "loadbalancer" // an address the cloud's load balancer gives
	ServiceIngress      = "ingress"      // the cluster's ingress controller, at /NAMESPACE/NAME
)

// IngressPath is where --service-type ingress serves a workload: the path its app must
// take as its base (Jupyter's --ServerApp.base_url, TensorBoard's --path_prefix).
func IngressPath(namespace, name string) string { return "/" + namespace + "/" + name }

// checkExpose refuses a --service-type that cannot be given.
func (s Spec) checkExpose() error {
	if s.ServiceType == "" {
		return nil
	}
	switch s.ServiceType {
	case ServiceClusterIP, ServiceNodePort, ServiceLoadBalancer, ServiceIngress:
	default:
		return fmt.Errorf("--service-type %q is not allowed: clusterip, nodeport, loadbalancer or ingress", s.ServiceType)
	}
	if s.Port <= 0 {
		return fmt.Errorf("--service-type %s needs --port: the container port to expose", s.ServiceType)
	}
	if s.Type() == TypeDistributed {
		return fmt.Errorf("--service-type with --workers is not allowed: a distributed job's workers have a headless Service of their own, for their rendezvous (NAME-i.NAME); expose one worker with kubectl expose pod")
	}
	return nil
}

// exposed is the Service (and, for ingress, the Ingress) that serves the workload's port:
// for inference always where a port is set (ClusterIP unless told otherwise), for other
// types only with --service-type.
func (s Spec) exposed() []runtime.Object {
	typ := s.ServiceType
	if s.Port <= 0 || typ == "" && s.Type() != TypeInference {
		return nil
	}
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: s.meta(),
		Spec: corev1.ServiceSpec{Selector: map[string]string{LabelWorkload: s.Name},
			Ports: []corev1.ServicePort{{Name: "http", Port: int32(s.Port), TargetPort: intstr.FromInt32(int32(s.Port))}}}}
	switch typ {
	case ServiceNodePort:
		svc.Spec.Type = corev1.ServiceTypeNodePort
	case ServiceLoadBalancer:
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	}
	if typ != ServiceIngress {
		return []runtime.Object{svc}
	}
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}, ObjectMeta: s.meta(),
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: IngressPath(s.Namespace, s.Name), PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: s.Name,
					Port: networkingv1.ServiceBackendPort{Number: int32(s.Port)}}}}}}}}}}}
	return []runtime.Object{svc, ing}
}
