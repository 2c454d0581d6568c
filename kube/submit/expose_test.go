package submit

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// --service-type gives the workload's --port a Service of that type, or for ingress a
// ClusterIP Service behind an Ingress at /NAMESPACE/NAME; inference keeps its ClusterIP
// Service without the flag; what cannot be exposed is refused, naming the flag.
func TestServiceTypes(t *testing.T) {
	for _, c := range []struct {
		interactive, inference bool
		typ                    string
		want                   corev1.ServiceType // "" for none
		ingress                bool
	}{
		{interactive: true, typ: "", want: ""},
		{interactive: true, typ: ServiceClusterIP, want: corev1.ServiceTypeClusterIP},
		{interactive: true, typ: ServiceNodePort, want: corev1.ServiceTypeNodePort},
		{inference: true, typ: "", want: corev1.ServiceTypeClusterIP},
		{inference: true, typ: ServiceLoadBalancer, want: corev1.ServiceTypeLoadBalancer},
		{typ: ServiceIngress, want: corev1.ServiceTypeClusterIP, ingress: true},
	} {
		s := base()
		s.Namespace, s.Name, s.Port, s.ServiceType, s.Interactive, s.Inference = "team-a", "ui", 8888, c.typ, c.interactive, c.inference
		objs, err := s.Objects()
		if err != nil {
			t.Fatal(err)
		}
		var svc *corev1.Service
		var ing *networkingv1.Ingress
		for _, o := range objs {
			switch x := o.(type) {
			case *corev1.Service:
				svc = x
			case *networkingv1.Ingress:
				ing = x
			}
		}
		switch {
		case c.want == "" && svc != nil:
			t.Errorf("%+v: a Service %+v", c, svc.Spec)
		case c.want != "" && (svc == nil || svc.Spec.Type != c.want && !(c.want == corev1.ServiceTypeClusterIP && svc.Spec.Type == "") ||
			svc.Spec.Selector[LabelWorkload] != "ui" || svc.Spec.Ports[0].Port != 8888):
			t.Errorf("%+v: Service %+v, want type %s on port 8888", c, svc, c.want)
		}
		if c.ingress != (ing != nil) {
			t.Fatalf("%+v: Ingress %+v", c, ing)
		}
		if ing != nil {
			p := ing.Spec.Rules[0].HTTP.Paths[0]
			if p.Path != "/team-a/ui" || *p.PathType != networkingv1.PathTypePrefix || p.Backend.Service.Name != "ui" || p.Backend.Service.Port.Number != 8888 {
				t.Errorf("ingress path %+v", p)
			}
		}
	}
	for _, c := range []struct {
		change func(*Spec)
		want   string
	}{
		{func(s *Spec) { s.ServiceType = "ingres" }, `--service-type "ingres" is not allowed: clusterip, nodeport, loadbalancer or ingress`},
		{func(s *Spec) { s.ServiceType, s.Port = ServiceNodePort, 0 }, "--service-type nodeport needs --port"},
		{func(s *Spec) { s.ServiceType, s.Workers = ServiceNodePort, 2 }, "--service-type with --workers is not allowed"},
	} {
		s := base()
		s.Port = 80
		c.change(&s)
		if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}
