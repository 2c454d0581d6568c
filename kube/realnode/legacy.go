package realnode

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HandlerLegacy is the runtime handler (and the GPU Operator's RuntimeClass) of NVIDIA's
// container runtime in legacy mode: the runtime adds its prestart hook, which reads the
// container's NVIDIA_VISIBLE_DEVICES and has nvidia-container-cli give it those devices.
const HandlerLegacy = "nvidia-legacy"

// LegacyRuntime is, on a node that runs it, NVIDIA's runtime in legacy mode as the GPU
// Operator's toolkit container installs it: nvidia-container-runtime.legacy and
// nvidia-container-runtime-hook of the toolkit release, each run through a wrapper that
// names the toolkit's config.toml (NVIDIA_CTK_CONFIG_FILE_PATH, as the installer's
// wrappers do), registered with containerd as the nvidia-legacy handler.
//
// What stands in, and why: nvidia-container-cli is libnvidia-container, a C program that
// asks the driver (NVML) which device nodes and libraries a GPU has; there is no driver
// here. The rig's script in its place does the device part of `configure` as it does:
// enters the container's mount namespace before pivot_root (the hook runs then), binds
// each named GPU's device node and the control devices into the rootfs, and allows them in
// the container's devices cgroup. Of the driver's libraries only NVML is given (the rig's
// stand-in, for the utility capability); no other library or utility. Which devices
// a container gets is decided by NVIDIA's own runtime and hook from the container's
// environment and the config: that is what the tests read.
type LegacyRuntime struct {
	Version string // the toolkit release (one of Toolkits)
	// Default makes it containerd's default runtime, as the GPU Operator does where CDI is
	// off: every pod's containers, GPU or not, run under it.
	Default bool
}

// legacyDir is the node's install of the toolkit's legacy runtime (wrappers, config, the
// stand-in cli).
func (n *Node) legacyDir() string { return n.path("nvidia-legacy") }

// LegacyRuntimeBinaries are the toolkit's legacy runtime and hook of version, once built
// by BuildLegacyRuntime.
func (t Tools) LegacyRuntimeBinaries(version string) (runtime, hook string) {
	dir := filepath.Dir(t.Toolkit(version))
	return filepath.Join(dir, "nvidia-container-runtime.legacy"), filepath.Join(dir, "nvidia-container-runtime-hook")
}

// BuildLegacyRuntime builds the toolkit's legacy-mode runtime and its hook of version into
// the tools directory, if they are not there (about a minute the first time).
func BuildLegacyRuntime(ctx context.Context, t Tools, version string, progress io.Writer) error {
	return buildToolkitCommands(ctx, t, version, "legacy runtime and hook", progress, "nvidia-container-runtime.legacy", "nvidia-container-runtime-hook")
}

// installLegacyRuntime writes the node's legacy runtime: the config, the wrappers and the
// stand-in cli. It returns the runtime wrapper's path, containerd's BinaryName for it.
func (n *Node) installLegacyRuntime() (string, error) {
	l := n.opts.Legacy
	rt, hook := n.tools.LegacyRuntimeBinaries(l.Version)
	for _, b := range []string{rt, hook} {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("NVIDIA's legacy runtime %s is not built (BuildLegacyRuntime): %w", l.Version, err)
		}
	}
	dir := n.legacyDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	config := filepath.Join(dir, "config.toml")
	files := map[string]string{
		config: legacyConfig(dir, n.tools.Runc, n.logPath("nvidia-container-runtime")),
		filepath.Join(dir, "nvidia-container-runtime.legacy"): wrapper(rt, config, dir),
		// The runtime adds the hook by this path; the hook finds the cli by the config's.
		filepath.Join(dir, "nvidia-container-runtime-hook"): wrapper(hook, config, dir),
		filepath.Join(dir, "nvidia-container-cli"):          n.cliStandIn(),
	}
	for path, body := range files {
		mode := os.FileMode(0o755)
		if path == config {
			mode = 0o644
		}
		if err := os.WriteFile(path, []byte(body), mode); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "nvidia-container-runtime.legacy"), nil
}

// wrapper is what the toolkit's installer puts in front of each of its binaries: the
// config file named, the install directory first on PATH.
func wrapper(real, config, dir string) string {
	return "#!/bin/sh\n" +
		"NVIDIA_CTK_CONFIG_FILE_PATH=" + strconv.Quote(config) + " \\\n" +
		"PATH=" + strconv.Quote(dir) + ":$PATH \\\n" +
		"exec " + strconv.Quote(real) + " \"$@\"\n"
}

// legacyConfig is the toolkit's config.toml as the GPU Operator's installer writes it for
// containerd with the driver on the host, for legacy mode: NVIDIA_VISIBLE_DEVICES read
// from unprivileged containers (the installer's default), the hook and cli at the
// install's paths, runc under it.
func legacyConfig(dir, runc, log string) string {
	q := strconv.Quote
	return "# Written by Allot's real-node rig as the GPU Operator's toolkit installer writes it.\n" +
		"accept-nvidia-visible-devices-envvar-when-unprivileged = true\n" +
		"accept-nvidia-visible-devices-as-volume-mounts = false\n" +
		"disable-require = false\n" +
		"supported-driver-capabilities = \"compat32,compute,display,graphics,ngx,utility,video\"\n\n" +
		"[nvidia-container-cli]\n" +
		"  path = " + q(filepath.Join(dir, "nvidia-container-cli")) + "\n" +
		"  environment = []\n" +
		"  ldconfig = \"@/sbin/ldconfig\"\n" +
		"  load-kmods = true\n\n" +
		"[nvidia-container-runtime]\n" +
		"  debug = " + q(log) + "\n" +
		"  log-level = \"info\"\n" +
		"  mode = \"legacy\"\n" +
		"  runtimes = [" + q(runc) + "]\n\n" +
		"[nvidia-container-runtime-hook]\n" +
		"  path = " + q(filepath.Join(dir, "nvidia-container-runtime-hook")) + "\n" +
		"  skip-mode-detection = true\n"
}

// cliStandIn is the script standing in for nvidia-container-cli (see LegacyRuntime): it
// reads the arguments the hook passes to `configure` (--device=<uuids, indices or all>,
// --pid=<the container's init>, the rootfs last), refuses a device the node does not have
// as the real one does, and gives the container those devices and the control devices.
func (n *Node) cliStandIn() string {
	var cases, all strings.Builder
	for _, g := range n.GPUs {
		fmt.Fprintf(&cases, "    %s|%d) idx=\"$idx %d\" ;;\n", g.UUID, g.Index, g.Index)
		fmt.Fprintf(&all, " %d", g.Index)
	}
	dev := n.path("dev")
	return `#!/bin/sh
# Allot's real-node rig: a stand-in for nvidia-container-cli (libnvidia-container needs
# the driver). It does the device part of "configure" as the real one does.
set -eu
echo "nvidia-container-cli $*" >> ` + strconv.Quote(n.logPath("nvidia-container-cli")) + `
devices= pid= rootfs= utility=
for a in "$@"; do
  case "$a" in
    --device=*) devices="${a#--device=}" ;;
    --utility) utility=1 ;;
    --pid=*) pid="${a#--pid=}" ;;
    -*|configure) ;;
    *) rootfs="$a" ;;
  esac
done
if [ -z "$pid" ] || [ -z "$rootfs" ]; then
  echo "nvidia-container-cli: configure needs --pid and the rootfs" >&2; exit 1
fi
idx=
for d in $(echo "$devices" | tr ',' ' '); do
  case "$d" in
    all) idx="$idx` + all.String() + `" ;;
` + cases.String() + `    *) echo "nvidia-container-cli: device error: $d: unknown device" >&2; exit 1 ;;
  esac
done
cg=$(awk -F: '$2 ~ /(^|,)devices(,|$)/ {print $3}' /proc/"$pid"/cgroup)
give() { # host node, path in the container, major:minor
  nsenter -t "$pid" -m sh -c 'touch "$2" && mount --bind "$1" "$2"' give "$1" "$rootfs$2"
  if [ -n "$cg" ]; then echo "c $3 rw" > /sys/fs/cgroup/devices"$cg"/devices.allow; fi
}
give ` + strconv.Quote(dev+"/nvidiactl") + ` /dev/nvidiactl ` + fmt.Sprintf("%d:%d", nvidiaMajor, ctlMinor) + `
give ` + strconv.Quote(dev+"/nvidia-uvm") + ` /dev/nvidia-uvm ` + fmt.Sprintf("%d:0", uvmMajor) + `
give ` + strconv.Quote(dev+"/nvidia-uvm-tools") + ` /dev/nvidia-uvm-tools ` + fmt.Sprintf("%d:1", uvmMajor) + `
for i in $idx; do
  give ` + strconv.Quote(dev) + `/nvidia"$i" /dev/nvidia"$i" ` + strconv.Itoa(nvidiaMajor) + `:"$i"
done
` + n.cliStandInLibraries()
}

// cliStandInLibraries is the library part of the stand-in's configure: for the utility
// capability (NVIDIA_DRIVER_CAPABILITIES), the driver's NVML, here the rig's stand-in
// (nvmlstandin.go) and its file of the node's GPUs, bound read-only.
func (n *Node) cliStandInLibraries() string {
	if n.tools.NVML == "" {
		return ""
	}
	// The path is resolved before anything is made: the hook runs before pivot_root, where
	// an absolute link in the image (its /usr/lib pointing at /etc) would lead out to the
	// host's files. One that leaves the root filesystem fails the container
	// (libnvidia-container would resolve it within the root instead).
	return `bindro() { # host file, path in the container
  nsenter -t "$pid" -m sh -c '
    r=$(realpath "$3") p=$(realpath -m "$3$2")
    case "$p" in "$r"/*) ;; *) echo "nvidia-container-cli: $2 leads out of the container'"'"'s root ($p)" >&2; exit 1 ;; esac
    mkdir -p "$(dirname "$p")" && touch "$p" && mount --bind "$1" "$p" && mount -o remount,bind,ro "$p"' bindro "$1" "$2" "$rootfs"
}
if [ -n "$utility" ]; then
  bindro ` + strconv.Quote(n.tools.NVML) + ` ` + strconv.Quote(NVMLStandInPath) + `
  bindro ` + strconv.Quote(n.nvmlGPUsFile()) + ` ` + strconv.Quote(NVMLGPUsPath) + `
fi
`
}
