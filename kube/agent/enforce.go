package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/wholefile"
)

// DefaultMPSControl is NVIDIA's MPS control program, from the node's driver (the NVIDIA
// container runtime mounts it with the utility capability).
const DefaultMPSControl = "nvidia-cuda-mps-control"

// prepareSharing makes the enforcement the node declares real: for hami-core, HAMi-core's
// library is put where sharing pods preload it from; for mps, NVIDIA's MPS control program
// must be there. When it cannot be, the node declares "none" instead and says why on the
// Node: a node that claims limits it cannot hold would let a pod asking for a hard memory
// cap land there.
func (a *Agent) prepareSharing() (declared, problem string) {
	declared, problem = a.prepareMode()
	// Every sharing container's dynamic loader reads this list (the webhook mounts it
	// read-only as /etc/ld.so.preload): HAMi-core's library where it enforces, else
	// nothing. It is written on every node with a sharing root, since a mount of a file
	// that is missing would make the kubelet create a directory in its place.
	if a.opts.SharingRoot != "" {
		// Every sharing container mounts a directory under it as /dev/shm: with none,
		// the kubelet would make it root's own, 0755, and a container not root could not
		// write its shared memory.
		if err := prepareShm(a.opts.SharingRoot); err != nil {
			return v1alpha1.SharingNone, fmt.Sprintf("the shared-memory directory for sharing pods cannot be made under --sharing-root: %v", err)
		}
		list := ""
		if declared == v1alpha1.SharingHAMiCore {
			list = v1alpha1.HAMiCoreLibrary(a.opts.SharingRoot) + "\n"
		}
		if err := writeFile(filepath.Join(a.opts.SharingRoot, v1alpha1.PreloadListPath), []byte(list)); err != nil && declared == v1alpha1.SharingHAMiCore {
			return v1alpha1.SharingNone, fmt.Sprintf("the preload list for sharing pods cannot be written under --sharing-root: %v", err)
		}
	}
	return declared, problem
}

func (a *Agent) prepareMode() (declared, problem string) {
	mode := a.opts.Sharing
	switch mode {
	case v1alpha1.SharingHAMiCore:
		if a.opts.SharingRoot == "" {
			return v1alpha1.SharingNone, "--sharing hami-core needs --sharing-root, the directory shared with sharing pods"
		}
		if err := copyFile(a.opts.HAMiCoreLibrary, v1alpha1.HAMiCoreLibrary(a.opts.SharingRoot)); err != nil {
			return v1alpha1.SharingNone, fmt.Sprintf("HAMi-core's library is not there to preload (%v): install libvgpu.so on the node where the chart's agent.hamiCore.library says", err)
		}
	case v1alpha1.SharingMPS:
		if a.opts.SharingRoot == "" {
			return v1alpha1.SharingNone, "--sharing mps needs --sharing-root, the directory shared with sharing pods"
		}
		if _, err := exec.LookPath(a.mpsControl()); err != nil {
			return v1alpha1.SharingNone, fmt.Sprintf("NVIDIA's MPS control program is not there (%v): the agent needs the driver's utilities (runtimeClassName nvidia, NVIDIA_DRIVER_CAPABILITIES with utility)", err)
		}
		// Declared only once a daemon answered: the program being there is not enough.
		if a.opts.MPSHost {
			if err := a.mpsHostReady(); err != nil {
				return v1alpha1.SharingNone, fmt.Sprintf("the MPS host (the agent pod's mps container) did not report a daemon answering: %v", err)
			}
		} else if err := a.probeMPS(); err != nil {
			return v1alpha1.SharingNone, fmt.Sprintf("an MPS control daemon did not answer: %v", err)
		}
	}
	return mode, ""
}

func (a *Agent) mpsControl() string {
	if a.opts.MPSControl != "" {
		return a.opts.MPSControl
	}
	return DefaultMPSControl
}

func copyFile(src, dst string) error {
	if src == "" {
		return errors.New("no library path given (--hami-core-library)")
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeFrom(dst, in)
}

func writeFile(dst string, b []byte) error { return writeFrom(dst, bytes.NewReader(b)) }

// writeFrom writes a file whole (package wholefile), clearing first the directory the
// kubelet may have made in its place.
func writeFrom(dst string, in io.Reader) error {
	return wholefile.Write(dst, in, 0o644, func() error { return removeKubeletDir(dst) })
}

// removeKubeletDir removes an empty directory where a file of the sharing root belongs.
// The kubelet makes a missing subPath source a directory: a sharing pod restarted after a
// reboot emptied the sharing root (it is under /run), before the agent wrote the preload
// list, leaves one at hami-core/ld.so.preload, and the rename over it would fail for good.
// That pod keeps the directory it mounted (it runs without HAMi-core until it restarts);
// the pods after it get the file.
func removeKubeletDir(dst string) error {
	fi, err := os.Lstat(dst)
	if err != nil || !fi.IsDir() {
		return nil
	}
	if err := os.Remove(dst); err != nil {
		return fmt.Errorf("%s is a directory (the kubelet made it for a pod that started before the agent wrote the file) and cannot be removed: %w", dst, err)
	}
	slog.Warn("allot agent: removed the directory the kubelet made where a sharing file belongs (a pod started before the agent wrote it, and runs without it until it restarts)", "path", dst)
	return nil
}
