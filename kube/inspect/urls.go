package inspect

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/kube/submit"
)

// Pending is the URL of a Service or Ingress whose address is not given yet (a load
// balancer or ingress controller has not written its status).
const Pending = "<pending>"

// withURLs gives each workload allot submit exposed (--port, --service-type) the URL its
// port is reached at: in the cluster for a ClusterIP Service, at the node of one of its pods
// for a NodePort, at the address the load balancer or ingress controller wrote once it
// has. A user who may not list Services or Ingresses sees no URL.
func withURLs(ctx context.Context, client kubernetes.Interface, namespace string, ws []Workload) {
	svcs, err := client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: submit.LabelWorkload})
	if err != nil || len(svcs.Items) == 0 {
		return
	}
	ings, _ := client.NetworkingV1().Ingresses(namespace).List(ctx, metav1.ListOptions{LabelSelector: submit.LabelWorkload})
	at := map[[2]string]int{}
	for i, w := range ws {
		at[[2]string{w.Namespace, w.Name}] = i
	}
	for _, s := range svcs.Items {
		i, ok := at[[2]string{s.Namespace, s.Labels[submit.LabelWorkload]}]
		if !ok || s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue // a distributed job's rendezvous
		}
		ws[i].URL = serviceURL(&s, ws[i].Pods)
	}
	if ings == nil {
		return
	}
	for _, ing := range ings.Items {
		if i, ok := at[[2]string{ing.Namespace, ing.Labels[submit.LabelWorkload]}]; ok {
			ws[i].URL = ingressURL(&ing)
		}
	}
}

func serviceURL(s *corev1.Service, pods []Pod) string {
	port := s.Spec.Ports[0]
	switch s.Spec.Type {
	case corev1.ServiceTypeNodePort:
		for _, p := range pods {
			if p.HostIP != "" && port.NodePort != 0 {
				return "http://" + net.JoinHostPort(p.HostIP, strconv.Itoa(int(port.NodePort)))
			}
		}
		return Pending
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range s.Status.LoadBalancer.Ingress {
			if host := first(in.Hostname, in.IP); host != "" {
				return "http://" + net.JoinHostPort(host, strconv.Itoa(int(port.Port)))
			}
		}
		return Pending
	}
	return fmt.Sprintf("http://%s.%s.svc:%d", s.Name, s.Namespace, port.Port)
}

func ingressURL(ing *networkingv1.Ingress) string {
	path := "/"
	if r := ing.Spec.Rules; len(r) > 0 && r[0].HTTP != nil && len(r[0].HTTP.Paths) > 0 {
		path = r[0].HTTP.Paths[0].Path
	}
	host := ""
	if r := ing.Spec.Rules; len(r) > 0 {
		host = r[0].Host
	}
	for _, in := range ing.Status.LoadBalancer.Ingress {
		if host == "" {
			host = first(in.Hostname, in.IP)
		}
	}
	if host == "" {
		return Pending
	}
	return "http://" + host + path
}

func first(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
