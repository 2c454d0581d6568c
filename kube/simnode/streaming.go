package simnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubelet/pkg/cri/streaming"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
)

// serve starts the simulated nodes' kubelet endpoint: HTTPS on a loopback port, serving
// what the API server proxies to a node's kubelet for a pod's port-forward
// (/portForward/{namespace}/{pod}, through the kubelet's own port-forward stream handling)
// and its container logs (/containerLogs/{namespace}/{pod}/{container}). Every simulated
// node advertises it (advertise). The API server has no kubelet CA configured, so it does
// not check the certificate; the endpoint is on loopback only and answers for simulated
// pods only. As a kubelet's, it accepts only clients with a certificate the cluster's
// client CA signed (the API server's kubelet client certificate), where the API server
// publishes one.
func (k *Kubelet) serve(ctx context.Context) error {
	cert, err := loopbackCert(k.now())
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if pool := k.clientCA(ctx); pool != nil {
		tlsConfig.ClientAuth, tlsConfig.ClientCAs = tls.RequireAndVerifyClientCert, pool
	} else {
		slog.Warn("simulated kubelet: the API server publishes no client CA; its endpoint checks no client certificate")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{namespace}/{pod}", k.servePortForward)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.serveLogs)
	srv := &http.Server{Handler: mux, TLSConfig: tlsConfig, ReadHeaderTimeout: 30 * time.Second}
	k.mu.Lock()
	k.endpoint = l.Addr().(*net.TCPAddr).Port
	k.mu.Unlock()
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && err != http.ErrServerClosed {
			slog.Warn("simulated kubelet: endpoint", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
		k.workspaces.closeAll()
	}()
	return nil
}

// clientCA is the CA the cluster trusts for client certificates, as the API server
// publishes it (client-ca-file in kube-system/extension-apiserver-authentication, where a
// kubelet started with --client-ca-file reads its own); nil when there is none.
func (k *Kubelet) clientCA(ctx context.Context) *x509.CertPool {
	var pool *x509.CertPool
	// The API server writes the ConfigMap once it has started: give it a few seconds.
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := k.client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if ca := cm.Data["client-ca-file"]; ca != "" {
			p := x509.NewCertPool()
			if p.AppendCertsFromPEM([]byte(ca)) {
				pool = p
			}
		}
		return true, nil
	})
	return pool
}

// advertise writes the endpoint into a simulated node's status, as a kubelet reports its
// own (daemonEndpoints.kubeletEndpoint and a node address), when the node does not show it
// yet: a restarted allot up serves on another port.
func (k *Kubelet) advertise(ctx context.Context, n *corev1.Node) {
	k.mu.Lock()
	port := k.endpoint
	k.mu.Unlock()
	if port == 0 {
		return
	}
	has := false
	for _, a := range n.Status.Addresses {
		has = has || (a.Type == corev1.NodeInternalIP && a.Address == "127.0.0.1")
	}
	if has && n.Status.DaemonEndpoints.KubeletEndpoint.Port == int32(port) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}}}})
	if _, err := k.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && ctx.Err() == nil {
		slog.Warn("simulated kubelet: kubelet endpoint", "node", n.Name, "err", err)
	}
}

// runningPod is a pod this kubelet runs, by namespace and name, as the informer last saw it.
func (k *Kubelet) runningPod(namespace, name string) (*corev1.Pod, error) {
	k.mu.Lock()
	store := k.pods
	k.mu.Unlock()
	if store == nil {
		return nil, fmt.Errorf("pod does not exist")
	}
	o, ok, _ := store.GetByKey(namespace + "/" + name)
	if !ok {
		return nil, fmt.Errorf("pod does not exist")
	}
	p := o.(*corev1.Pod)
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return nil, fmt.Errorf("pod %s/%s is not running", namespace, name)
	}
	return p, nil
}

func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p, err := k.runningPod(r.PathValue("namespace"), r.PathValue("pod"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	// As the kubelet's CRI streaming server does, with its default timeouts.
	portforward.ServePortForward(w, r, forwarder{k}, p.Namespace+"/"+p.Name, p.UID, opts,
		streaming.DefaultConfig.StreamIdleTimeout, streaming.DefaultConfig.StreamCreationTimeout, portforward.SupportedProtocols)
}

// forwarder connects a port-forward stream to the pod's simulated process, as a container
// runtime connects it to the port inside the pod's network namespace.
type forwarder struct{ k *Kubelet }

func (f forwarder) PortForward(ctx context.Context, key string, uid types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	ns, name, _ := strings.Cut(key, "/")
	p, err := f.k.runningPod(ns, name)
	if err != nil || p.UID != uid {
		return fmt.Errorf("pod %s is gone", key)
	}
	addr, err := f.k.workspaces.listen(p, port)
	if err != nil {
		return err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("pod %s port %d: %w", key, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	<-done
	<-done
	return nil
}

func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	p, err := k.runningPod(r.PathValue("namespace"), r.PathValue("pod"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	container := r.PathValue("container")
	found := false
	for _, c := range p.Spec.Containers {
		found = found || c.Name == container
	}
	if !found {
		http.Error(w, fmt.Sprintf("container %q is not in pod %s/%s", container, p.Namespace, p.Name), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	if container == p.Spec.Containers[0].Name {
		_, _ = io.WriteString(w, workspaceLog(p))
	}
}

// loopbackCert is a self-signed serving certificate for 127.0.0.1.
func loopbackCert(now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "allot simulated kubelet"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// workspaces are the simulated processes of pods annotated allot.dev/sim-http, by pod UID.
type workspaces struct {
	mu   sync.Mutex
	byID map[types.UID]*workspace
}

// stop ends a pod's simulated process, once the pod is gone.
func (ws *workspaces) stop(uid types.UID) {
	ws.mu.Lock()
	w := ws.byID[uid]
	delete(ws.byID, uid)
	ws.mu.Unlock()
	if w != nil {
		w.srv.Close()
	}
}

func (ws *workspaces) closeAll() {
	ws.mu.Lock()
	all := ws.byID
	ws.byID = nil
	ws.mu.Unlock()
	for _, w := range all {
		w.srv.Close()
	}
}
