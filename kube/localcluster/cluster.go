// Package localcluster runs a real Kubernetes control plane in one process: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler (for the pods that are not
// Allot's), built from the upstream modules, with Allot's CRDs installed. It backs
// `allot up` and every test that concerns Kubernetes.
package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/allot-dev/allot/internal/flock"
)

// Cluster is a running control plane.
type Cluster struct {
	Config *rest.Config
	etcd   *embed.Etcd
	lock   *flock.Lock // the data directory's (lockDir)
	cancel context.CancelFunc
	done   []<-chan error
}

// Start brings up etcd and kube-apiserver with their state under dir, the controller
// manager and, for pods not Allot's, the upstream default scheduler.
func Start(ctx context.Context, dir string) (*Cluster, error) { return start(ctx, dir, true) }

// StartWithoutDefaultScheduler is Start without the in-process default scheduler: for a
// benchmark that runs kube-scheduler as a process of its own under that name, which would
// otherwise share the pods with it.
func StartWithoutDefaultScheduler(ctx context.Context, dir string) (*Cluster, error) {
	return start(ctx, dir, false)
}

func start(ctx context.Context, dir string, defaultScheduler bool) (*Cluster, error) {
	if err := setGates(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	e, etcdURL, err := startEtcd(ctx, dir)
	if err != nil {
		cancel()
		lock.Release()
		return nil, err
	}
	rc, done, err := startAPIServer(ctx, dir, etcdURL)
	if err != nil {
		cancel()
		e.Close()
		lock.Release()
		return nil, err
	}
	c := &Cluster{Config: rc, etcd: e, lock: lock, cancel: cancel, done: []<-chan error{done}}
	if err := installCRDs(ctx, rc); err != nil {
		c.Stop()
		return nil, err
	}
	if err := writeRootCA(dir, rc.CAData); err != nil {
		c.Stop()
		return nil, err
	}
	cm, err := startControllers(ctx, dir, rc)
	if err != nil {
		c.Stop()
		return nil, err
	}
	c.done = append(c.done, cm)
	if defaultScheduler {
		ks, err := startDefaultScheduler(ctx, rc)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.done = append(c.done, ks)
	}
	if err := waitForServiceAccount(ctx, rc, cm); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitForServiceAccount returns once the controller manager has created the default
// namespace's service account: until then the ServiceAccount admission plugin refuses pods.
func waitForServiceAccount(ctx context.Context, rc *rest.Config, cm <-chan error) error {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-cm:
			return false, fmt.Errorf("kube-controller-manager stopped: %v", err)
		default:
		}
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default service account: %w", err)
	}
	return nil
}

// Store is a client of the cluster's etcd within this process (no network between them):
// what the API server has stored, as stored, for a caller to close.
func (c *Cluster) Store() *clientv3.Client { return v3client.New(c.etcd.Server) }

// Stop shuts the control plane down and waits for the API server to finish.
func (c *Cluster) Stop() {
	c.cancel()
	stopped := make(chan struct{})
	go func() {
		for _, done := range c.done {
			for range done {
			}
		}
		close(stopped)
	}()
	// The API server's graceful shutdown tells each HTTP/2 connection to go away and
	// waits up to a second for its client to close it; this process's clients (every one
	// made from Config shares client-go's cached transport) keep theirs open while idle.
	// Closing them as their watches end stops the control plane in tenths of a second,
	// not one and more: every test stops one.
	rt, err := rest.TransportFor(c.Config)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-stopped:
			waiting = false
		case <-tick.C:
			if err == nil {
				utilnet.CloseIdleConnectionsFor(rt)
			}
		}
	}
	c.etcd.Close()
	c.lock.Release()
}

// WriteKubeconfig writes a kubeconfig for kubectl and the allot CLI.
func (c *Cluster) WriteKubeconfig(path string) error {
	return writeKubeconfig(c.Config, path)
}

func writeKubeconfig(rc *rest.Config, path string) error {
	b, err := Kubeconfig(rc)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// Kubeconfig is a kubeconfig for rc: its server, CA, bearer token and the identity it
// impersonates, if any (a multi-cluster manager's Secret for a worker, say).
func Kubeconfig(rc *rest.Config) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["allot"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData,
		TLSServerName: rc.ServerName, InsecureSkipTLSVerify: len(rc.CAData) == 0}
	cfg.AuthInfos["allot-admin"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken, Impersonate: rc.Impersonate.UserName,
		ImpersonateGroups: rc.Impersonate.Groups}
	cfg.Contexts["allot"] = &clientcmdapi.Context{Cluster: "allot", AuthInfo: "allot-admin"}
	cfg.CurrentContext = "allot"
	return clientcmd.Write(*cfg)
}
