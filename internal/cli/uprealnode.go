package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/realnode"
	"github.com/allot-dev/allot/kube/simgpu"
)

// realSharingRoot is the host directory a real node's agent shares with sharing pods under
// allot up (the chart's default is /run/allot/sharing, kept apart from it here).
const realSharingRoot = "/run/allot-up/sharing"

// startRealNode brings up allot up's real node, real-1 (kube/realnode): the kubelet,
// containerd and runc built from their modules (the first time, minutes), gpus devices made
// for it with NVIDIA-shaped CDI specs and a device plugin, Allot's NRI plugin on its
// containerd, and the agent (its GPUs on go-nvml's mock, reading the real kubelet's
// PodResources API) declaring sharing and cdi delivery. It returns the node's Stop.
func startRealNode(ctx context.Context, out io.Writer, rc *rest.Config, kubeconfig, dataDir string, gpus int, sharing string) (func(), error) {
	if err := realnode.CheckMachine(); err != nil {
		return nil, fmt.Errorf("--real-nodes: %w", err)
	}
	wd, _ := os.Getwd()
	fmt.Fprintf(out, "building the real node's kubelet, containerd and runc into %s (minutes the first time) …\n", realnode.DefaultToolsDir())
	tools, err := realnode.BuildTools(ctx, realnode.DefaultToolsDir(), wd, out)
	if err != nil {
		return nil, fmt.Errorf("--real-nodes: %w (the kubelet is built from Allot's module: run allot up from its checkout the first time)", err)
	}
	machine := simgpu.New(simgpu.Spec{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: gpus})
	uuids := make([]string, gpus)
	for i := range uuids {
		uuids[i] = machine.UUID(i)
	}
	node, err := realnode.Start(ctx, realnode.Options{Name: "real-1", Dir: filepath.Join(dataDir, "real-1"), Kubeconfig: kubeconfig,
		Config: rc, Tools: tools, UUIDs: uuids, Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}})
	if err != nil {
		return nil, fmt.Errorf("--real-nodes: %w", err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	if err := node.RunAllot(ctx, client, agent.Options{NVML: machine, Sharing: sharing, FractionsOnTrust: true, Delivery: v1alpha1.DeliveryCDI,
		Interval: 10 * time.Second, Version: Version, SharingRoot: realSharingRoot}); err != nil {
		node.Stop()
		return nil, fmt.Errorf("--real-nodes: %w", err)
	}
	fmt.Fprintf(out, "and a real node, real-1: the kubelet, containerd %s and runc %s on this machine with %d GPUs made for it (logs: %s); its containers run %s:\n  kubectl --kubeconfig %s run sh --image %s --image-pull-policy Never --restart Never --overrides '{\"spec\":{\"nodeName\":\"real-1\"}}' -- sh -c 'ls /dev; sleep 3600'\n",
		realnode.ContainerdVersion, realnode.RuncVersion, gpus, filepath.Dir(node.Log("kubelet")), realnode.BusyboxImage, kubeconfig, realnode.BusyboxImage)
	return node.Stop, nil
}
