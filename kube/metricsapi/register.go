package metricsapi

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// The Service an embedded cluster's APIService names (the chart names the scheduler's).
const (
	localService   = "allot-custom-metrics"
	localNamespace = metav1.NamespaceSystem
)

// APIServiceName is the APIService that registers the API with the aggregator.
const APIServiceName = Version + "." + Group

// LocalCert writes (once) a self-signed serving certificate under dir for the Service the
// embedded cluster's aggregator reaches the API by, and returns its PEM, the CA bundle.
func LocalCert(dir string) ([]byte, error) {
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if b, err := os.ReadFile(crt); err == nil {
		if _, err := os.Stat(key); err == nil {
			return b, nil
		}
	}
	host := localService + "." + localNamespace + ".svc"
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, []net.IP{net.ParseIP("127.0.0.1")}, []string{host})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return certPEM, os.WriteFile(crt, certPEM, 0o600)
}

// RegisterLocal registers the API served at addr (a loopback host:port of this machine)
// with an embedded cluster's aggregator: an ExternalName Service, which the aggregator
// resolves to that host, on the port, and the APIService naming it with caBundle. (A real
// cluster's Service selects the scheduler's pods; the chart makes both.)
func RegisterLocal(ctx context.Context, rc *rest.Config, addr string, caBundle []byte) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	agg, err := aggregator.NewForConfig(rc)
	if err != nil {
		return err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: localService, Namespace: localNamespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: host,
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}}}
	if old, err := client.CoreV1().Services(localNamespace).Get(ctx, localService, metav1.GetOptions{}); err == nil {
		old.Spec = svc.Spec
		_, err = client.CoreV1().Services(localNamespace).Update(ctx, old, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("service %s/%s: %w", localNamespace, localService, err)
		}
	} else if _, err := client.CoreV1().Services(localNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s/%s: %w", localNamespace, localService, err)
	}
	p := int32(port)
	want := &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
		Spec: apiregv1.APIServiceSpec{Group: Group, Version: Version, GroupPriorityMinimum: 100, VersionPriority: 100, CABundle: caBundle,
			Service: &apiregv1.ServiceReference{Namespace: localNamespace, Name: localService, Port: &p}}}
	old, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = agg.ApiregistrationV1().APIServices().Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		old.Spec = want.Spec
		_, err = agg.ApiregistrationV1().APIServices().Update(ctx, old, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("APIService %s: %w", APIServiceName, err)
	}
	return nil
}
