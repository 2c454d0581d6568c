package localcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// startAPIServer runs kube-apiserver in this process against the etcd at etcdURL, serving
// TLS on a loopback port with certificates generated under dir. It returns a privileged
// client configuration once /healthz is ok and the default namespace exists.
func startAPIServer(ctx context.Context, dir, etcdURL string) (*rest.Config, <-chan error, error) {
	s := options.NewServerRunOptions()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	s.SecureServing.Listener = l
	s.SecureServing.BindPort = l.Addr().(*net.TCPAddr).Port
	s.SecureServing.ServerCert.CertDirectory = filepath.Join(dir, "pki")
	s.SecureServing.ExternalAddress = net.ParseIP("127.0.0.1")
	s.ServiceClusterIPRanges = "10.96.0.0/16"
	// The "kubernetes" Service cannot point at a loopback address; nothing here needs it.
	s.EndpointReconcilerType = "none"
	s.Etcd.StorageConfig = *storagebackend.NewDefaultConfig("/registry", nil)
	s.Etcd.StorageConfig.Transport.ServerList = []string{etcdURL}
	key, err := serviceAccountKey(dir)
	if err != nil {
		return nil, nil, err
	}
	s.ServiceAccountSigningKeyFile = key
	s.Authentication.ServiceAccounts.Issuers = []string{"https://allot.local"}
	s.Authentication.ServiceAccounts.KeyFiles = []string{key}
	s.Authorization.Modes = []string{"RBAC"}
	// Webhooks and aggregated APIs behind a Service are reached at its endpoints, not its
	// cluster IP: no kube-proxy runs here to route one (a real node's pods, such as the
	// chart's webhook, are reached on their pod address).
	s.EnableAggregatorRouting = true
	if err := configureAggregation(s, dir); err != nil {
		return nil, nil, err
	}
	if err := configureKubeletClient(s, dir); err != nil {
		return nil, nil, err
	}

	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, nil, fmt.Errorf("kube-apiserver options: %v", errs)
	}
	config, err := app.NewConfig(completed)
	if err != nil {
		return nil, nil, err
	}
	// An APIService naming an ExternalName Service (the custom metrics API that allot up and
	// the tests serve on loopback: kube/metricsapi) is reached at that name, as without
	// endpoint routing (which refuses the type); any other at one of its endpoints.
	services := config.KubeAPIs.ControlPlane.VersionedInformers.Core().V1().Services().Lister()
	config.Aggregator.ExtraConfig.ServiceResolver = externalNameFirst{services: services,
		byName: aggregatorapiserver.NewClusterIPServiceResolver(services), others: config.Aggregator.ExtraConfig.ServiceResolver}
	cc, err := config.Complete()
	if err != nil {
		return nil, nil, err
	}
	server, err := app.CreateServerChain(cc)
	if err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	errCh := make(chan error, 1)
	go func() {
		defer close(errCh)
		prepared, err := server.PrepareRun()
		if err != nil {
			errCh <- err
			return
		}
		if err := prepared.Run(ctx); err != nil {
			errCh <- err
		}
	}()
	rc := rest.CopyConfig(server.GenericAPIServer.LoopbackClientConfig)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 25*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-errCh:
			return false, fmt.Errorf("kube-apiserver stopped: %w", err)
		default:
		}
		if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, nil
		}
		status := 0
		client.CoreV1().RESTClient().Get().AbsPath("/healthz").Do(ctx).StatusCode(&status)
		return status == 200, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("waiting for kube-apiserver: %w", err)
	}
	return rc, errCh, nil
}

// serviceAccountKey keeps one signing key per data directory so tokens survive restarts.
func serviceAccountKey(dir string) (string, error) {
	path := filepath.Join(dir, "pki", "sa.key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeRootCA writes the CA bundle the controller manager publishes to every namespace
// (kube-root-ca.crt, a pod's service-account ca.crt): the loopback client's CA, and the CA
// of the serving certificate kube-apiserver generated for its other names (127.0.0.1,
// 10.96.0.1, kubernetes.default.svc), the one a pod's in-cluster client meets.
func writeRootCA(dir string, loopbackCA []byte) error {
	bundle := append([]byte(nil), loopbackCA...)
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	served, err := os.ReadFile(filepath.Join(dir, "pki", "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("kube-apiserver's serving certificate: %w", err)
	}
	for rest := served; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("kube-apiserver's serving certificate: %w", err)
		}
		if c.IsCA {
			bundle = append(bundle, pem.EncodeToMemory(b)...)
		}
	}
	return os.WriteFile(filepath.Join(dir, "pki", "ca.crt"), bundle, 0o600)
}

// externalNameFirst resolves an ExternalName Service by its name (byName) and any other
// Service by others.
type externalNameFirst struct {
	services       corelisters.ServiceLister
	byName, others aggregatorapiserver.ServiceResolver
}

func (r externalNameFirst) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	if svc, err := r.services.Services(namespace).Get(name); err == nil && svc.Spec.Type == corev1.ServiceTypeExternalName {
		return r.byName.ResolveEndpoint(namespace, name, port)
	}
	return r.others.ResolveEndpoint(namespace, name, port)
}
