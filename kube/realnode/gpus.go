package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The node's GPUs are character devices the rig makes (major 195, as NVIDIA's driver
// registers), described by CDI specs shaped as NVIDIA's device plugin and `nvidia-ctk cdi
// generate` write them. No driver answers behind them: a container sees the device nodes
// a real one would, at the same paths, and opening one fails (ENXIO). What that cannot
// show (a CUDA client held to its limit, NVML inside a container) waits for a real GPU.
const (
	CDIStaticDir  = "/etc/cdi"     // nvidia-ctk cdi generate's
	CDIDynamicDir = "/var/run/cdi" // the device plugin's and the toolkit's management spec

	// PluginKind is the CDI kind NVIDIA's device plugin names each GPU under (its cdi-cri
	// and cdi-annotations strategies); ManagementKind the toolkit's spec of every device
	// node and the driver's control files, for management containers (device "all").
	PluginKind     = "k8s.device-plugin.nvidia.com/gpu"
	ManagementKind = "management.nvidia.com/gpu"

	nvidiaMajor  = 195
	ctlMinor     = 255
	uvmMajor     = 508 // dynamic on a real node; any free major stands for it
	capsMajor    = 509
	pluginSpec   = "k8s.device-plugin.nvidia.com-gpu.json"
	mgmtSpec     = "management.nvidia.com-gpu.yaml"
	IndexPrefix  = ""
	StrategyUUID = "uuid"
	// StrategyIndex is the device plugin's DEVICE_ID_STRATEGY=index: devices are offered to
	// the kubelet, and named in its CDI spec, by index.
	StrategyIndex = "index"
)

// GPU is one of the node's made devices.
type GPU struct {
	Index int
	UUID  string
}

// devicePath is where a GPU's device node is in a container (NVIDIA's spec's path).
func (g GPU) devicePath() string { return "/dev/nvidia" + strconv.Itoa(g.Index) }

// ID is the name the device plugin offers the GPU under, and names it by in its CDI spec,
// under strategy.
func (g GPU) ID(strategy string) string {
	if strategy == StrategyIndex {
		return strconv.Itoa(g.Index)
	}
	return g.UUID
}

// makeDevices makes the device nodes under dir/dev, each at the path of its host node on a
// real machine: the CDI specs name them as hostPath, the container sees them at
// /dev/nvidia… The host's own /dev is left as it is.
func (n *Node) makeDevices() error {
	dev := n.path("dev")
	if err := os.MkdirAll(filepath.Join(dev, "nvidia-caps"), 0o755); err != nil {
		return err
	}
	nodes := map[string]uint64{
		"nvidiactl":               unix.Mkdev(nvidiaMajor, ctlMinor),
		"nvidia-uvm":              unix.Mkdev(uvmMajor, 0),
		"nvidia-uvm-tools":        unix.Mkdev(uvmMajor, 1),
		"nvidia-caps/nvidia-cap1": unix.Mkdev(capsMajor, 1),
		"nvidia-caps/nvidia-cap2": unix.Mkdev(capsMajor, 2),
	}
	for _, g := range n.GPUs {
		nodes[filepath.Base(g.devicePath())] = unix.Mkdev(nvidiaMajor, uint32(g.Index))
	}
	for name, d := range nodes {
		p := filepath.Join(dev, name)
		_ = os.Remove(p)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(d)); err != nil {
			return fmt.Errorf("making the GPU device node %s (the rig needs root with CAP_MKNOD): %w", p, err)
		}
	}
	return nil
}

type cdiSpec struct {
	CDIVersion     string      `json:"cdiVersion"`
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits cdiEdits    `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
	Mounts      []cdiMount      `json:"mounts,omitempty"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
}

type cdiDeviceNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath,omitempty"`
}

// writeCDISpecs writes the device plugin's spec (each GPU by its ID under the node's
// strategy, and the control devices every GPU container gets) and the toolkit's
// management spec (management.nvidia.com/gpu=all: every device node, and the NVML
// stand-in where the tools have one). No other driver library, and none of the toolkit's
// hooks: there is no driver here.
func (n *Node) writeCDISpecs() error {
	hostNode := func(p string) cdiDeviceNode {
		return cdiDeviceNode{Path: p, HostPath: filepath.Join(n.path("dev"), p[len("/dev/"):])}
	}
	common := cdiEdits{
		// The plugin's spec sets this so that the legacy runtime, reading the image's
		// NVIDIA_VISIBLE_DEVICES=all, adds nothing beyond the CDI devices.
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		DeviceNodes: []cdiDeviceNode{hostNode("/dev/nvidiactl"), hostNode("/dev/nvidia-uvm"), hostNode("/dev/nvidia-uvm-tools")},
	}
	plugin := cdiSpec{CDIVersion: "0.5.0", Kind: PluginKind, ContainerEdits: common}
	mgmt := cdiSpec{CDIVersion: "0.5.0", Kind: ManagementKind, ContainerEdits: common}
	all := cdiDevice{Name: "all"}
	for _, g := range n.GPUs {
		plugin.Devices = append(plugin.Devices, cdiDevice{Name: g.ID(n.opts.IDStrategy),
			ContainerEdits: cdiEdits{DeviceNodes: []cdiDeviceNode{hostNode(g.devicePath())}}})
		all.ContainerEdits.DeviceNodes = append(all.ContainerEdits.DeviceNodes, hostNode(g.devicePath()))
	}
	all.ContainerEdits.DeviceNodes = append(all.ContainerEdits.DeviceNodes,
		hostNode("/dev/nvidia-caps/nvidia-cap1"), hostNode("/dev/nvidia-caps/nvidia-cap2"))
	if n.tools.NVML != "" {
		// The driver's NVML, as nvidia-ctk's spec mounts it for management containers (the
		// chart's agent): here the rig's stand-in, told the node's GPUs.
		ro := []string{"ro", "nosuid", "nodev", "bind"}
		all.ContainerEdits.Mounts = []cdiMount{{HostPath: n.tools.NVML, ContainerPath: NVMLStandInPath, Options: ro},
			{HostPath: n.nvmlGPUsFile(), ContainerPath: NVMLGPUsPath, Options: ro}}
	}
	mgmt.Devices = []cdiDevice{all}
	if err := n.writeNVMLGPUs(); err != nil {
		return err
	}
	if err := os.MkdirAll(CDIDynamicDir, 0o755); err != nil {
		return err
	}
	for name, spec := range map[string]cdiSpec{pluginSpec: plugin, mgmtSpec: mgmt} {
		b, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return err
		}
		// JSON is YAML: the management spec keeps nvidia-ctk's file name.
		if err := os.WriteFile(filepath.Join(CDIDynamicDir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func removeCDISpecs() {
	_ = os.Remove(filepath.Join(CDIDynamicDir, pluginSpec))
	_ = os.Remove(filepath.Join(CDIDynamicDir, mgmtSpec))
}
