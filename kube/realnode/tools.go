package realnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/allot-dev/allot/internal/flock"
)

// The node's components, each pinned. The kubelet is built from the k8s.io/kubernetes
// module of Allot's own go.mod (the release the embedded control plane runs); the others
// from their own modules with `go install module@version`, outside Allot's module graph,
// so that their dependencies do not have to agree with Kubernetes'.
const (
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.3"
	CNIPluginsVersion = "v1.9.1"
)

// Toolkits are the NVIDIA container toolkit releases a node's NRI plugin may be built from:
// 1.19 is what GPU Operator 26.3 ships, 1.20 what 26.7 ships. They differ in which pods'
// devices they inject (docs/gpu-nodes.md).
var Toolkits = []string{"v1.19.1", "v1.20.2"}

// Tools are the paths of the built binaries.
type Tools struct {
	Dir        string // where they all are
	Kubelet    string
	Containerd string
	Shim       string // containerd-shim-runc-v2, found by containerd on its PATH
	Ctr        string
	Runc       string
	CNIDir     string // the CNI plugins (bridge, host-local, loopback)
	// NVML is the stand-in for the driver's libnvidia-ml.so.1 (nvmlstandin.go) the
	// management CDI device mounts; "" mounts none.
	NVML string
}

// Toolkit is the path of the NVIDIA container toolkit's installer binary (whose NRI plugin
// the node runs) of the release version, once built by BuildToolkit.
func (t Tools) Toolkit(version string) string {
	return filepath.Join(t.Dir, "toolkit-"+version, "nvidia-ctk-installer")
}

// DefaultToolsDir is where the binaries are kept between runs: under the user's cache, one
// directory per set of versions, so that a changed pin builds afresh.
func DefaultToolsDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "allot", "realnode", ContainerdVersion+"-"+RuncVersion+"-"+CNIPluginsVersion)
}

// BuildTools builds what is missing of the node's components into dir, with the go command
// on PATH, printing each step on progress (the first build takes minutes: the kubelet alone
// compiles most of Kubernetes). moduleDir is a directory inside Allot's module, where the
// kubelet is built. It holds a lock on dir, so that two test binaries building at once do
// not write one file twice.
func BuildTools(ctx context.Context, dir, moduleDir string, progress io.Writer) (Tools, error) {
	t := Tools{
		Dir:        dir,
		Kubelet:    filepath.Join(dir, "kubelet"),
		Containerd: filepath.Join(dir, "containerd"),
		Shim:       filepath.Join(dir, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(dir, "ctr"),
		Runc:       filepath.Join(dir, "runc"),
		CNIDir:     filepath.Join(dir, "cni"),
	}
	if err := os.MkdirAll(t.CNIDir, 0o755); err != nil {
		return t, err
	}
	lock, err := flock.Wait(ctx, filepath.Join(dir, ".build.lock"))
	if err != nil {
		return t, err
	}
	defer lock.Release()
	if _, err := exec.LookPath("go"); err != nil {
		return t, fmt.Errorf("building the real node's kubelet, containerd and runc needs the go command on PATH: %w", err)
	}
	steps := []struct {
		out  string
		what string
		args []string
		env  []string
	}{
		// Built inside Allot's module: the kubelet of the release the control plane runs.
		{t.Kubelet, "kubelet (k8s.io/kubernetes of go.mod)", []string{"build", "-o", t.Kubelet, "k8s.io/kubernetes/cmd/kubelet"}, nil},
		// runc with seccomp: the CRI asks for the runtime's default seccomp profile, which a
		// runc built without the tag refuses. Debian's runc (1.1) fails under containerd 2
		// ("can't get final child's PID"). cgo links libseccomp (libseccomp-dev).
		{t.Runc, "runc " + RuncVersion + " (seccomp)", []string{"install", "-tags", "seccomp", "github.com/opencontainers/runc@" + RuncVersion}, []string{"CGO_ENABLED=1"}},
		{t.Containerd, "containerd " + ContainerdVersion, []string{"install",
			"github.com/containerd/containerd/v2/cmd/containerd@" + ContainerdVersion,
			"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@" + ContainerdVersion,
			"github.com/containerd/containerd/v2/cmd/ctr@" + ContainerdVersion}, nil},
		{filepath.Join(t.CNIDir, "host-local"), "CNI plugins " + CNIPluginsVersion, []string{"install",
			"github.com/containernetworking/plugins/plugins/main/loopback@" + CNIPluginsVersion,
			"github.com/containernetworking/plugins/plugins/main/bridge@" + CNIPluginsVersion,
			"github.com/containernetworking/plugins/plugins/ipam/host-local@" + CNIPluginsVersion}, []string{"GOBIN=" + t.CNIDir}},
	}
	// The kubelet reports the release it was built from (the API server shows it as the
	// node's version), as the release's own build stamps it.
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	list.Dir = moduleDir
	if out, err := list.Output(); err == nil {
		v := strings.TrimSpace(string(out))
		steps[0].args = []string{"build", "-ldflags", "-X k8s.io/component-base/version.gitVersion=" + v + " -X k8s.io/component-base/version.gitMajor=1", "-o", t.Kubelet, "k8s.io/kubernetes/cmd/kubelet"}
	}
	for _, s := range steps {
		if _, err := os.Stat(s.out); err == nil {
			continue
		}
		if s.out == t.Runc {
			if err := needSeccompHeaders(); err != nil {
				return t, err
			}
		}
		fmt.Fprintf(progress, "realnode: building %s …\n", s.what)
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", s.args...)
		cmd.Dir = moduleDir
		if s.args[0] == "install" {
			// Outside Allot's module: go install of module@version resolves the module's
			// own requirements (a directory with no go.mod of its own).
			cmd.Dir = dir
		}
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
		cmd.Env = append(cmd.Env, s.env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return t, fmt.Errorf("building %s: go %s: %w\n%s", s.what, strings.Join(s.args, " "), err, tail(out.String(), 4000))
		}
		fmt.Fprintf(progress, "realnode: built %s in %s\n", s.what, time.Since(start).Round(time.Second))
	}
	nvml, err := buildNVMLStandIn(ctx, dir, moduleDir)
	if err != nil {
		return t, err
	}
	t.NVML = nvml
	return t, nil
}

// BuildToolkit builds NVIDIA's container toolkit installer of version (one of Toolkits)
// into the tools directory, if it is not there.
func BuildToolkit(ctx context.Context, t Tools, version string, progress io.Writer) error {
	return buildToolkitCommands(ctx, t, version, "installer (its NRI plugin)", progress, "nvidia-ctk-installer")
}

// buildToolkitCommands installs the commands of NVIDIA's container toolkit of version
// (under its cmd/) into the toolkit's directory of the tools, where any is missing,
// under the tools' build lock.
func buildToolkitCommands(ctx context.Context, t Tools, version, what string, progress io.Writer, commands ...string) error {
	dir := filepath.Dir(t.Toolkit(version))
	have := func() bool {
		for _, c := range commands {
			if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
				return false
			}
		}
		return true
	}
	if have() {
		return nil
	}
	lock, err := flock.Wait(ctx, filepath.Join(t.Dir, ".build.lock"))
	if err != nil {
		return err
	}
	defer lock.Release()
	if have() {
		return nil
	}
	fmt.Fprintf(progress, "realnode: building NVIDIA container toolkit %s's %s …\n", version, what)
	start := time.Now()
	args := []string{"install"}
	for _, c := range commands {
		args = append(args, "github.com/NVIDIA/nvidia-container-toolkit/cmd/"+c+"@"+version)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = t.Dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the toolkit %s's %s: %w\n%s", version, what, err, tail(b.String(), 4000))
	}
	fmt.Fprintf(progress, "realnode: built the toolkit %s's %s in %s\n", version, what, time.Since(start).Round(time.Second))
	return nil
}

// needSeccompHeaders says what to install when libseccomp's headers are missing, and
// installs them itself where it can (root with apt-get, as make test does for gcc).
func needSeccompHeaders() error {
	if _, err := os.Stat("/usr/include/seccomp.h"); err == nil {
		return nil
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("apt-get"); err == nil {
			if out, err := exec.Command("sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config").CombinedOutput(); err != nil {
				return fmt.Errorf("installing libseccomp-dev for runc's seccomp support: %w\n%s", err, tail(string(out), 2000))
			}
			return nil
		}
	}
	return fmt.Errorf("runc is built with seccomp (the CRI asks for its default profile) and needs libseccomp's headers: install libseccomp-dev (Debian) or libseccomp-devel")
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
