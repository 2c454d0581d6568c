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
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
