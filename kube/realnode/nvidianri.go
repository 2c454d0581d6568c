package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// OperatorNamespace is the GPU Operator's namespace on the rig: NVIDIA's NRI plugin is told
// it as NRI_NAMESPACE, as the operator tells it its own (fieldRef metadata.namespace).
const OperatorNamespace = "gpu-operator"

// NVIDIANRI is NVIDIA's NRI plugin running on the node.
type NVIDIANRI struct {
	Version string
	cmd     *exec.Cmd
}

// StartNVIDIANRI runs NVIDIA's NRI plugin of toolkit version (one of Toolkits, built by
// BuildToolkit) as GPU Operator 26.3 (toolkit 1.19) and 26.7 (1.20) run it: the toolkit
// container's nvidia-ctk-installer, invoked as nvidia-toolkit, with the operator's
// environment for CDI and NRI (ENABLE_NRI_PLUGIN, RUNTIME=containerd, NRI_NAMESPACE the
// operator's own namespace, NRI_SOCKET). managementNamespaces is the
// NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES an admin may add on 1.20 (the operator sets none).
//
// What differs from the operator's container, and why: the installer first installs the
// toolkit's files from the image's /artifacts, which are not here (it is run with
// --ignore-errors, which logs each missing file and goes on); CDI_ENABLED is left unset,
// since generating the management spec needs the driver (the rig writes that spec); and
// it is run on the host rather than in a container (it only talks to the NRI socket).
func (n *Node) StartNVIDIANRI(ctx context.Context, version string, managementNamespaces []string) (*NVIDIANRI, error) {
	bin := n.tools.Toolkit(version)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("NVIDIA container toolkit %s is not built (BuildToolkit): %w", version, err)
	}
	dir := n.path("nvidia-toolkit-" + version)
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		return nil, err
	}
	// The operator's image runs it through the symlink nvidia-toolkit, which is the name
	// it registers with containerd under (10-nvidia-toolkit).
	link := filepath.Join(dir, "nvidia-toolkit")
	_ = os.Remove(link)
	if err := os.Symlink(bin, link); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, link, "--ignore-errors")
	cmd.Env = append(os.Environ(),
		"ENABLE_NRI_PLUGIN=true",
		"RUNTIME=containerd",
		"NRI_NAMESPACE="+OperatorNamespace,
		"NRI_SOCKET="+n.NRISocket(),
		"TOOLKIT_PID_FILE="+filepath.Join(dir, "run", "toolkit.pid"),
		"ROOT="+filepath.Join(dir, "install"),
		"NVIDIA_VISIBLE_DEVICES=void",
	)
	if len(managementNamespaces) > 0 {
		cmd.Env = append(cmd.Env, "NRI_MANAGEMENT_CDI_DEVICE_NAMESPACES="+strings.Join(managementNamespaces, ","))
	}
	name := "nvidia-nri-" + version
	from := len(readFile(n.logPath("containerd")))
	if err := n.startProcess(name, cmd); err != nil {
		return nil, err
	}
	p := &NVIDIANRI{Version: version, cmd: cmd}
	// Registered once containerd says the plugin connected and synchronised.
	deadline := time.Now().Add(time.Minute)
	for !pluginSynchronized(readFile(n.logPath("containerd"))[from:], "10-nvidia-toolkit") {
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("NVIDIA's NRI plugin %s did not register with containerd in a minute (log %s)\n%s", version, n.logPath(name), logTail(n.logPath(name)))
		}
		if cmd.ProcessState != nil {
			return nil, fmt.Errorf("NVIDIA's NRI plugin %s stopped: %s\n%s", version, cmd.ProcessState, logTail(n.logPath(name)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p, nil
}

// Stop ends the plugin (containerd forgets it as its connection closes).
func (p *NVIDIANRI) Stop() { stopProcess(p.cmd) }

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// pluginSynchronized tells whether containerd's log says the NRI plugin of that name
// connected and was given the runtime's state.
func pluginSynchronized(log, name string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, name) && strings.Contains(line, "connected and synchronized") {
			return true
		}
	}
	return false
}
