package agent

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/simgpu"
)

const gib = uint64(1) << 30

// Pod UIDs, and the cgroup lines the kubelet gives their processes in each of its forms.
const (
	uidTrain    = "0f3a2b1c-4d5e-6f70-8192-a3b4c5d6e7f8"
	uidNotebook = "11111111-2222-3333-4444-555555555555"
	uidServe    = "9abcdef0-1234-5678-9abc-def012345678"
)

func systemdSlice(qos, uid string) string {
	u := strings.ReplaceAll(uid, "-", "_")
	if qos == "" { // guaranteed pods sit right under kubepods.slice
		return "/kubepods.slice/kubepods-pod" + u + ".slice"
	}
	return "/kubepods.slice/kubepods-" + qos + ".slice/kubepods-" + qos + "-pod" + u + ".slice"
}

// fakeProc is a /proc holding only what the agent reads of it: each process's cgroup
// file, and its own.
type fakeProc string

func newFakeProc(t *testing.T) fakeProc {
	t.Helper()
	p := fakeProc(t.TempDir())
	p.add(t, "self", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podagent.slice/cri-containerd-agent.scope\n")
	return p
}

func (p fakeProc) add(t *testing.T, pid, cgroup string) {
	t.Helper()
	dir := filepath.Join(string(p), pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o444); err != nil {
		t.Fatal(err)
	}
}

// gpuProcs is what NVML lists on each handle, by kind: compute, MPS clients, graphics.
type gpuProcs struct{ compute, mps, graphics []nvml.ProcessInfo }

// listProcesses has a mock handle list procs; a kind without any says NOT_SUPPORTED, as
// a data-centre GPU does of graphics.
func listProcesses(d *nvmlmock.Device, procs *gpuProcs) {
	list := func(kind func() []nvml.ProcessInfo) func() ([]nvml.ProcessInfo, nvml.Return) {
		return func() ([]nvml.ProcessInfo, nvml.Return) {
			if v := kind(); v != nil {
				return v, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs.compute, nvml.SUCCESS }
	d.GetMPSComputeRunningProcessesFunc = list(func() []nvml.ProcessInfo { return procs.mps })
	d.GetGraphicsRunningProcessesFunc = list(func() []nvml.ProcessInfo { return procs.graphics })
}

// dgxWithProcesses is go-nvml's DGX A100 mock whose GPUs list procs[i] (none where absent).
func dgxWithProcesses(procs map[int]*gpuProcs) *simgpu.Machine {
	m := simgpu.DGXA100()
	for i, d := range m.Devices {
		p := procs[i]
		if p == nil {
			p = &gpuProcs{}
		}
		listProcesses(&d.(*server.Device).Device, p)
	}
	return m
}

func proc(pid uint32, bytes uint64) nvml.ProcessInfo {
	return nvml.ProcessInfo{Pid: pid, UsedGpuMemory: bytes}
}

// Two pods on GPU 0, one pod on GPUs 2 and 3 (one of its processes on both), each process
// told apart by its cgroup in a form of its own; a host daemon's process, one gone since
// NVML listed it, and one whose memory NVML cannot tell count for no pod.
func TestPodMemorySumsEachPodsProcesses(t *testing.T) {
	p := newFakeProc(t)
	p.add(t, "100", "0::"+systemdSlice("burstable", uidTrain)+"/cri-containerd-4b1e.scope\n")
	p.add(t, "101", "0::"+systemdSlice("burstable", uidTrain)+"/cri-containerd-77aa.scope\n")
	// cgroup v1, cgroupfs driver: a line per hierarchy.
	p.add(t, "200", "12:memory:/kubepods/besteffort/pod"+uidNotebook+"/5f0c\n11:devices:/kubepods/besteffort/pod"+uidNotebook+"/5f0c\n0::/\n")
	// Seen from the agent's own cgroup namespace: relative, through "..".
	p.add(t, "300", "0::/../../.."+systemdSlice("", uidServe)[len("/kubepods.slice"):]+"/cri-containerd-9d.scope\n")
	p.add(t, "301", "0::/kubepods/pod"+uidServe+"/e2\n")
	p.add(t, "400", "0::/system.slice/nvidia-persistenced.service\n")
	p.add(t, "600", "0::"+systemdSlice("burstable", uidNotebook)+"/cri-containerd-1.scope\n")
	m := dgxWithProcesses(map[int]*gpuProcs{
		0: {
			compute: []nvml.ProcessInfo{proc(100, 4*gib), proc(101, 512<<20), proc(200, 6*gib), proc(500, 3*gib)},
			// train's first process also draws: listed again with the same memory.
			graphics: []nvml.ProcessInfo{proc(100, 4*gib)},
		},
		1: {compute: []nvml.ProcessInfo{proc(400, gib), proc(600, notAvailable)}},
		2: {compute: []nvml.ProcessInfo{proc(300, 10*gib)}},
		3: {compute: []nvml.ProcessInfo{proc(300, 2*gib), proc(301, 12*gib)}},
	})
	got := ReadPodMemory(m, string(p))
	want := map[types.UID]uint64{uidTrain: 4*gib + 512<<20, uidNotebook: 6 * gib, uidServe: 24 * gib}
	if !maps.Equal(got.Used, want) {
		t.Errorf("pods' GPU memory %v, want %v", got.Used, want)
	}
	if len(got.Unread) > 0 {
		t.Errorf("unread devices %v, want none", got.Unread)
	}
}

// The clients of an MPS server are listed apart from compute processes, and count for
// their pods.
func TestPodMemoryCountsMPSClients(t *testing.T) {
	p := newFakeProc(t)
	p.add(t, "700", "0::"+systemdSlice("burstable", uidTrain)+"/cri-containerd-a.scope\n")
	m := dgxWithProcesses(map[int]*gpuProcs{5: {mps: []nvml.ProcessInfo{proc(700, 3*gib)}}})
	if got := ReadPodMemory(m, string(p)).Used[uidTrain]; got != 3*gib {
		t.Errorf("train holds %d bytes through MPS, read %d", 3*gib, got)
	}
}

// On a MIG-enabled GPU the processes are read from each MIG device, not from the GPU's
// handle, whose aggregate would count them twice.
func TestPodMemoryReadsMIGDevices(t *testing.T) {
	p := newFakeProc(t)
	p.add(t, "800", "0::"+systemdSlice("besteffort", uidTrain)+"/cri-containerd-b.scope\n")
	p.add(t, "801", "0::"+systemdSlice("besteffort", uidNotebook)+"/cri-containerd-c.scope\n")
	m := dgxWithProcesses(map[int]*gpuProcs{
		6: {compute: []nvml.ProcessInfo{proc(800, 5*gib), proc(801, 5*gib)}}, // the aggregate
	})
	d := m.Devices[6].(*server.Device)
	if r, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", r)
	}
	migs := []*nvmlmock.Device{{}, {}}
	listProcesses(migs[0], &gpuProcs{compute: []nvml.ProcessInfo{proc(800, 2*gib)}})
	listProcesses(migs[1], &gpuProcs{compute: []nvml.ProcessInfo{proc(801, 3*gib)}})
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(slot int) (nvml.Device, nvml.Return) {
		if slot < len(migs) {
			return migs[slot], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	got := ReadPodMemory(m, string(p)).Used
	if want := map[types.UID]uint64{uidTrain: 2 * gib, uidNotebook: 3 * gib}; !maps.Equal(got, want) {
		t.Errorf("pods' GPU memory %v, want %v from the MIG devices", got, want)
	}
}

// Each form the kubelet names a pod's cgroup in, with either driver, either cgroup version,
// and from inside a cgroup namespace; paths of no pod name none.
func TestPodOfCgroup(t *testing.T) {
	u := strings.ReplaceAll(uidTrain, "-", "_")
	for _, c := range []struct {
		name, cgroup string
		want         types.UID
	}{
		{"v2 systemd burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice/cri-containerd-ab12.scope\n", uidTrain},
		{"v2 systemd besteffort", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice/crio-ab12.scope\n", uidTrain},
		{"v2 systemd guaranteed", "0::/kubepods.slice/kubepods-pod" + u + ".slice/cri-containerd-ab12.scope\n", uidTrain},
		{"v2 systemd under kubelet.slice", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + u + ".slice/cri-containerd-1.scope", uidTrain},
		{"v2 cgroupfs burstable", "0::/kubepods/burstable/pod" + uidTrain + "/ab12\n", uidTrain},
		{"v2 cgroupfs guaranteed", "0::/kubepods/pod" + uidTrain + "/ab12\n", uidTrain},
		{"v2 from a cgroup namespace", "0::/../../kubepods-besteffort-pod" + u + ".slice/cri-containerd-ab12.scope\n", uidTrain},
		{"v2 cgroupfs from a cgroup namespace", "0::/../../../pod" + uidTrain + "/ab12\n", uidTrain},
		{"v1 cgroupfs", "12:pids:/kubepods/burstable/pod" + uidTrain + "/ab12\n11:memory:/kubepods/burstable/pod" + uidTrain + "/ab12\n1:name=systemd:/kubepods/burstable/pod" + uidTrain + "/ab12\n", uidTrain},
		{"v1 systemd", "11:cpuset:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice/docker-ab12.scope\n", uidTrain},
		{"v1 after an unnamed hierarchy", "13:rdma:/\n12:memory:/kubepods/besteffort/pod" + uidTrain + "/ab12\n", uidTrain},
		{"static pod", "0::/kubepods/besteffort/pod6a0c1d4e0f9b8a7c6d5e4f3a2b1c0d9e/ab12\n", "6a0c1d4e0f9b8a7c6d5e4f3a2b1c0d9e"},
		{"a host service", "0::/system.slice/nvidia-persistenced.service\n", ""},
		{"a login session", "0::/user.slice/user-1000.slice/session-3.scope\n", ""},
		{"podman", "0::/machine.slice/libpod-ab12.scope\n", ""},
		{"a pod-like name that is not a UID", "0::/kubepods/burstable/podcast/ab12\n", ""},
		{"empty", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := PodOfCgroup(c.cgroup)
			if got != c.want || ok != (c.want != "") {
				t.Errorf("PodOfCgroup(%q) = %q, %v; want %q", c.cgroup, got, ok, c.want)
			}
		})
	}
}

// podMemoryNode is an agent on node gpu-1 whose GPU 0 runs the processes use says, with
// the pods' API server a fake clientset.
type podMemoryNode struct {
	agent  *Agent
	client *fake.Clientset
	lib    *simgpu.Machine
	procs  *gpuProcs
}

func newPodMemoryNode(t *testing.T, procRoot fakeProc, pods ...*corev1.Pod) *podMemoryNode {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	n := &podMemoryNode{client: fake.NewClientset(objs...), procs: &gpuProcs{}}
	n.lib = dgxWithProcesses(map[int]*gpuProcs{0: n.procs})
	a, err := New(n.client, Options{Node: "gpu-1", NVML: n.lib, ProcRoot: string(procRoot)})
	if err != nil {
		t.Fatal(err)
	}
	n.agent = a
	return n
}

// use has each pod's process (pid = its index + 1000) hold that many MiB on GPU 0.
func (n *podMemoryNode) use(mib ...uint64) {
	n.procs.compute = nil
	for i, v := range mib {
		n.procs.compute = append(n.procs.compute, proc(uint32(1000+i), v<<20))
	}
}

// sync runs one interval's measurement over the pods as the API server has them now (the
// informer's view), and returns how many writes it made.
func (n *podMemoryNode) sync(t *testing.T) int {
	t.Helper()
	list, err := n.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := len(n.client.Actions())
	pods := make([]any, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	n.agent.syncPodMemory(context.Background(), n.lib, pods)
	writes := 0
	for _, a := range n.client.Actions()[before:] {
		if a.GetVerb() == "patch" {
			writes++
		}
	}
	return writes
}

func (n *podMemoryNode) reading(t *testing.T, name string) (string, bool) {
	t.Helper()
	p, err := n.client.CoreV1().Pods("ml").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := p.Annotations[v1alpha1.AnnotationPodGPUMemoryUsed]
	return v, ok
}

// allotPod is a pod sharing one GPU (10Gi up to 40Gi), with the annotations given besides.
func allotPod(name, uid string, annotations map[string]string) *corev1.Pod {
	ann := map[string]string{v1alpha1.AnnotationGPUMemory: "10Gi", v1alpha1.AnnotationGPUMemoryLimit: "40Gi"}
	maps.Copy(ann, annotations)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(uid), Annotations: ann},
		Spec:   corev1.PodSpec{NodeName: "gpu-1", SchedulerName: v1alpha1.SchedulerName},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// A pod's reading is written when it first holds memory, again only once its use moved
// by 64 MiB or 5% (a 10 MiB change is not worth a write, a GiB is), 0 once when its use
// ends, then nothing. A pod of another scheduler is not written.
func TestPodMemoryIsWrittenWhenItMoves(t *testing.T) {
	p := newFakeProc(t)
	uids := []string{uidTrain, uidNotebook, uidServe}
	for i, uid := range uids {
		p.add(t, strconv.Itoa(1000+i), "0::"+systemdSlice("burstable", uid)+"/cri-containerd-x.scope\n")
	}
	other := allotPod("other", uidServe, nil)
	other.Spec.SchedulerName = "default-scheduler"
	n := newPodMemoryNode(t, p, allotPod("train", uidTrain, map[string]string{v1alpha1.AnnotationPodGPUMemoryUsed: "20000"}),
		allotPod("notebook", uidNotebook, nil), other)

	n.use(20010, 0, 4096)
	if w := n.sync(t); w != 0 {
		t.Errorf("%d writes for a 10 MiB change and an idle pod, want none", w)
	}
	if v, _ := n.reading(t, "train"); v != "20000" {
		t.Errorf("train reads %s, want 20000 still", v)
	}
	if _, ok := n.reading(t, "notebook"); ok {
		t.Error("notebook, which never held GPU memory, was given a reading")
	}
	if _, ok := n.reading(t, "other"); ok {
		t.Error("a pod of another scheduler was written")
	}

	n.use(21024, 300, 4096)
	if w := n.sync(t); w != 2 {
		t.Errorf("%d writes, want 2: train moved by 1 GiB, notebook began", w)
	}
	for name, want := range map[string]string{"train": "21024", "notebook": "300"} {
		if v, _ := n.reading(t, name); v != want {
			t.Errorf("%s reads %s, want %s", name, v, want)
		}
	}

	// 20 MiB is under 64 MiB but over 5% of notebook's 300: a small pod's move counts.
	// 100 MiB is under 5% of train's 21024 but over 64 MiB: so does a large pod's.
	n.use(21124, 320, 4096)
	if w := n.sync(t); w != 2 {
		t.Errorf("%d writes, want 2 (train's 21024 -> 21124, notebook's 300 -> 320)", w)
	}
	for name, want := range map[string]string{"train": "21124", "notebook": "320"} {
		if v, _ := n.reading(t, name); v != want {
			t.Errorf("%s reads %s, want %s", name, v, want)
		}
	}

	n.use(0, 320, 4096)
	n.sync(t)
	if v, _ := n.reading(t, "train"); v != "0" {
		t.Errorf("train reads %s once its processes ended, want 0", v)
	}
	if w := n.sync(t); w != 0 {
		t.Errorf("%d writes with nothing changed, want none", w)
	}
}

// A device NVML cannot list may hide what pods hold there: their readings may rise but
// not fall until it is read again.
func TestPodMemoryDoesNotFallOnAnUnreadDevice(t *testing.T) {
	p := newFakeProc(t)
	p.add(t, "1000", "0::"+systemdSlice("burstable", uidTrain)+"/cri-containerd-x.scope\n")
	n := newPodMemoryNode(t, p, allotPod("train", uidTrain, map[string]string{v1alpha1.AnnotationPodGPUMemoryUsed: "8192"}))
	n.lib.Devices[3].(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	n.use(1024)
	n.sync(t)
	if v, _ := n.reading(t, "train"); v != "8192" {
		t.Errorf("train reads %s with GPU 3 unread, want 8192 kept", v)
	}
	n.use(9216)
	n.sync(t)
	if v, _ := n.reading(t, "train"); v != "9216" {
		t.Errorf("train reads %s, want 9216: a rise is measured even with GPU 3 unread", v)
	}
}

// Without the host's /proc where it was said to be, every process would belong to no pod
// and every pod read 0: nothing is written instead.
func TestPodMemoryWithoutTheHostsProc(t *testing.T) {
	p := fakeProc(filepath.Join(t.TempDir(), "host", "proc"))
	n := newPodMemoryNode(t, p, allotPod("train", uidTrain, map[string]string{v1alpha1.AnnotationPodGPUMemoryUsed: "8192"}))
	n.use(8192)
	if w := n.sync(t); w != 0 {
		t.Errorf("%d writes without a /proc to read", w)
	}
	if err := checkProcRoot(string(p)); err == nil || !strings.Contains(err.Error(), "/host/proc") {
		t.Errorf("checkProcRoot: %v, want it to say where the chart mounts the host's /proc", err)
	}
}

// Only slices of one GPU are written, the pods the scheduler and allot describe read it
// of: a pod given whole GPUs, a MIG instance (laid out by Allot or the device plugin's)
// or a slice of two GPUs holding memory is not.
func TestPodMemoryIsWrittenOnSlicesOfOneGPU(t *testing.T) {
	p := newFakeProc(t)
	uids := []string{uidTrain, uidNotebook, uidServe, "44444444-2222-3333-4444-555555555555", "55555555-2222-3333-4444-555555555555"}
	for i, uid := range uids {
		p.add(t, strconv.Itoa(1000+i), "0::"+systemdSlice("burstable", uid)+"/cri-containerd-x.scope\n")
	}
	whole := allotPod("whole", uids[1], nil)
	whole.Annotations = nil
	whole.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("1")}}}}
	static := allotPod("static", uids[2], nil)
	static.Annotations = nil
	static.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}}}}
	dynamic := allotPod("dynamic", uids[3], map[string]string{v1alpha1.AnnotationMIG: "3g.40gb"})
	delete(dynamic.Annotations, v1alpha1.AnnotationGPUMemoryLimit)
	two := allotPod("two", uids[4], map[string]string{v1alpha1.AnnotationGPUCount: "2"})
	delete(two.Annotations, v1alpha1.AnnotationGPUMemoryLimit)
	n := newPodMemoryNode(t, p, allotPod("slice", uids[0], nil), whole, static, dynamic, two)
	n.use(2048, 2048, 2048, 2048, 2048)
	if w := n.sync(t); w != 1 {
		t.Errorf("%d writes, want 1 (the slice's)", w)
	}
	if v, _ := n.reading(t, "slice"); v != "2048" {
		t.Errorf("the slice reads %q, want 2048", v)
	}
	for _, name := range []string{"whole", "static", "dynamic", "two"} {
		if v, ok := n.reading(t, name); ok {
			t.Errorf("%s was written %s: no one reads it of such a pod", name, v)
		}
	}
}
