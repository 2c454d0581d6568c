package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// KubeletRootDir is the kubelet's root directory. The device manager serves its
// registration socket only at /var/lib/kubelet/device-plugins (the kubelet takes no other
// path for it), and the chart's agent mounts /var/lib/kubelet/pod-resources: one real node
// per machine, at the path every node has.
const KubeletRootDir = "/var/lib/kubelet"

// kubeletConfig is the node's KubeletConfiguration: the defaults of a kubeadm node where
// this kind of machine allows, and where not, the choice and why.
func kubeletConfig(n *Node) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("apiVersion: kubelet.config.k8s.io/v1beta1")
	w("kind: KubeletConfiguration")
	// No API of the kubelet's: the API server could not reach it anyway (the kubelet takes
	// no loopback node address), and on loopback any local user could exec into the node's
	// containers. Tests read containers' output from the kubelet's log files.
	w("enableServer: false")
	w("address: 127.0.0.1")
	w("readOnlyPort: 0")
	w("healthzBindAddress: 127.0.0.1")
	w("healthzPort: 0")
	w("containerRuntimeEndpoint: unix://%s", n.ContainerdSocket())
	// These machines run cgroup v1, which the kubelet refuses by default since 1.35; and no
	// systemd manages them.
	w("failCgroupV1: false")
	w("cgroupDriver: cgroupfs")
	w("failSwapOn: false")
	w("authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: false")
	w("authorization:\n  mode: AlwaysAllow") // no server: nothing to authorize
	// The disk of a shared machine is not the node's: no eviction for its use, and no image
	// garbage collection, which would remove the imported images no registry can give back.
	w("evictionHard: {}")
	w("imageGCHighThresholdPercent: 100")
	w("imageGCLowThresholdPercent: 99")
	w("serializeImagePulls: false")
	w("resolvConf: \"\"")
	w("nodeStatusUpdateFrequency: 2s")
	w("syncFrequency: 5s")
	return b.String()
}

func (n *Node) startKubelet(ctx context.Context) error {
	if err := os.MkdirAll(KubeletRootDir, 0o755); err != nil {
		return err
	}
	cfg := n.path("kubelet", "config.yaml")
	if err := os.MkdirAll(n.path("kubelet"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, []byte(kubeletConfig(n)), 0o644); err != nil {
		return err
	}
	labels := []string{}
	for k, v := range n.opts.Labels {
		labels = append(labels, k+"="+v)
	}
	args := []string{
		"--config", cfg,
		"--kubeconfig", n.opts.Kubeconfig,
		"--hostname-override", n.opts.Name,
		"--root-dir", KubeletRootDir,
		// This machine refuses negative OOM scores (no CAP_SYS_RESOURCE): the kubelet's
		// default of -999 for itself would stop it at start.
		"--oom-score-adj", strconv.Itoa(n.oomScoreAdj),
		"--v", "2",
	}
	if len(labels) > 0 {
		args = append(args, "--node-labels", strings.Join(labels, ","))
	}
	cmd := exec.CommandContext(ctx, n.tools.Kubelet, args...)
	return n.startProcess("kubelet", cmd)
}
