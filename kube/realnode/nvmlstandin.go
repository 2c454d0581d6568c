package realnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The driver's NVML library has no place on a machine without the driver. The chart's agent
// container loads it (go-nvml's dlopen of libnvidia-ml.so.1) and fails at once without it,
// so the rig mounts a stand-in (nvmlstandin/nvml.c) into containers given the management
// CDI device, where nvidia-ctk's spec mounts the driver's: it reports the GPUs the rig made
// as healthy and idle. In-process agents of the tests keep go-nvml's own mock.

//go:embed nvmlstandin/nvml.c
var nvmlStandInSource []byte

// NVMLStandInPath is where a container given the management device finds the stand-in:
// the directory of Debian's and Ubuntu's driver packages, on the loader's default path.
const NVMLStandInPath = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"

// NVMLGPUsPath is where the stand-in reads the node's GPUs (nvml.c's GPUS_FILE): a file of
// the rig's, mounted beside the library; nvmlEnv, where set, is read instead.
const (
	NVMLGPUsPath = "/run/allot-rig/nvml-gpus"
	nvmlEnv      = "ALLOT_RIG_NVML"
)

// standInBuild says how the stand-in is built, for its cache key: the stubs' form and the
// compiler's flags. Change it with either.
const standInBuild = "stubs: int f(void) { return 3; }; gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1\n"

var (
	nvmlDeclared = regexp.MustCompile(`DECLDIR\s+(nvml\w+)\s*\(`)
	nvmlDefined  = regexp.MustCompile(`(?m)^(?:nvmlReturn_t |const char \*)(nvml\w+)\(`)
)

// buildNVMLStandIn compiles the stand-in into dir (once per source and header), with every
// function of go-nvml's nvml.h (the module of moduleDir's go.mod) that nvml.c does not
// define answering NVML_ERROR_NOT_SUPPORTED: a call the agent makes that the stand-in does
// not know then reads as a device without the feature, never as a missing symbol.
func buildNVMLStandIn(ctx context.Context, dir, moduleDir string) (string, error) {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml")
	list.Dir = moduleDir
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("finding go-nvml's nvml.h (go list -m github.com/NVIDIA/go-nvml): %w", err)
	}
	header, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml", "nvml.h"))
	if err != nil {
		return "", err
	}
	// The name changes with the source, the header, and how the two are built (standInBuild).
	sum := sha256.Sum256(append(append([]byte(standInBuild), nvmlStandInSource...), header...))
	lib := filepath.Join(dir, "nvml-stand-in-"+hex.EncodeToString(sum[:6]), "libnvidia-ml.so.1")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		return "", fmt.Errorf("the NVML stand-in is built with gcc (make test installs it: hack/cc.sh): %w", err)
	}
	defined := map[string]bool{}
	for _, m := range nvmlDefined.FindAllSubmatch(nvmlStandInSource, -1) {
		defined[string(m[1])] = true
	}
	var stubs bytes.Buffer
	stubs.WriteString("/* Generated from go-nvml's nvml.h: what nvml.c does not answer, a driver does not support. */\n")
	var names []string
	for _, m := range nvmlDeclared.FindAllSubmatch(header, -1) {
		if n := string(m[1]); !defined[n] && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		// Whatever its parameters, returning an int and reading none is the same call on
		// the System V ABI.
		fmt.Fprintf(&stubs, "int %s(void) { return 3; /* NVML_ERROR_NOT_SUPPORTED */ }\n", n)
	}
	build := filepath.Dir(lib) + ".build"
	if err := os.MkdirAll(build, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(build)
	src, stub := filepath.Join(build, "nvml.c"), filepath.Join(build, "stubs.c")
	if err := os.WriteFile(src, nvmlStandInSource, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(stub, stubs.Bytes(), 0o644); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		return "", err
	}
	tmp := lib + ".tmp"
	if out, err := exec.CommandContext(ctx, "gcc", "-shared", "-fPIC", "-O2", "-Wl,-soname,libnvidia-ml.so.1", "-o", tmp, src, stub).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the NVML stand-in: %w\n%s", err, out)
	}
	return lib, os.Rename(tmp, lib)
}

// nvmlGPUs is the stand-in's description of the node's GPUs (nvml.c's format).
func (n *Node) nvmlGPUs() string {
	var gpus []string
	for _, g := range n.GPUs {
		gpus = append(gpus, fmt.Sprintf("%s|%s|%d", g.UUID, n.opts.Model, n.opts.MemoryMiB))
	}
	return strings.Join(gpus, ";")
}

// nvmlGPUsFile is the node's file of nvmlGPUs, which containers see at NVMLGPUsPath.
func (n *Node) nvmlGPUsFile() string { return n.path("nvml-gpus") }

// writeNVMLGPUs writes nvmlGPUsFile where the node has the stand-in.
func (n *Node) writeNVMLGPUs() error {
	if n.tools.NVML == "" {
		return nil
	}
	return os.WriteFile(n.nvmlGPUsFile(), []byte(n.nvmlGPUs()+"\n"), 0o644)
}
