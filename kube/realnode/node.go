// Package realnode runs a Kubernetes node made of the real components on this machine, as
// root: the kubelet of the pinned Kubernetes release, containerd v2 with the CRI, CDI and
// NRI on, and runc, each built from its Go module; GPUs made as device nodes and described
// by CDI specs shaped as NVIDIA's; a device plugin answering the kubelet as NVIDIA's does;
// and, where asked, NVIDIA's own NRI plugin built from its toolkit. Tests and `allot up
// --real-nodes` start it beside the embedded control plane, so that what a container
// really gets (its /dev, its environment, its mounts, whether it starts) can be read.
package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/internal/kubeletlock"
)

// ErrUnsupported is wrapped by Start's error when this machine cannot run a real node
// (not root, no cgroups, no busybox-static): tests say so loudly instead of passing.
var ErrUnsupported = errors.New("this machine cannot run a real node")

// Options are one node's.
type Options struct {
	Name       string
	Dir        string // the node's state: containerd's, the CNI's, the made devices, logs
	Kubeconfig string // the kubelet's, for the API server it registers with
	Config     *rest.Config
	Tools      Tools
	UUIDs      []string          // the node's GPUs, by UUID, in index order (none: no GPU)
	Labels     map[string]string // the node's, registered by the kubelet
	// IDStrategy is the device plugin's DEVICE_ID_STRATEGY: StrategyUUID (default) or
	// StrategyIndex; ListStrategy its DEVICE_LIST_STRATEGY: ListCDICRI (default) or
	// ListEnvvar.
	IDStrategy   string
	ListStrategy string
	// Legacy, when set, runs NVIDIA's runtime in legacy mode on the node (the GPU
	// Operator's setup for environment-variable delivery), as HandlerLegacy.
	Legacy *LegacyRuntime
	// Images are imported beside the busybox and pause images.
	Images []Image
	// Model and MemoryMiB are what the NVML stand-in (Tools.NVML) reports of each GPU: by
	// default an A100's name and 80 GiB.
	Model     string
	MemoryMiB int64
}

// Node is a running real node.
type Node struct {
	opts   Options
	tools  Tools
	GPUs   []GPU
	bridge string // the pods' bridge (cniConfig)
	// apiService is the `kubernetes` Service, whose address the rig holds (apiservice.go).
	apiService apiService
	// legacyRuntime is the wrapper of NVIDIA's legacy runtime, where Options.Legacy is set.
	legacyRuntime string
	release       func() // the machine's kubelet paths (kubeletlock)
	oomScoreAdj   int
	restrictOOM   bool

	mu    sync.Mutex
	procs []*exec.Cmd
	stops []func()
}

func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.opts.Dir}, elem...)...)
}

func (n *Node) logPath(name string) string { return n.path("logs", name+".log") }

// ContainerdSocket is the node's containerd's CRI and API socket.
func (n *Node) ContainerdSocket() string { return n.path("run", "containerd.sock") }

// NRISocket is where containerd serves NRI plugins.
func (n *Node) NRISocket() string { return n.path("run", "nri.sock") }

// Log is the log file of one of the node's processes (containerd, kubelet, nri-…).
func (n *Node) Log(name string) string { return n.logPath(name) }

func (n *Node) onStop(f func()) {
	n.mu.Lock()
	n.stops = append(n.stops, f)
	n.mu.Unlock()
}

// CheckMachine says why this machine cannot run a real node, or nil.
func CheckMachine() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: it runs on Linux only", ErrUnsupported)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: it needs root (the kubelet, containerd and runc make cgroups, mounts and device nodes)", ErrUnsupported)
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return fmt.Errorf("%w: no cgroup file system at /sys/fs/cgroup", ErrUnsupported)
	}
	if _, err := exec.LookPath("busybox"); err != nil {
		return fmt.Errorf("%w: its shell image is made of Debian's busybox-static: apt-get install busybox-static", ErrUnsupported)
	}
	return nil
}

// Start brings up one node: containerd, the images, the made GPUs and their CDI specs, the
// kubelet registering with the API server, the device plugin; and waits until the node is
// Ready with its GPUs allocatable. Stop undoes all of it.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if err := CheckMachine(); err != nil {
		return nil, err
	}
	if o.IDStrategy == "" {
		o.IDStrategy = StrategyUUID
	}
	if o.ListStrategy == "" {
		o.ListStrategy = ListCDICRI
	}
	if o.Name == "" {
		o.Name = "real-1"
	}
	if o.Model == "" {
		o.Model = "NVIDIA A100-SXM4-80GB"
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 81920
	}
	n := &Node{opts: o, tools: o.Tools, bridge: "allot-rig0"}
	// The kubelet's device-plugin socket is the machine's: a test process running the
	// kubelet's device manager (kube/simnode/kubeletdm) waits for this node, or this for it.
	release, err := kubeletlock.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	n.release = release // last in Stop, after the mounts and the bridge are gone
	if err := n.claimMachine(); err != nil {
		release()
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	for i, u := range o.UUIDs {
		n.GPUs = append(n.GPUs, GPU{Index: i, UUID: u})
	}
	for _, d := range []string{n.path("logs"), n.path("run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	n.chooseOOM()
	if err := n.makeDevices(); err != nil {
		return nil, err
	}
	if err := n.writeCDISpecs(); err != nil {
		return nil, err
	}
	n.onStop(removeCDISpecs)
	if o.Legacy != nil {
		if n.legacyRuntime, err = n.installLegacyRuntime(); err != nil {
			return nil, err
		}
	}
	client, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	if n.apiService, err = lookupAPIService(ctx, client); err != nil {
		return nil, err
	}
	if err := n.serveAPIService(n.apiService, o.Config.Host); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.importImages(); err != nil {
		return nil, err
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	if len(o.UUIDs) > 0 {
		if err := n.startDevicePlugin(ctx); err != nil {
			return nil, err
		}
	}
	if err := n.waitReady(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// claimMachine refuses to start beside another kubelet: the device manager's socket and
// the kubelet's root directory are the machine's, one node per machine.
func (n *Node) claimMachine() error {
	if out, err := exec.Command("pgrep", "-x", "kubelet").Output(); err == nil && len(out) > 0 {
		return fmt.Errorf("%w: a kubelet already runs on this machine (pid %s); one real node per machine", ErrUnsupported, strings.TrimSpace(string(out)))
	}
	// What an earlier rig that was killed left: its mounts under the kubelet's directory.
	unmountUnder(KubeletRootDir)
	_ = os.RemoveAll("/var/log/pods")
	for _, sub := range []string{"pods", "device-plugins", "pod-resources", "plugins", "plugins_registry", "checkpoints", "cpu_manager_state", "memory_manager_state"} {
		_ = os.RemoveAll(filepath.Join(KubeletRootDir, sub))
	}
	return nil
}

// chooseOOM: a machine without CAP_SYS_RESOURCE refuses negative OOM scores, which the
// kubelet (-999 for itself) and the CRI (the sandbox's -998) ask for by default.
func (n *Node) chooseOOM() {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1"), 0); err != nil {
		n.oomScoreAdj, n.restrictOOM = 0, true
		return
	}
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0)
	n.oomScoreAdj, n.restrictOOM = -999, false
}

func (n *Node) startProcess(name string, cmd *exec.Cmd) error {
	f, err := os.OpenFile(n.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); f.Close() }()
	n.mu.Lock()
	n.procs = append(n.procs, cmd)
	n.mu.Unlock()
	return nil
}

func (n *Node) waitReady(ctx context.Context) error {
	// Ready as this kubelet reported it, not as an earlier one on the same Node object
	// did (heartbeats are kept to the second).
	since := time.Now().Truncate(time.Second)
	client, err := kubernetes.NewForConfig(n.opts.Config)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since)
				last = "Ready=" + string(c.Status) + ": " + c.Message
			}
		}
		gpus := node.Status.Allocatable["nvidia.com/gpu"]
		if ready && gpus.Cmp(*resource.NewQuantity(int64(len(n.GPUs)), resource.DecimalSI)) != 0 {
			last = fmt.Sprintf("allocatable nvidia.com/gpu %s, want %d", gpus.String(), len(n.GPUs))
			return false, nil
		}
		if ready {
			return true, n.untaintNotReady(ctx, client, node)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not ready (%s): %w\nkubelet log: %s\n%s", n.opts.Name, last, err, n.logPath("kubelet"), logTail(n.logPath("kubelet")))
	}
	return nil
}

// untaintNotReady removes the node.kubernetes.io/not-ready taint the API server put on
// the node as it registered, once the kubelet reports it Ready: what the node lifecycle
// controller does in a cluster. The embedded cluster does not run that controller (its
// simulated nodes send no heartbeats, and it would evict their pods).
func (n *Node) untaintNotReady(ctx context.Context, client kubernetes.Interface, node *corev1.Node) error {
	kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if len(kept) == len(node.Spec.Taints) {
		return nil
	}
	node = node.DeepCopy()
	node.Spec.Taints = kept
	_, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

// Stop removes every container the node ran, stops its processes and undoes its mounts,
// device nodes and specs. The API server's Node object is left to the caller.
func (n *Node) Stop() {
	n.mu.Lock()
	procs := slices.Clone(n.procs)
	stops := slices.Clone(n.stops)
	n.mu.Unlock()
	// The kubelet first, so that it does not start again what is removed below.
	for i := len(procs) - 1; i >= 0; i-- {
		if filepath.Base(procs[i].Path) == "kubelet" {
			stopProcess(procs[i])
		}
	}
	if n.tools.Ctr != "" {
		if out, err := n.ctr("tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = n.ctr("tasks", "kill", "-s", "SIGKILL", id)
				_, _ = n.ctr("tasks", "rm", "-f", id)
			}
		}
		if out, err := n.ctr("containers", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = n.ctr("containers", "rm", id)
			}
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		stopProcess(procs[i])
	}
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	killShims(n.ContainerdSocket())
	_ = exec.Command("ip", "link", "delete", n.bridge).Run()
	unmountUnder(n.opts.Dir)
	unmountUnder(KubeletRootDir)
	if n.release != nil {
		n.release()
		n.release = nil
	}
}

func stopProcess(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for cmd.ProcessState == nil {
			if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// killShims kills the runc shims containerd left (they outlive it by design) of the
// node whose containerd served socket.
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), socket) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder detaches every mount at or below dir, deepest first, so that removing the
// directory afterwards cannot reach through a bind mount into the host.
func unmountUnder(dir string) {
	dir = filepath.Clean(dir)
	for range 3 {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return
		}
		var points []string
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 5 {
				continue
			}
			mp := unescapeMount(fields[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				points = append(points, mp)
			}
		}
		f.Close()
		if len(points) == 0 {
			return
		}
		slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
