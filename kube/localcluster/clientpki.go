package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// frontProxyUser is the name the API server's aggregator presents to aggregated API
// servers (its client certificate's CN), which they accept as the front proxy.
const frontProxyUser = "front-proxy-client"

// configureAggregation has the API server proxy aggregated APIs (an APIService, such as
// the custom metrics API Allot's scheduler serves) as a real control plane does: with a
// front-proxy CA of its own under dir/pki, a client certificate it signs for the
// aggregator, and the request headers that carry the user. The API server publishes the
// CA and the header names in kube-system/extension-apiserver-authentication, where the
// aggregated server reads them to trust the forwarded user.
func configureAggregation(s *options.ServerRunOptions, dir string) error {
	pki := filepath.Join(dir, "pki")
	ca, crt, key := filepath.Join(pki, "front-proxy-ca.crt"), filepath.Join(pki, "front-proxy-client.crt"), filepath.Join(pki, "front-proxy-client.key")
	if !exists(ca) || !exists(crt) || !exists(key) {
		if err := writeClientPKI(ca, crt, key, "allot-front-proxy-ca", frontProxyUser); err != nil {
			return fmt.Errorf("front-proxy certificates: %w", err)
		}
	}
	s.Authentication.RequestHeader.ClientCAFile = ca
	s.Authentication.RequestHeader.AllowedNames = []string{frontProxyUser}
	s.Authentication.RequestHeader.UsernameHeaders = []string{"X-Remote-User"}
	s.Authentication.RequestHeader.UIDHeaders = []string{"X-Remote-Uid"}
	s.Authentication.RequestHeader.GroupHeaders = []string{"X-Remote-Group"}
	s.Authentication.RequestHeader.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
	s.ProxyClientCertFile, s.ProxyClientKeyFile = crt, key
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// KubeletClientUser is the name the API server presents to kubelets (its client
// certificate's CN, signed by the CA it trusts for client certificates and publishes as
// client-ca-file in kube-system/extension-apiserver-authentication), as kubeadm's
// apiserver-kubelet-client certificate does. The simulated kubelet accepts only it.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// configureKubeletClient has the API server authenticate to kubelets (port-forward, logs)
// with a client certificate, as a real control plane does: a client CA of its own under
// dir/pki, which it also trusts for client certificates (and so publishes, for kubelets to
// read), and a certificate for KubeletClientUser it signs. That user has no permission in
// the cluster: it only names the API server to kubelets.
func configureKubeletClient(s *options.ServerRunOptions, dir string) error {
	pki := filepath.Join(dir, "pki")
	ca, crt, key := filepath.Join(pki, "client-ca.crt"), filepath.Join(pki, "apiserver-kubelet-client.crt"), filepath.Join(pki, "apiserver-kubelet-client.key")
	if !exists(ca) || !exists(crt) || !exists(key) {
		if err := writeClientPKI(ca, crt, key, "allot-client-ca", KubeletClientUser); err != nil {
			return fmt.Errorf("kubelet client certificates: %w", err)
		}
	}
	s.Authentication.ClientCert.ClientCA = ca
	s.KubeletConfig.TLSClientConfig.CertFile, s.KubeletConfig.TLSClientConfig.KeyFile = crt, key
	return nil
}

// writeClientPKI makes a CA and a client certificate for clientCN that it signs.
func writeClientPKI(caPath, crtPath, keyPath, caName, clientCN string) error {
	if err := os.MkdirAll(filepath.Dir(caPath), 0o700); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: caName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: clientCN},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for path, block := range map[string]*pem.Block{caPath: {Type: "CERTIFICATE", Bytes: caDER}, crtPath: {Type: "CERTIFICATE", Bytes: der},
		keyPath: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}
