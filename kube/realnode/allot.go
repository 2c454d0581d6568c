package realnode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/nriplugin"
)

// PodResourcesSocket is where the node's kubelet serves its PodResources API.
var PodResourcesSocket = filepath.Join(KubeletRootDir, "pod-resources", "kubelet.sock")

// NRIReadyFile is the file Allot's NRI plugin on this node writes once registered.
func (n *Node) NRIReadyFile() string { return n.path("nri-ready") }

// RunAllot runs on this node what the chart's agent pod runs there, in this process: Allot's
// NRI plugin on the node's containerd (RunNRIPlugin, with the agent's sharing root) and the
// agent with opts (RunAgent), each until ctx ends. Allot's namespace is made first, as the
// chart's install does.
func (n *Node) RunAllot(ctx context.Context, client kubernetes.Interface, opts agent.Options) error {
	if err := n.RunNRIPlugin(ctx, opts.SharingRoot); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return n.RunAgent(ctx, client, opts)
}

// RunNRIPlugin runs Allot's NRI plugin on the node's containerd until ctx ends, and waits
// until it is registered. It registers again with a containerd started anew. sharingRoot
// is the agent's (the chart gives the plugin the same).
func (n *Node) RunNRIPlugin(ctx context.Context, sharingRoot string) error {
	go func() {
		if err := nriplugin.Run(ctx, nriplugin.Options{Socket: n.NRISocket(), Namespace: v1alpha1.SystemNamespace, ReadyFile: n.NRIReadyFile(), SharingRoot: sharingRoot}); err != nil {
			slog.Error("real node: Allot's NRI plugin stopped", "node", n.opts.Name, "err", err)
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(n.NRIReadyFile())
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("Allot's NRI plugin did not register with the node's containerd (%s): %w", n.logPath("containerd"), err)
	}
	return nil
}

// RunAgent runs the node's agent with opts (its node, NRI ready file and PodResources
// client are this node's) until ctx ends.
func (n *Node) RunAgent(ctx context.Context, client kubernetes.Interface, opts agent.Options) error {
	if opts.SharingRoot != "" {
		if err := os.MkdirAll(opts.SharingRoot, 0o755); err != nil {
			return err
		}
	}
	a, closeConn, err := n.NewAgent(client, opts)
	if err != nil {
		return err
	}
	go func() {
		defer closeConn()
		if err := a.Run(ctx); err != nil && ctx.Err() == nil {
			slog.Error("real node: agent stopped", "node", n.opts.Name, "err", err)
		}
	}()
	return nil
}

// NewAgent is an agent of this node with opts, reading the real kubelet's PodResources
// API; the returned func closes its connection.
func (n *Node) NewAgent(client kubernetes.Interface, opts agent.Options) (*agent.Agent, func(), error) {
	pr, closeConn, err := agent.DialPodResources(PodResourcesSocket)
	if err != nil {
		return nil, nil, err
	}
	opts.Node, opts.PodResources, opts.PodResourcesSocket, opts.NRIReadyFile = n.opts.Name, pr, PodResourcesSocket, n.NRIReadyFile()
	a, err := agent.New(client, opts)
	if err != nil {
		_ = closeConn()
		return nil, nil, err
	}
	return a, func() { _ = closeConn() }, nil
}
