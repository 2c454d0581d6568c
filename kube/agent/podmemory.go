package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A pod with a memory limit past its request may use more than it asked while the GPU has
// it free; the scheduler stops it when another pod's request needs that memory. What a pod
// uses must be measured, not guessed from its request: NVML lists the processes on each
// device with the memory each holds, and each process's cgroup names its pod.

// PodMemory is one reading of the GPU memory pods' processes hold.
type PodMemory struct {
	// Used is each pod's bytes, by UID, summed over the devices its processes use.
	Used map[types.UID]uint64
	// Unread names the devices (UUID, or index where NVML gave none) whose processes
	// NVML would not list: what pods hold there is missing from Used, which is then
	// only a lower bound.
	Unread []string
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as NVML gives a process's used memory (an
// unsigned 64-bit -1) where it cannot tell it, as under Windows' WDDM or to a caller not
// allowed to know it.
const notAvailable = math.MaxUint64

// ReadPodMemory reads the processes on each of the node's devices, or on each MIG device
// of a MIG-enabled GPU (NVML answers for a MIG device only through its own handle; the
// GPU's handle gives an aggregate, and that only to a privileged caller), and sums their
// memory by the pod each belongs to, read from procRoot/<pid>/cgroup. NVML gives host
// PIDs wherever the caller runs, so procRoot is the host's /proc as the agent sees it. A
// process that belongs to no pod (the driver's, a host daemon's, one gone since) is
// counted nowhere.
func ReadPodMemory(lib nvml.Interface, procRoot string) PodMemory {
	out := PodMemory{Used: map[types.UID]uint64{}}
	count, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		out.Unread = append(out.Unread, "all (DeviceGetCount: "+r.Error()+")")
		return out
	}
	pods := map[uint32]types.UID{} // a process on several devices is looked up once
	podOf := func(pid uint32) types.UID {
		uid, seen := pods[pid]
		if !seen {
			uid, _ = PodOfProcess(procRoot, pid)
			pods[pid] = uid
		}
		return uid
	}
	for i := range count {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			out.Unread = append(out.Unread, strconv.Itoa(i))
			continue
		}
		for _, h := range processHandles(d) {
			held, ok := deviceProcesses(h)
			if !ok {
				out.Unread = append(out.Unread, handleName(h, i))
				continue
			}
			for pid, bytes := range held {
				if uid := podOf(pid); uid != "" {
					out.Used[uid] += bytes
				}
			}
		}
	}
	return out
}

// processHandles are the handles NVML lists a device's processes through: its MIG
// devices where MIG is on, else the device itself.
func processHandles(d nvml.Device) []nvml.Device {
	// Devices without MIG say so with NOT_SUPPORTED: that is "off", not an error.
	if current, _, r := d.GetMigMode(); r != nvml.SUCCESS || current != nvml.DEVICE_MIG_ENABLE {
		return []nvml.Device{d}
	}
	n, r := d.GetMaxMigDeviceCount()
	if r != nvml.SUCCESS {
		return nil
	}
	var out []nvml.Device
	for slot := range n {
		if mig, r := d.GetMigDeviceHandleByIndex(slot); r == nvml.SUCCESS {
			out = append(out, mig)
		}
	}
	return out
}

// deviceProcesses is the memory each process holds on one device, by PID: its compute
// processes, the clients of an MPS server on it, and its graphics processes. A process
// with contexts of more than one kind is listed by each with the same memory, so the
// largest is kept, not the sum. ok is false when NVML would not list compute processes;
// the other kinds are not there to list on many devices (NOT_SUPPORTED).
func deviceProcesses(d nvml.Device) (held map[uint32]uint64, ok bool) {
	held = map[uint32]uint64{}
	add := func(procs []nvml.ProcessInfo) {
		for _, p := range procs {
			if p.UsedGpuMemory == notAvailable {
				continue
			}
			held[p.Pid] = max(held[p.Pid], p.UsedGpuMemory)
		}
	}
	procs, r := d.GetComputeRunningProcesses()
	if r != nvml.SUCCESS {
		return nil, false
	}
	add(procs)
	if procs, r := d.GetMPSComputeRunningProcesses(); r == nvml.SUCCESS {
		add(procs)
	}
	if procs, r := d.GetGraphicsRunningProcesses(); r == nvml.SUCCESS {
		add(procs)
	}
	return held, true
}

func handleName(d nvml.Device, index int) string {
	if u, r := d.GetUUID(); r == nvml.SUCCESS {
		return u
	}
	return strconv.Itoa(index)
}

// PodOfProcess is the UID of the pod whose cgroup the process is in, read from
// procRoot/<pid>/cgroup; false for a process of no pod, or one gone.
func PodOfProcess(procRoot string, pid uint32) (types.UID, bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", false
	}
	return PodOfCgroup(string(b))
}

// PodOfCgroup reads a pod's UID from the lines of a /proc/<pid>/cgroup file: cgroup v2's
// one line ("0::/path") or cgroup v1's one per hierarchy ("4:memory:/path"). The kubelet
// puts a pod's containers under a cgroup named for the pod: with the systemd driver
// "kubepods[-<qos>]-pod<uid, its dashes as underscores>.slice" (prefixed by the kubelet's
// cgroup root's name where it has one: "kubelet-kubepods-…"), with the cgroupfs driver
// "pod<uid>", whatever its QoS class and container runtime. Read from inside a cgroup
// namespace (the agent's container), the path is relative to the agent's own cgroup
// ("/../../kubepods-pod<uid>.slice/…", "/../../pod<uid>/…"), so the pod's cgroup is
// found wherever it is in the path rather than under a "kubepods" root.
func PodOfCgroup(content string) (types.UID, bool) {
	for line := range strings.Lines(content) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, seg := range strings.Split(parts[2], "/") {
			if uid, ok := podSegment(seg); ok {
				return uid, true
			}
		}
	}
	return "", false
}

// podSegment reads a pod's UID from one cgroup path segment of the kubelet's naming.
func podSegment(seg string) (types.UID, bool) {
	if name, ok := strings.CutSuffix(seg, ".slice"); ok {
		i := strings.LastIndex(name, "-pod")
		if i < 0 || !strings.Contains(name[:i], "kubepods") {
			return "", false
		}
		uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
		return types.UID(uid), isPodUID(uid)
	}
	if uid, ok := strings.CutPrefix(seg, "pod"); ok && isPodUID(uid) {
		return types.UID(uid), true
	}
	return "", false
}

// isPodUID says whether s is a pod UID as the kubelet names cgroups by: the API server's
// UUIDs, or a static pod's 32 hex digits of hash.
func isPodUID(s string) bool {
	if len(s) != 36 && len(s) != 32 {
		return false
	}
	for i, c := range s {
		dash := len(s) == 36 && (i == 8 || i == 13 || i == 18 || i == 23)
		if dash != (c == '-') || (!dash && !isHex(c)) {
			return false
		}
	}
	return true
}

func isHex(c rune) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// Written again only once a pod's use moved by one of these since it was last written:
// a reading every interval of every pod on a busy node would otherwise be a write each,
// each reaching every watcher of pods. 64 MiB is finer than any request is asked in; 5%
// tells a small pod's use that doubled.
const (
	memoryWriteStepMiB     = 64
	memoryWriteStepPercent = 5
)

// memoryChanged says whether a pod's use, nowMiB, is to be written over what was last
// written (lastMiB; has false when nothing was). A pod that never held memory is left
// without the annotation; one whose use ended is written 0, once.
func memoryChanged(lastMiB int64, has bool, nowMiB int64) bool {
	if !has {
		return nowMiB > 0
	}
	step := max(nowMiB-lastMiB, lastMiB-nowMiB)
	return step > 0 && (step >= memoryWriteStepMiB || step*100 >= lastMiB*memoryWriteStepPercent || nowMiB == 0)
}

// podMemoryState is what the run loop keeps of the measurement between readings.
type podMemoryState struct {
	checked bool   // ProcRoot was checked, and off is why it is not used
	off     error  // set when ProcRoot cannot be read: nothing is measured
	unread  string // the devices the last reading could not read, said once
}

// syncPodMemory measures what each pod of the node holds of its GPUs and writes it on the
// pods Allot schedules (AnnotationPodGPUMemoryUsed) where it moved enough. The value last
// written is the pod's own annotation, as the informer has it: an agent that restarts
// goes on from it. Without a host /proc (Options.ProcRoot) nothing is measured.
func (a *Agent) syncPodMemory(ctx context.Context, lib nvml.Interface, pods []any) {
	if a.opts.ProcRoot == "" {
		return
	}
	// A /proc that is not there would have every process belong to no pod, and every
	// pod written 0: nothing is written instead, and the agent says why once.
	if !a.podMemory.checked {
		a.podMemory.checked, a.podMemory.off = true, checkProcRoot(a.opts.ProcRoot)
		if a.podMemory.off != nil {
			slog.Warn("allot agent: pods' GPU memory is not measured", "node", a.opts.Node, "err", a.podMemory.off)
		}
	}
	if a.podMemory.off != nil {
		return
	}
	m := ReadPodMemory(lib, a.opts.ProcRoot)
	if unread := strings.Join(m.Unread, ", "); unread != a.podMemory.unread {
		a.podMemory.unread = unread
		if unread != "" {
			slog.Warn("allot agent: pods' GPU memory is not read on some devices; pods' readings only rise until it is",
				"node", a.opts.Node, "devices", unread)
		}
	}
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if p.Spec.SchedulerName != v1alpha1.SchedulerName || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || v1alpha1.IsReservation(p) ||
			!measured(p) {
			continue
		}
		now := int64((m.Used[p.UID] + (1<<20 - 1)) >> 20) // rounded up: a pod holding any memory reads above 0
		last, err := strconv.ParseInt(p.Annotations[v1alpha1.AnnotationPodGPUMemoryUsed], 10, 64)
		has := err == nil && last >= 0
		if !memoryChanged(last, has, now) {
			continue
		}
		// A device not read may hide what a pod holds, never add to it: the pod's
		// reading may rise, not fall, until every device is read again.
		if len(m.Unread) > 0 && has && now < last {
			continue
		}
		if err := a.writePodMemory(ctx, p, now); err != nil && ctx.Err() == nil {
			slog.Warn("allot agent: pod's GPU memory", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}

// measured tells the pods whose GPU memory is written: a slice of one GPU (not a MIG
// instance), the only pods the scheduler reads it of (a slice holding more than its
// booking, with a limit past its request or on a node that does not hold it to it,
// holds memory no other request may count on) and allot describe shows it for (those
// with a limit past their request). A whole GPU, a MIG instance or a slice of several
// GPUs is the pod's alone, held by the device or its booking: writing it would be a
// write per pod per move that no one reads.
func measured(p *corev1.Pod) bool {
	share, err := v1alpha1.ParseGPUShare(p.Annotations)
	if err != nil || !share.Shared() || share.Devices() != 1 {
		return false
	}
	if _, mig := p.Annotations[v1alpha1.AnnotationMIG]; mig {
		return false
	}
	profile, _, _ := v1alpha1.MIGResources(p)
	return profile == ""
}

// writePodMemory writes a pod's reading on the pod seen (its UID), not on a new one of
// the same name. A pod gone, or changed since, is read again at the next interval.
func (a *Agent) writePodMemory(ctx context.Context, p *corev1.Pod, mib int64) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         p.UID,
		"annotations": map[string]string{v1alpha1.AnnotationPodGPUMemoryUsed: strconv.FormatInt(mib, 10)}}})
	_, err := a.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
		return nil
	}
	return fmt.Errorf("writing %s=%d: %w", v1alpha1.AnnotationPodGPUMemoryUsed, mib, err)
}

// checkProcRoot says whether procRoot is a /proc whose processes' cgroups can be read,
// and if not, why.
func checkProcRoot(procRoot string) error {
	self := filepath.Join(procRoot, "self", "cgroup")
	_, err := os.ReadFile(self)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the host's /proc is not at %s (no %s): is it mounted there? The chart mounts it read-only at /host/proc", procRoot, self)
	}
	if err != nil {
		return fmt.Errorf("the host's /proc at %s: %w", procRoot, err)
	}
	return nil
}
