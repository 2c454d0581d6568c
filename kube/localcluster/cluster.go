// Package localcluster runs a real Kubernetes control plane in one process: etcd and
// kube-apiserver built from the upstream modules, with Allot's CRDs installed and the Job
// controller of kube-controller-manager running. It backs `allot up` and every test that
// concerns Kubernetes.
package localcluster

import (
	"context"
	"fmt"
	"os"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is a running control plane.
type Cluster struct {
	Config *rest.Config
	etcd   *embed.Etcd
	cancel context.CancelFunc
	done   <-chan error
}

// Start brings up etcd and kube-apiserver with their state under dir.
func Start(ctx context.Context, dir string) (*Cluster, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	e, etcdURL, err := startEtcd(ctx, dir)
	if err != nil {
		cancel()
		return nil, err
	}
	rc, done, err := startAPIServer(ctx, dir, etcdURL)
	if err != nil {
		cancel()
		e.Close()
		return nil, err
	}
	c := &Cluster{Config: rc, etcd: e, cancel: cancel, done: done}
	if err := installCRDs(ctx, rc); err != nil {
		c.Stop()
		return nil, err
	}
	if err := startControllers(ctx, rc); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop shuts the control plane down and waits for the API server to finish.
func (c *Cluster) Stop() {
	c.cancel()
	for range c.done {
	}
	c.etcd.Close()
}

// WriteKubeconfig writes a kubeconfig for kubectl and the allot CLI.
func (c *Cluster) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["allot"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData,
		TLSServerName: c.Config.ServerName, InsecureSkipTLSVerify: len(c.Config.CAData) == 0}
	cfg.AuthInfos["allot-admin"] = &clientcmdapi.AuthInfo{Token: c.Config.BearerToken}
	cfg.Contexts["allot"] = &clientcmdapi.Context{Cluster: "allot", AuthInfo: "allot-admin"}
	cfg.CurrentContext = "allot"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
