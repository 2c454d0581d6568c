package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// podSubnet is the pods' addresses: a range of the benchmarking block (RFC 2544), which no
// network routes.
const podSubnet = "198.18.0.0/24"

// podGateway is the node's address on the pods' bridge, and bridgeMAC the bridge's own
// (locally administered; c6:12 for 198.18).
const (
	podGateway = "198.18.0.1"
	bridgeMAC  = "02:00:c6:12:00:01"
)

// NodeAddress is the node's address on the pods' bridge: what a service the test runs on
// the machine (outside any pod) listens on for the node's pods to reach it.
const NodeAddress = podGateway

// ReservationImage is the image of Allot's reservation pods, made as the pause image is.
const ReservationImage = "registry.k8s.io/pause:3.10"

// snapshotter is the CRI's and the image import's: overlayfs, as on a real node.
const snapshotter = "overlayfs"

// HandlerRunc is the runtime handler every node's containerd knows; a node that runs
// NVIDIA's runtime in legacy mode knows HandlerLegacy too.
const HandlerRunc = "runc"

// containerdConfig is the node's containerd configuration (version 3, containerd 2.x):
// the CRI with CDI on (the default since 2.0) reading the node's CDI directories, NRI on
// at the rig's socket, the sandbox image pinned to the locally made one, and the choices
// this kind of machine needs, each said where it is made.
func containerdConfig(n *Node) string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "version = 3\nroot = %s\nstate = %s\n", q(n.path("containerd", "root")), q(n.path("containerd", "state")))
	fmt.Fprintf(&b, "[grpc]\n  address = %s\n", q(n.ContainerdSocket()))
	fmt.Fprintf(&b, "[ttrpc]\n  address = %s\n", q(n.ContainerdSocket()+".ttrpc"))
	// No metrics or debug listener: nothing of the node listens beyond its sockets.
	fmt.Fprintf(&b, "[plugins.'io.containerd.cri.v1.images']\n  snapshotter = %s\n", q(snapshotter))
	// The CRI would pull registry.k8s.io/pause, which cannot be reached.
	fmt.Fprintf(&b, "  [plugins.'io.containerd.cri.v1.images'.pinned_images]\n    sandbox = %s\n", q(PauseImage))
	fmt.Fprintf(&b, "[plugins.'io.containerd.cri.v1.runtime']\n")
	// Where NVIDIA's device plugin and nvidia-ctk write their specs.
	fmt.Fprintf(&b, "  cdi_spec_dirs = [%s, %s]\n", q(CDIStaticDir), q(CDIDynamicDir))
	// This machine refuses negative OOM scores (no CAP_SYS_RESOURCE); the CRI would set
	// the sandbox's to -998. restrict_oom_score_adj keeps each at no less than containerd's own.
	fmt.Fprintf(&b, "  restrict_oom_score_adj = %t\n", n.restrictOOM)
	def := HandlerRunc
	if n.opts.Legacy != nil && n.opts.Legacy.Default {
		def = HandlerLegacy
	}
	fmt.Fprintf(&b, "  [plugins.'io.containerd.cri.v1.runtime'.containerd]\n    default_runtime_name = %s\n", q(def))
	runtime := func(name, binary string) {
		fmt.Fprintf(&b, "    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s]\n      runtime_type = %s\n", name, q("io.containerd.runc.v2"))
		fmt.Fprintf(&b, "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s.options]\n        BinaryName = %s\n        SystemdCgroup = false\n", name, q(binary))
	}
	runtime(HandlerRunc, n.tools.Runc)
	if n.legacyRuntime != "" {
		runtime(HandlerLegacy, n.legacyRuntime)
	}
	fmt.Fprintf(&b, "  [plugins.'io.containerd.cri.v1.runtime'.cni]\n    bin_dirs = [%s]\n    conf_dir = %s\n", q(n.tools.CNIDir), q(n.path("cni", "net.d")))
	fmt.Fprintf(&b, "[plugins.'io.containerd.nri.v1.nri']\n  disable = false\n  socket_path = %s\n  plugin_path = %s\n  plugin_config_path = %s\n  plugin_registration_timeout = '5s'\n  plugin_request_timeout = '5s'\n",
		q(n.NRISocket()), q(n.path("nri", "plugins")), q(n.path("nri", "conf.d")))
	return b.String()
}

// cniConfig gives each pod a network namespace of its own on the node's bridge, whose one
// address of the host's (podGateway, put there by the rig: makeBridge) is the pods' gateway
// for one route, to the API server's Service address (apiServiceIP, held by the rig:
// apiservice.go): no default route, no masquerade. The bridge plugin is not told it is the
// gateway (isGateway), which would have it turn on the machine's IP forwarding and leave it
// on. Pods reach one another, the node reaches them (the kubelet's probes, the API server
// calling a webhook at its endpoint) and they reach the node's own addresses, as on a
// cluster; the machine forwards nothing of theirs beyond it.
func cniConfig(bridge, subnet, apiServiceIP string) string {
	return `{"cniVersion": "1.0.0", "name": "allot-rig", "plugins": [
  {"type": "bridge", "bridge": "` + bridge + `", "isGateway": false, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + subnet + `", "gateway": "` + podGateway + `"}]],
     "routes": [{"dst": "` + apiServiceIP + `/32", "gw": "` + podGateway + `"}], "dataDir": "` + "DATADIR" + `"}},
  {"type": "loopback"}]}`
}

// makeBridge makes the pods' bridge with the node's address on it (podGateway), before the
// bridge plugin finds and uses it. Its MAC is set, as the plugin sets it where it adds the
// gateway itself: a bridge otherwise takes the lowest of its ports' and changes as pods
// come and go, and the pods' ARP entries for the gateway go stale (seen: a webhook call
// from the API server timed out).
func (n *Node) makeBridge() error {
	return makeHostBridge(n.bridge, bridgeMAC, podGateway+"/24")
}

// makeHostBridge makes a bridge of the rig's on this machine, up, with addr (and mac where
// set), replacing one an earlier rig that was killed left.
func makeHostBridge(name, mac, addr string) error {
	_ = exec.Command("ip", "link", "delete", name).Run()
	add := []string{"link", "add", name}
	if mac != "" {
		add = append(add, "address", mac)
	}
	for _, args := range [][]string{
		append(add, "type", "bridge"),
		{"addr", "add", addr, "dev", name},
		{"link", "set", name, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	for _, d := range []string{n.path("containerd", "root"), n.path("containerd", "state"), n.path("cni", "net.d"), n.path("nri", "plugins"), n.path("nri", "conf.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := n.makeBridge(); err != nil {
		return err
	}
	conf := strings.Replace(cniConfig(n.bridge, podSubnet, n.apiService.ip), "DATADIR", n.path("cni", "ipam"), 1)
	if err := os.WriteFile(n.path("cni", "net.d", "10-allot-rig.conflist"), []byte(conf), 0o644); err != nil {
		return err
	}
	cfg := n.path("containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n)), 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, n.tools.Containerd, "--config", cfg, "--log-level", "info")
	// The shim (containerd-shim-runc-v2) is found on containerd's PATH.
	cmd.Env = append(os.Environ(), "PATH="+n.tools.Dir+":"+os.Getenv("PATH"))
	if err := n.startProcess("containerd", cmd); err != nil {
		return err
	}
	return waitSocket(ctx, n.ContainerdSocket(), 60*time.Second, n.logPath("containerd"))
}

// waitSocket waits for a unix socket to accept a connection.
func waitSocket(ctx context.Context, socket string, limit time.Duration, log string) error {
	deadline := time.Now().Add(limit)
	for {
		if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up in %s (log: %s)\n%s", socket, limit, log, logTail(log))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), 3000)
}

// ctr runs the containerd client on the node's containerd, in the CRI's namespace.
func (n *Node) ctr(args ...string) (string, error) {
	full := append([]string{"--address", n.ContainerdSocket(), "--namespace", "k8s.io"}, args...)
	out, err := exec.Command(n.tools.Ctr, full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// importImages makes and imports the node's images.
func (n *Node) importImages() error {
	bb, err := BusyboxFiles()
	if err != nil {
		return err
	}
	dir := n.path("images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	images := []Image{
		{Name: BusyboxImage, Files: bb, Cmd: []string{"sh"}},
		{Name: PauseImage, Files: []File{{Path: "/bin", Dir: true, Mode: 0o755}, {Path: "/bin/busybox", From: bbPath(bb), Mode: 0o755}},
			Entrypoint: []string{"/bin/busybox", "sleep", "2147483647"}},
	}
	// The image Allot's reservation pods name (they hold a GPU and run nothing).
	images = append(images, Image{Name: ReservationImage, Files: images[1].Files, Entrypoint: images[1].Entrypoint})
	images = append(images, n.opts.Images...)
	for _, img := range images {
		if err := importImage(n.tools.Ctr, n.ContainerdSocket(), dir, img, hostArch()); err != nil {
			return err
		}
	}
	return nil
}

func bbPath(files []File) string {
	for _, f := range files {
		if f.Path == "/bin/busybox" {
			return f.From
		}
	}
	return ""
}

func hostArch() string { return runtime.GOARCH }
