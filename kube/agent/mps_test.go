package agent

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/simgpu"
)

// MPS as the agent runs it, against a stand-in speaking nvidia-cuda-mps-control's
// commands (mpsstandin_test.go) and go-nvml's mock GPUs:
//
//	GPU a: shared by two halves (50% of its compute and 40 GiB each): a daemon, held to
//	       50% and 40960M; the GPU exclusive-process
//	agent restarts: the daemon answers, so it is adopted (not started twice), and a client
//	       that asks 100% still gets 50%
//	GPU b: a pipe directory left by a daemon that died, now shared: cleared, a new daemon
//	GPU a: no longer shared: its daemon quits, the GPU back to default compute mode
func TestMPSDaemonsOutliveTheAgentAndHoldTheirLimits(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	control, err := mpsStandIn(bin)
	if err != nil {
		t.Fatal(err)
	}
	gpus := simgpu.New(simgpu.Spec{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 2, UUIDs: []string{"GPU-a", "GPU-b"}})
	inv, err := ReadInventory(gpus)
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func() *Agent {
		return &Agent{opts: Options{Node: "n1", NVML: gpus, SharingRoot: root, MPSControl: control}, declared: v1alpha1.SharingMPS,
			inv: inv, mps: map[string]bool{}, mpsHeld: map[string]mpsLimits{}}
	}
	t.Cleanup(func() { stopDaemons(t, root, "GPU-a", "GPU-b") })
	reservation := func(uuid string) any {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-" + uuid, Namespace: v1alpha1.SystemNamespace,
			Labels: map[string]string{v1alpha1.LabelReservation: "true"}, Annotations: map[string]string{v1alpha1.AnnotationGPUDevices: uuid}}}
	}
	half := func(name, uuid string) any { // as the scheduler's bind leaves a half of an 80 GiB GPU
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Annotations: map[string]string{
			v1alpha1.AnnotationGPUEnvPrefix + "NVIDIA_VISIBLE_DEVICES":            uuid,
			v1alpha1.AnnotationGPUEnvPrefix + "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
			v1alpha1.AnnotationGPUEnvPrefix + "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=40960M"}}}
	}
	ctx := context.Background()
	client := func(a *Agent, uuid, asks string) string {
		out, err := a.mpsCommand(ctx, uuid, "client "+asks+"\n")
		if err != nil {
			t.Fatalf("a client of %s: %v", uuid, err)
		}
		return strings.TrimSpace(out)
	}
	mode := func(i int) nvml.ComputeMode {
		m, _ := gpus.Devices[i].GetComputeMode()
		return m
	}

	first := newAgent()
	first.syncMPS(ctx, []any{reservation("GPU-a"), half("nb-1", "GPU-a"), half("nb-2", "GPU-a")})
	pid := daemonPID(t, root, "GPU-a")
	if got := client(first, "GPU-a", "100 81920M"); got != "50 40960M" {
		t.Errorf("a client asking all of GPU a got %q, want 50%% and 40960M", got)
	}
	if mode(0) != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("GPU a in compute mode %d while shared through MPS, want exclusive-process", mode(0))
	}

	// The agent restarts; the daemon, a process of its own, runs on. GPU b has a pipe
	// directory whose daemon died, and is shared now.
	if err := os.MkdirAll(v1alpha1.MPSDir(root, "GPU-b")+"/pipe", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(v1alpha1.MPSDir(root, "GPU-b")+"/pipe/control", 0o600); err != nil {
		t.Fatal(err)
	}
	second := newAgent()
	pods := []any{reservation("GPU-a"), half("nb-1", "GPU-a"), half("nb-2", "GPU-a"), reservation("GPU-b"), half("nb-3", "GPU-b")}
	second.syncMPS(ctx, pods)
	if again := daemonPID(t, root, "GPU-a"); again != pid {
		t.Errorf("GPU a's daemon is %s after the restart, was %s: started twice", again, pid)
	}
	if got := client(second, "GPU-a", "100 0M"); got != "50 40960M" {
		t.Errorf("after the restart a client asking 100%% got %q, want 50%% and 40960M", got)
	}
	if got := client(second, "GPU-b", "100 0M"); got != "50 40960M" {
		t.Errorf("GPU b's new daemon gave a client %q, want 50%% and 40960M", got)
	}
	if starts := strings.Count(controlLog(root, "GPU-a"), "set_default_active_thread_percentage"); starts == 0 {
		t.Error("GPU a's daemon was never held to a thread percentage")
	}

	second.syncMPS(ctx, []any{reservation("GPU-b"), half("nb-3", "GPU-b")})
	if _, err := second.mpsCommand(ctx, "GPU-a", "get_server_list\n"); err == nil {
		t.Error("GPU a's daemon still answers after its GPU is no longer shared")
	}
	if mode(0) != nvml.COMPUTEMODE_DEFAULT || mode(1) != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute modes %d and %d, want GPU a back to default and GPU b exclusive-process", mode(0), mode(1))
	}
}

// A node declares mps only after a daemon answered: with a control program that cannot
// start one, it declares none and says why.
func TestMPSDeclaredOnlyWhenADaemonAnswers(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	broken := bin + "/nvidia-cuda-mps-control"
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'Cannot find MPS control daemon process'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := &Agent{opts: Options{Node: "n1", Sharing: v1alpha1.SharingMPS, SharingRoot: root, MPSControl: broken}}
	if declared, why := a.prepareMode(); declared != v1alpha1.SharingNone || !strings.Contains(why, "an MPS control daemon did not answer") {
		t.Errorf("declared %q (%s), want none because no daemon answered", declared, why)
	}
	control, err := mpsStandIn(bin)
	if err != nil {
		t.Fatal(err)
	}
	a.opts.MPSControl = control
	if declared, why := a.prepareMode(); declared != v1alpha1.SharingMPS {
		t.Errorf("declared %q (%s) with a daemon that answers, want mps", declared, why)
	}
}

func daemonPID(t *testing.T, root, uuid string) string {
	t.Helper()
	b, err := os.ReadFile(v1alpha1.MPSDir(root, uuid) + "/pipe/daemon.pid")
	if err != nil {
		t.Fatalf("no daemon for %s: %v", uuid, err)
	}
	return string(b)
}

func controlLog(root, uuid string) string {
	b, _ := os.ReadFile(v1alpha1.MPSDir(root, uuid) + "/log/control.log")
	return string(b)
}

// stopDaemons ends whatever stand-in daemons a test left.
func stopDaemons(t *testing.T, root string, uuids ...string) {
	for _, u := range uuids {
		if b, err := os.ReadFile(v1alpha1.MPSDir(root, u) + "/pipe/daemon.pid"); err == nil {
			_ = exec.Command("kill", strings.TrimSpace(string(b))).Run()
		}
	}
}

// With the MPS host (the chart's mps container), the agent never starts a daemon itself:
// it asks for one with the limits of its pods' share, the host starts it and holds it to
// them; a new agent (restarted) adopts it; a daemon that dies while its GPU is wanted is
// started again by the host and held again; a GPU no longer shared loses its daemon.
func TestMPSHostKeepsTheDaemonsTheAgentAsksFor(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	control, err := mpsStandIn(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemons(t, root, "GPU-a") })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gpus := simgpu.New(simgpu.Spec{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 1, UUIDs: []string{"GPU-a"}})
	go func() {
		_ = MPSHost{SharingRoot: root, Control: control, Interval: 100 * time.Millisecond, NVML: gpus}.Run(ctx)
	}()
	mode := func() nvml.ComputeMode { m, _ := gpus.Devices[0].GetComputeMode(); return m }
	agentOf := func() *Agent {
		return &Agent{opts: Options{Node: "n1", Sharing: v1alpha1.SharingMPS, SharingRoot: root, MPSControl: control, MPSHost: true},
			inv: []v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-a"}}, mps: map[string]bool{}, mpsHeld: map[string]mpsLimits{}}
	}
	first := agentOf()
	if declared, why := first.prepareMode(); declared != v1alpha1.SharingMPS {
		t.Fatalf("declared %q (%s), want mps once the host's probe answered", declared, why)
	}
	first.declared = v1alpha1.SharingMPS
	pods := []any{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: v1alpha1.SystemNamespace,
			Labels: map[string]string{v1alpha1.LabelReservation: "true"}, Annotations: map[string]string{v1alpha1.AnnotationGPUDevices: "GPU-a"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "ml", Annotations: map[string]string{
			v1alpha1.AnnotationGPUEnvPrefix + "NVIDIA_VISIBLE_DEVICES":            "GPU-a",
			v1alpha1.AnnotationGPUEnvPrefix + "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
			v1alpha1.AnnotationGPUEnvPrefix + "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=24576M"}}},
	}
	first.syncMPS(ctx, pods)
	pid := daemonPID(t, root, "GPU-a")
	clientGets(t, first, "GPU-a", "30 24576M")
	if mode() != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("GPU a in compute mode %d with its daemon, want exclusive-process (set by the host)", mode())
	}
	second := agentOf()
	second.declared = v1alpha1.SharingMPS
	second.syncMPS(ctx, pods)
	if again := daemonPID(t, root, "GPU-a"); again != pid {
		t.Errorf("the daemon is %s after the agent's restart, was %s", again, pid)
	}
	// The daemon dies; the host starts another while the GPU is wanted.
	if err := exec.Command("kill", pid).Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(v1alpha1.MPSDir(root, "GPU-a") + "/pipe/daemon.pid"); err == nil && string(b) != pid {
			if _, err := second.mpsCommand(ctx, "GPU-a", "get_server_list\n"); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the host did not start a new daemon for GPU a after its daemon died")
		}
		time.Sleep(100 * time.Millisecond)
	}
	clientGets(t, second, "GPU-a", "30 24576M")
	second.syncMPS(ctx, nil)
	time.Sleep(300 * time.Millisecond) // a look of the host's
	if mode() != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("GPU a in compute mode %d without a daemon, want default", mode())
	}
	if _, err := second.mpsCommand(ctx, "GPU-a", "get_server_list\n"); err == nil {
		t.Error("GPU a's daemon answers after its GPU is no longer shared")
	}
}

// clientGets waits until a client of uuid's daemon asking for all of it gets want (the
// MPS host applies limits at its next look).
func clientGets(t *testing.T, a *Agent, uuid, want string) {
	t.Helper()
	got := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, _ := a.mpsCommand(context.Background(), uuid, "client 100 0M\n")
		if got = strings.TrimSpace(out); got == want {
			return
		}
	}
	t.Fatalf("a client of %s's daemon asking for all of it got %q, want %q", uuid, got, want)
}

// On a node whose delivery is CDI a pod's device variable is empty and its NRI annotation
// names the device: its daemon is held to its share all the same.
func TestMPSLimitsOfPodsGivenTheirGPUByCDI(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "ml", Annotations: map[string]string{
		v1alpha1.AnnotationGPUEnvPrefix + "NVIDIA_VISIBLE_DEVICES":            "",
		v1alpha1.AnnotationNRIContainerPrefix + "main":                        "k8s.device-plugin.nvidia.com/gpu=GPU-a",
		v1alpha1.AnnotationGPUEnvPrefix + "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
		v1alpha1.AnnotationGPUEnvPrefix + "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=20480M"}}}
	got := mpsLimitsOf([]any{p}, nil)
	if l := got["GPU-a"]; l.threadPercent != 25 || l.pinnedMiB != 20480 {
		t.Errorf("limits %+v, want GPU-a held to 25%% and 20480M", got)
	}
	// Allot's own plugin's key, naming the device by index (the device plugin's index
	// strategy): the daemon of the GPU at that index in the inventory.
	delete(p.Annotations, v1alpha1.AnnotationNRIContainerPrefix+"main")
	p.Annotations[v1alpha1.AnnotationCDIPrefix+"main"] = "k8s.device-plugin.nvidia.com/gpu=1"
	got = mpsLimitsOf([]any{p}, []v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}})
	if l := got["GPU-b"]; len(got) != 1 || l.threadPercent != 25 || l.pinnedMiB != 20480 {
		t.Errorf("limits %+v, want GPU-b (index 1) held to 25%% and 20480M", got)
	}
}
