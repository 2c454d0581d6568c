package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// MPS as NVIDIA runs it: one control daemon per shared GPU (CUDA_VISIBLE_DEVICES of that
// GPU, pipes and logs under the sharing root where the GPU's sharing pods are pointed),
// the GPU in exclusive-process compute mode while shared (only the MPS server then
// reaches it), and limits the daemon holds whatever a client sets: a client's own
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can only narrow
// the control daemon's (NVIDIA's MPS documentation), so the daemon is set to the largest
// share among the GPU's pods and each pod's own share comes from its environment.
//
// The daemons are separate processes (started with -d, they detach): a restarted agent
// asks each GPU's daemon whether it is there (get_server_list) instead of trusting a pipe
// left behind, adopts those that answer and starts anew where none does.

// mpsLimits is what a GPU's daemon holds its clients to.
type mpsLimits struct {
	threadPercent int
	pinnedMiB     int64
}

// syncMPS runs an MPS control daemon for each GPU of the node that is shared (its
// reservation pod has its device recorded), holds it to the largest share of its pods,
// and stops the daemons of GPUs no longer shared.
func (a *Agent) syncMPS(ctx context.Context, pods []any) {
	if a.declared != v1alpha1.SharingMPS {
		return
	}
	if !a.mpsAdopted {
		a.adoptMPS(ctx)
	}
	want := map[string]bool{}
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if !v1alpha1.IsReservation(p) || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
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
	a.mpsPending = false
	for _, u := range start {
		if !a.opts.MPSHost { // the host sets it, holding the capability it takes
			a.setComputeMode(u, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
		}
		if err := a.startMPS(ctx, u); err != nil {
			slog.Warn("allot agent: MPS control daemon", "node", a.opts.Node, "gpu", u, "err", err)
			a.mpsPending = true // tried again each second, not only at the next pod change
			continue
		}
		a.mps[u] = true
	}
	for _, u := range stop {
		if err := a.stopMPS(ctx, u); err != nil {
			slog.Warn("allot agent: stopping MPS control daemon", "node", a.opts.Node, "gpu", u, "err", err)
		}
		delete(a.mps, u)
		delete(a.mpsHeld, u)
		if !a.opts.MPSHost {
			a.setComputeMode(u, nvml.COMPUTEMODE_DEFAULT)
		}
	}
	limits := mpsLimitsOf(pods, a.inv)
	for u := range a.mps {
		l, ok := limits[u]
		if !ok || a.mpsHeld[u] == l {
			continue
		}
		hold := a.holdMPS
		if a.opts.MPSHost {
			hold = a.wantMPSLimits // the host applies them, again whenever it restarts the daemon
		}
		if err := hold(ctx, u, l); err != nil {
			slog.Warn("allot agent: MPS limits", "node", a.opts.Node, "gpu", u, "err", err)
			a.mpsPending = true
			continue
		}
		a.mpsHeld[u] = l
	}
}

// mpsLimitsOf is, per shared GPU, the largest compute and memory any pod sharing it was
// given (its environment as the scheduler wrote it).
func mpsLimitsOf(pods []any, inv []v1alpha1.GPUInfo) map[string]mpsLimits {
	out := map[string]mpsLimits{}
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || v1alpha1.IsReservation(p) {
			continue
		}
		uuid := sharedDevice(p)
		if i, err := strconv.Atoi(uuid); err == nil && i >= 0 && i < len(inv) {
			uuid = inv[i].UUID // a CDI name by index (the device plugin's index strategy)
		}
		if uuid == "" {
			continue
		}
		pct, _ := strconv.Atoi(p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
		mem := p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] // "0=40960M"
		mi, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(mem, "0="), "M"), 10, 64)
		l := out[uuid]
		l.threadPercent, l.pinnedMiB = max(l.threadPercent, pct), max(l.pinnedMiB, mi)
		out[uuid] = l
	}
	return out
}

// sharedDevice is the GPU a sharing pod was given: its device variable, or on a node whose
// delivery is CDI (where that is empty) the device its CDI annotations name.
func sharedDevice(p *corev1.Pod) string {
	if u := p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"]; u != "" {
		return u
	}
	for k, v := range p.Annotations {
		// Allot's NRI plugin's, or NVIDIA's where an earlier scheduler bound the pod.
		if strings.HasPrefix(k, v1alpha1.AnnotationCDIPrefix) || strings.HasPrefix(k, v1alpha1.AnnotationNRIContainerPrefix) || k == v1alpha1.AnnotationNRIPod {
			if _, dev, ok := strings.Cut(v, "="); ok {
				return dev
			}
		}
	}
	return ""
}

// holdMPS sets a GPU's daemon's limits: the defaults for servers it starts, and the
// running servers'. Device 0: the daemon sees only its GPU.
func (a *Agent) holdMPS(ctx context.Context, uuid string, l mpsLimits) error {
	var defaults, cmds []string
	if l.threadPercent > 0 {
		defaults = append(defaults, fmt.Sprintf("set_default_active_thread_percentage %d", l.threadPercent))
	}
	if l.pinnedMiB > 0 {
		defaults = append(defaults, fmt.Sprintf("set_default_device_pinned_mem_limit 0 %dM", l.pinnedMiB))
	}
	for _, c := range defaults {
		if _, err := a.mpsCommand(ctx, uuid, c+"\n"); err != nil {
			return err
		}
	}
	// The servers are listed after the defaults are set: a server a client started
	// between two of them (with some defaults and not others) is in the list and is set
	// whole below; one started later has them all.
	servers, err := a.mpsCommand(ctx, uuid, "get_server_list\n")
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(servers) {
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if l.threadPercent > 0 {
			cmds = append(cmds, fmt.Sprintf("set_active_thread_percentage %s %d", pid, l.threadPercent))
		}
		if l.pinnedMiB > 0 {
			cmds = append(cmds, fmt.Sprintf("set_device_pinned_mem_limit %s 0 %dM", pid, l.pinnedMiB))
		}
	}
	for _, c := range cmds {
		if _, err := a.mpsCommand(ctx, uuid, c+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// adoptMPS takes over the daemons an earlier run of the agent started, found by asking
// each GPU's daemon: one that answers is running (so it is not started twice, and is quit
// like any other once its GPU is no longer shared); a pipe directory whose daemon does not
// answer is left from one that died, and is cleared for a new one.
func (a *Agent) adoptMPS(ctx context.Context) {
	a.mpsAdopted = true
	for _, g := range a.inv {
		dir := v1alpha1.MPSDir(a.opts.SharingRoot, g.UUID)
		if _, err := os.Stat(dir + "/pipe"); err != nil {
			continue
		}
		if _, err := a.mpsCommand(ctx, g.UUID, "get_server_list\n"); err == nil {
			a.mps[g.UUID] = true
			continue
		}
		slog.Info("allot agent: clearing a dead MPS daemon's pipes", "node", a.opts.Node, "gpu", g.UUID)
		_ = os.RemoveAll(dir + "/pipe")
	}
}

// probeMPS starts a daemon on pipes of its own, asks it, and stops it: the node declares
// mps only when one answered.
func (a *Agent) probeMPS() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const probe = "probe"
	defer os.RemoveAll(v1alpha1.MPSDir(a.opts.SharingRoot, probe))
	if _, err := a.mpsCommand(ctx, probe, "", "-d"); err != nil {
		return err
	}
	_, err := a.mpsCommand(ctx, probe, "get_server_list\n")
	if _, qerr := a.mpsCommand(ctx, probe, "quit\n"); err == nil && qerr != nil {
		err = qerr
	}
	return err
}

// setComputeMode puts a shared GPU in exclusive-process mode (only the MPS server reaches
// it) and back to default when it is no longer shared. The driver allows it only to a
// process with CAP_SYS_ADMIN: the chart's MPS host container, not the agent's.
func (a *Agent) setComputeMode(uuid string, mode nvml.ComputeMode) {
	if a.opts.NVML == nil {
		return
	}
	dev, r := a.opts.NVML.DeviceGetHandleByUUID(uuid)
	if r == nvml.SUCCESS {
		r = dev.SetComputeMode(mode)
	}
	if r != nvml.SUCCESS {
		slog.Warn("allot agent: GPU compute mode", "node", a.opts.Node, "gpu", uuid, "mode", mode, "err", nvml.ErrorString(r))
	}
}

// mpsCommand runs the MPS control program for one GPU's daemon (input on stdin, or args
// such as -d) and returns what it printed.
func (a *Agent) mpsCommand(ctx context.Context, uuid, input string, args ...string) (string, error) {
	dir := v1alpha1.MPSDir(a.opts.SharingRoot, uuid)
	for _, d := range []string{dir + "/pipe", dir + "/log"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.mpsControl(), args...)
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+filepath.Join(dir, "pipe"), "CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, "log"))
	// A GPU's daemon sees only that GPU. The probe keeps the GPUs this process sees: an
	// empty CUDA_VISIBLE_DEVICES means none, and a daemon started so exits at once with
	// status 100 (seen on an H100: docs/gpu-nodes.md, "Seen on a real GPU").
	if strings.HasPrefix(uuid, "GPU-") {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+uuid)
	}
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", a.mpsControl(), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	if s := strings.TrimSpace(string(out)); strings.HasPrefix(strings.ToLower(s), "error") || strings.Contains(s, "Cannot find MPS control daemon") {
		return "", errors.New(s)
	}
	return string(out), nil
}
