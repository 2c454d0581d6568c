package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Where the agent runs as a DaemonSet, an MPS daemon it started would be a process of the
// agent's container, killed with it when the container restarts (a crash, a failed
// liveness probe, an upgrade) while the pods sharing its GPU still use it. So the chart
// runs the daemons from a container of their own in the agent's pod (allot mps-host): the
// agent says which GPUs want a daemon (a file, wanted, in the GPU's directory under the
// sharing root) and talks to the daemons through their pipes as before; the host keeps a
// daemon answering for each GPU that wants one, and says once a probe daemon answered
// (ready, under the sharing root's mps directory) so that the node may declare mps.

// mpsWanted is the file that asks the MPS host for a GPU's daemon.
const mpsWanted = "wanted"

// mpsReady is the file the MPS host writes once a probe daemon answered.
const mpsReady = "ready"

// MPSHost keeps the MPS daemons the agent asks for.
type MPSHost struct {
	SharingRoot, Control string
	// Shm is the daemons' /dev/shm as this process sees it, which must be the sharing
	// root's shm/mps that sharing pods on the node mount as theirs; empty: not checked.
	Shm      string
	Interval time.Duration // between looks; a second when zero
	// NVML, when set, puts each GPU with a daemon in exclusive-process compute mode and
	// back to default when it has none. Setting a compute mode takes CAP_SYS_ADMIN, which
	// the chart gives this container and not the agent's.
	NVML nvml.Interface
}

// Run probes, then keeps the daemons until ctx ends. Daemons are left running when it
// ends: they serve pods until the agent quits them.
func (h MPSHost) Run(ctx context.Context) error {
	a := &Agent{opts: Options{SharingRoot: h.SharingRoot, MPSControl: h.Control, NVML: h.NVML}}
	if h.NVML != nil {
		if r := h.NVML.Init(); r != nvml.SUCCESS {
			return fmt.Errorf("nvml init: %s", nvml.ErrorString(r))
		}
		defer h.NVML.Shutdown()
	}
	if err := h.checkShm(); err != nil {
		return err
	}
	if err := a.probeMPS(); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(h.SharingRoot, "mps", mpsReady), []byte("ok\n")); err != nil {
		return err
	}
	every := h.Interval
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	applied, exclusive := map[string]string{}, map[string]bool{}
	for {
		wishes, _ := filepath.Glob(filepath.Join(h.SharingRoot, "mps", "GPU-*", mpsWanted))
		h.keep(ctx, a, wishes, applied)
		h.computeModes(a, wishes, exclusive)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkShm makes the daemons' shared-memory directory and checks that it is this
// process's /dev/shm: clients given that directory as theirs could not reach servers
// started with another (their shared memory would not meet).
func (h MPSHost) checkShm() error {
	if err := prepareShm(h.SharingRoot); err != nil {
		return fmt.Errorf("the MPS daemons' shared memory: %w", err)
	}
	if h.Shm == "" {
		return nil
	}
	want := filepath.Join(v1alpha1.ShmDir(h.SharingRoot), v1alpha1.ShmMPS)
	a, errA := os.Stat(h.Shm)
	b, errB := os.Stat(want)
	if err := errors.Join(errA, errB); err != nil {
		return fmt.Errorf("the MPS daemons' shared memory: %w", err)
	}
	if !os.SameFile(a, b) {
		return fmt.Errorf("--shm %s is not %s: mount the sharing root's shm/mps there (subPath), which sharing pods on this node have as their /dev/shm", h.Shm, want)
	}
	return nil
}

// keep starts a daemon for each GPU that wants one and has none answering, and holds
// each to the limits the agent wrote in its wish (again after a restart of the daemon).
func (h MPSHost) keep(ctx context.Context, a *Agent, wishes []string, applied map[string]string) {
	for _, f := range wishes {
		uuid := filepath.Base(filepath.Dir(f))
		if _, err := a.mpsCommand(ctx, uuid, "get_server_list\n"); err != nil {
			// The agent may have withdrawn the wish and quit the daemon since the list
			// was read: a daemon started now would belong to no one.
			if _, err := os.Stat(f); err != nil {
				continue
			}
			_ = os.RemoveAll(filepath.Join(filepath.Dir(f), "pipe")) // a dead daemon's
			if _, err := a.mpsCommand(ctx, uuid, "", "-d"); err != nil {
				if ctx.Err() == nil {
					slog.Warn("allot mps-host: starting an MPS control daemon", "gpu", uuid, "err", err)
				}
				continue
			}
			delete(applied, uuid) // a new daemon holds nothing yet
		}
		want, err := os.ReadFile(f)
		if err != nil || applied[uuid] == string(want) {
			continue
		}
		var l mpsLimits
		if _, err := fmt.Sscan(string(want), &l.threadPercent, &l.pinnedMiB); err != nil {
			continue // no limits written yet
		}
		if err := a.holdMPS(ctx, uuid, l); err != nil {
			slog.Warn("allot mps-host: MPS limits", "gpu", uuid, "err", err)
			continue
		}
		applied[uuid] = string(want)
	}
}

// computeModes keeps each wanted GPU exclusive-process and returns the others to default.
func (h MPSHost) computeModes(a *Agent, wishes []string, exclusive map[string]bool) {
	if h.NVML == nil {
		return
	}
	wanted := map[string]bool{}
	for _, f := range wishes {
		wanted[filepath.Base(filepath.Dir(f))] = true
	}
	for u := range wanted {
		if !exclusive[u] {
			a.setComputeMode(u, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
			exclusive[u] = true
		}
	}
	for u := range exclusive {
		if !wanted[u] {
			a.setComputeMode(u, nvml.COMPUTEMODE_DEFAULT)
			delete(exclusive, u)
		}
	}
}

// startMPS starts a GPU's daemon: itself, or through the MPS host, waiting for it to
// answer.
func (a *Agent) startMPS(ctx context.Context, uuid string) error {
	if !a.opts.MPSHost {
		_, err := a.mpsCommand(ctx, uuid, "", "-d")
		return err
	}
	if err := writeFile(filepath.Join(v1alpha1.MPSDir(a.opts.SharingRoot, uuid), mpsWanted), nil); err != nil {
		return err
	}
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if _, err = a.mpsCommand(ctx, uuid, "get_server_list\n"); err == nil {
			return nil
		}
	}
	return err
}

// wantMPSLimits writes the limits a GPU's daemon is to hold into the wish for it, for the
// MPS host to apply.
func (a *Agent) wantMPSLimits(_ context.Context, uuid string, l mpsLimits) error {
	return writeFile(filepath.Join(v1alpha1.MPSDir(a.opts.SharingRoot, uuid), mpsWanted), []byte(fmt.Sprintf("%d %d\n", l.threadPercent, l.pinnedMiB)))
}

// stopMPS quits a GPU's daemon, first withdrawing the wish for one.
func (a *Agent) stopMPS(ctx context.Context, uuid string) error {
	_ = os.Remove(filepath.Join(v1alpha1.MPSDir(a.opts.SharingRoot, uuid), mpsWanted))
	_, err := a.mpsCommand(ctx, uuid, "quit\n")
	return err
}

// mpsHostReady waits for the MPS host's probe.
func (a *Agent) mpsHostReady() error {
	f := filepath.Join(a.opts.SharingRoot, "mps", mpsReady)
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var b []byte
		if b, err = os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == "ok" {
			return nil
		}
	}
	return err
}
