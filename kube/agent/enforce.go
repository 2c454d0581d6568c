package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
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

// writeFrom writes a file whole: pods starting meanwhile never see half of it.
func writeFrom(dst string, in io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// syncMPS runs an MPS control daemon for each GPU of the node that is shared (its
// reservation pod has its device recorded) and stops the daemons of GPUs no longer
// shared. Each daemon sees only its GPU and keeps its pipes where the scheduler points the
// GPU's sharing pods (v1alpha1.MPSDir).
func (a *Agent) syncMPS(ctx context.Context, pods []any) {
	if a.declared != v1alpha1.SharingMPS {
		return
	}
	if !a.mpsAdopted {
		a.adoptMPS()
	}
	want := map[string]bool{}
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if p.Labels[v1alpha1.LabelReservation] != "true" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if uuid := strings.TrimSpace(p.Annotations[v1alpha1.AnnotationGPUDevices]); uuid != "" && a.indexOf(uuid) >= 0 {
			want[uuid] = true
		}
	}
	var start, stop []string
	for u := range want {
		if !a.mps[u] {
			start = append(start, u)
		}
	}
	for u := range a.mps {
		if !want[u] {
			stop = append(stop, u)
		}
	}
	sort.Strings(start)
	sort.Strings(stop)
	for _, u := range start {
		if err := a.mpsCommand(ctx, u, "", "-d"); err != nil {
			slog.Warn("allot agent: MPS control daemon", "node", a.opts.Node, "gpu", u, "err", err)
			continue
		}
		a.mps[u] = true
	}
	for _, u := range stop {
		if err := a.mpsCommand(ctx, u, "quit\n"); err != nil {
			slog.Warn("allot agent: stopping MPS control daemon", "node", a.opts.Node, "gpu", u, "err", err)
		}
		delete(a.mps, u)
	}
}

// adoptMPS takes over the daemons an earlier run of the agent started (it restarted; the
// daemons outlive it, serving pods that still run): a GPU whose daemon left its control
// pipe is counted as running, so it is not started twice, and is quit like any other once
// its GPU is no longer shared.
func (a *Agent) adoptMPS() {
	a.mpsAdopted = true
	for _, g := range a.inv {
		if fi, err := os.Stat(v1alpha1.MPSDir(a.opts.SharingRoot, g.UUID) + "/pipe/control"); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
			a.mps[g.UUID] = true
		}
	}
}

// mpsCommand runs the MPS control program for one GPU's daemon, with input on stdin.
func (a *Agent) mpsCommand(ctx context.Context, uuid, input string, args ...string) error {
	dir := v1alpha1.MPSDir(a.opts.SharingRoot, uuid)
	for _, d := range []string{dir + "/pipe", dir + "/log"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, a.mpsControl(), args...)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+uuid, "CUDA_MPS_PIPE_DIRECTORY="+dir+"/pipe", "CUDA_MPS_LOG_DIRECTORY="+dir+"/log")
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", a.mpsControl(), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
