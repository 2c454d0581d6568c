package realnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// What kube-proxy does for the API server, here: a pod's in-cluster client (client-go's
// rest.InClusterConfig) dials the `kubernetes` Service's cluster IP, which the kubelet
// gives every container as KUBERNETES_SERVICE_HOST. No kube-proxy runs beside the embedded
// cluster, and the Service has no endpoints (the API server serves on loopback, which an
// Endpoints object may not name). So the rig holds the cluster IP itself, on a bridge of
// its own with no port (svcBridge), and forwards each connection to the API server's
// loopback address. The pods' network routes that one address to the node (cniConfig);
// TLS passes through untouched, and kube-apiserver's serving certificate names the
// cluster IP.

// svcBridge carries the `kubernetes` Service's cluster IP on this machine.
const svcBridge = "allot-svc0"

// apiService is the `kubernetes` Service as pods reach it.
type apiService struct {
	ip   string // its cluster IP
	port int
}

// lookupAPIService reads the `kubernetes` Service's cluster IP and port.
func lookupAPIService(ctx context.Context, client kubernetes.Interface) (apiService, error) {
	svc, err := client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return apiService{}, fmt.Errorf("the kubernetes Service: %w", err)
	}
	if net.ParseIP(svc.Spec.ClusterIP) == nil || len(svc.Spec.Ports) == 0 {
		return apiService{}, fmt.Errorf("the kubernetes Service has no cluster IP and port (%q)", svc.Spec.ClusterIP)
	}
	return apiService{ip: svc.Spec.ClusterIP, port: int(svc.Spec.Ports[0].Port)}, nil
}

// serveAPIService holds the Service's address on svcBridge and forwards what reaches it to
// apiHost (the API server's https://127.0.0.1:port), until Stop.
func (n *Node) serveAPIService(s apiService, apiHost string) error {
	u, err := url.Parse(apiHost)
	if err != nil || u.Host == "" {
		return fmt.Errorf("the API server's address %q: %v", apiHost, err)
	}
	if err := makeHostBridge(svcBridge, "", s.ip+"/32"); err != nil {
		return err
	}
	n.onStop(func() { _ = exec.Command("ip", "link", "delete", svcBridge).Run() })
	l, err := net.Listen("tcp", net.JoinHostPort(s.ip, strconv.Itoa(s.port)))
	if err != nil {
		return fmt.Errorf("holding the kubernetes Service's address: %w", err)
	}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	stopped := false
	// track notes a connection open (false once it stops being copied); one opened after
	// Stop is closed at once.
	track := func(c net.Conn, on bool) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case on && stopped:
			c.Close()
			return false
		case on:
			open[c] = true
		default:
			delete(open, c)
		}
		return true
	}
	n.onStop(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		for c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				up, err := net.Dial("tcp", u.Host)
				if err != nil {
					c.Close()
					return
				}
				if !track(c, true) || !track(up, true) {
					c.Close()
					up.Close()
					return
				}
				splice(c, up)
				track(c, false)
				track(up, false)
			}()
		}
	}()
	return nil
}

// splice copies between a and b, both ways, until both directions end; then closes both.
func splice(a, b net.Conn) {
	defer a.Close()
	defer b.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // an error is one side going away: both close below
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
}
