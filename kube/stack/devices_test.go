package stack_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume/util/subpath"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
	"k8s.io/mount-utils"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// startWithAgents brings up the whole stack on nodes whose GPUs, device plugin, kubelet
// PodResources API and allot agent are simulated (kubetest.StartWithAgents).
func startWithAgents(t *testing.T, nodes, gpus int, sharing string) (*kubetest.Env, *simnode.Devices, string) {
	t.Helper()
	e, devices := kubetest.StartWithAgents(t, nodes, gpus, sharing)
	r, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e, devices, r.MetricsURL
}

func nodeUUIDs(t *testing.T, e *kubetest.Env, node string) []string {
	t.Helper()
	var uuids []string
	e.WaitFor(t, "the agent's inventory of "+node, func() (bool, string) {
		n, err := e.Client.CoreV1().Nodes().Get(e.Ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		uuids = strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
		return n.Annotations[v1alpha1.AnnotationAgent] != "" && n.Annotations[v1alpha1.AnnotationGPUInventory] != "", fmt.Sprint(n.Annotations)
	})
	return uuids
}

// One node of four GPUs whose device plugin hands out the highest free device first, the
// scheduler preferring the lowest: the two halves go where their reservation really is.
//
//	scheduler prefers: GPU 0 for the halves     device plugin gives the reservation: GPU 3
//	then a whole GPU (given GPU 2), then another half on a new shared GPU (given GPU 1)
func TestSharedPodsFollowTheReservationsRealDevice(t *testing.T) {
	e, _, metrics := startWithAgents(t, 1, 4, "")
	uuids := nodeUUIDs(t, e, "dgx-1")
	e.Queue(t, "team-a", 4, nil)
	e.MustPod(t, fraction("nb-1", "0.5"))
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "both halves running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 2, fmt.Sprintf("%d running", n)
	})
	res := e.Pods(t, v1alpha1.SystemNamespace)
	r := res["allot-reservation-dgx-1-gpu0"]
	if len(res) != 1 || r == nil {
		t.Fatalf("reservations %v, want the one made for GPU 0", reservations(t, e))
	}
	if got := r.Annotations[v1alpha1.AnnotationGPUDevices]; got != uuids[3] {
		t.Fatalf("the reservation's recorded device is %q, want GPU 3's %s (the device plugin's choice)", got, uuids[3])
	}
	for _, name := range []string{"nb-1", "nb-2"} {
		_, index, env := gpuOf(t, e, name)
		if index != "3" || env["NVIDIA_VISIBLE_DEVICES"] != uuids[3] {
			t.Errorf("%s on GPU %s with NVIDIA_VISIBLE_DEVICES=%s, want GPU 3 (%s), the reservation's real device", name, index, env["NVIDIA_VISIBLE_DEVICES"], uuids[3])
		}
	}
	e.WaitFor(t, "both halves counted as adopting the device plugin's choice", func() (bool, string) {
		m := scrape(t, metrics)
		return strings.Contains(m, `allot_device_choices_adopted_total{kind="shared"} 2`), m
	})

	// A whole GPU: the scheduler books GPU 0, the device plugin gives GPU 2; the books
	// follow the record, so the next shared GPU is made on GPU 0 and really given GPU 1.
	e.MustPod(t, kubetest.PodSpec{Name: "train", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "train's devices recorded", func() (bool, string) {
		p := e.Pods(t, "default")["train"]
		return p != nil && p.Annotations[v1alpha1.AnnotationGPUDevices] == uuids[2], fmt.Sprint(p.Annotations)
	})
	e.MustPod(t, fraction("nb-3", "0.5"))
	e.WaitFor(t, "a third half running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["nb-3"]), "" })
	if _, index, env := gpuOf(t, e, "nb-3"); index != "1" || env["NVIDIA_VISIBLE_DEVICES"] != uuids[1] {
		t.Errorf("nb-3 on GPU %s (%s), want GPU 1 (%s): the only device free in fact", index, env["NVIDIA_VISIBLE_DEVICES"], uuids[1])
	}
	if names := reservations(t, e); len(names) != 2 {
		t.Errorf("reservations %v, want two (one per shared GPU)", names)
	}
	// What people see follows the devices too: allot top nodes' layout.
	nodes, err := inspect.Nodes(e.Ctx, e.Client)
	if err != nil {
		t.Fatal(err)
	}
	layout := map[int]string{}
	for _, g := range nodes[0].GPUs {
		var who []string
		for _, h := range g.Holders {
			who = append(who, h.Pod)
		}
		layout[g.Index] = strings.Join(who, " ")
	}
	want := map[int]string{0: "", 1: "default/nb-3", 2: "default/train", 3: "default/nb-1 default/nb-2"}
	for g, w := range want {
		if layout[g] != w {
			t.Errorf("GPU %d holds %q, want %q (layout %v)", g, layout[g], w, layout)
		}
	}
}

// A GPU that fails (XID 79 on the simulated node) is reported by the agent, its pod gets
// an Event, the scheduler places nothing more on it, and allot top nodes shows it.
func TestFailedGPUIsAvoidedAndItsPodsTold(t *testing.T) {
	e, _, _ := startWithAgents(t, 1, 4, "")
	uuids := nodeUUIDs(t, e, "dgx-1")
	e.Queue(t, "team-a", 4, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "victim", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "victim's device recorded", func() (bool, string) {
		p := e.Pods(t, "default")["victim"]
		return p != nil && p.Annotations[v1alpha1.AnnotationGPUDevices] == uuids[3], fmt.Sprint(p.Annotations)
	})
	patch := []byte(`{"metadata":{"annotations":{"` + simnode.AnnotationFailGPU + `":"3"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "GPU 3 reported failed", func() (bool, string) {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		bad, err := v1alpha1.ParseUnhealthy(n.Annotations[v1alpha1.AnnotationGPUUnhealthy])
		return err == nil && len(bad) == 1 && bad[0].Index == 3 && bad[0].UUID == uuids[3] && bad[0].Reason == "XID 79 (GPU has fallen off the bus)", fmt.Sprint(bad, err)
	})
	e.WaitFor(t, "an Event on victim", func() (bool, string) {
		ev := e.Events(t, "default", "victim")
		for _, m := range ev {
			if strings.Contains(m, "GPUUnhealthy") && strings.Contains(m, "GPU 3 ("+uuids[3]+") on node dgx-1 failed: XID 79") {
				return true, ""
			}
		}
		return false, fmt.Sprint(ev)
	})
	e.MustPod(t, kubetest.PodSpec{Name: "three", Queue: "team-a", GPUs: 3})
	e.WaitFor(t, "three running on the healthy GPUs", func() (bool, string) {
		p := e.Pods(t, "default")["three"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Conditions)
	})
	p := e.Pods(t, "default")["three"]
	if idx := p.Annotations[v1alpha1.AnnotationGPUs]; strings.Contains(idx, "3") {
		t.Errorf("three booked on GPUs %s, which include the failed one", idx)
	}
	e.WaitFor(t, "three's devices recorded", func() (bool, string) {
		p := e.Pods(t, "default")["three"]
		rec := p.Annotations[v1alpha1.AnnotationGPUDevices]
		return rec != "" && !strings.Contains(rec, uuids[3]), rec
	})
	nodes, err := inspect.Nodes(e.Ctx, e.Client)
	if err != nil {
		t.Fatal(err)
	}
	if g := nodes[0].GPUs[3]; g.Unhealthy != "XID 79 (GPU has fallen off the bus)" {
		t.Errorf("allot top nodes shows GPU 3 as %+v, want it failed with XID 79", g)
	}
}

// A node whose agent declares sharing "none": pods may share there, and the pod's Event
// and the node's listing say that limits are not enforced; a hard memory cap waits.
func TestUnenforcedSharingIsSaid(t *testing.T) {
	e, _, _ := startWithAgents(t, 1, 2, v1alpha1.SharingNone)
	nodeUUIDs(t, e, "dgx-1")
	e.Queue(t, "team-a", 2, nil)
	e.MustPod(t, fraction("nb", "0.5"))
	e.MustPod(t, kubetest.PodSpec{Name: "capped", Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUMemory: "20Gi"}})
	e.WaitFor(t, "nb running with the warning in its Event", func() (bool, string) {
		if !kubetest.Running(e.Pods(t, "default")["nb"]) {
			return false, "not running"
		}
		ev := strings.Join(e.Events(t, "default", "nb"), "\n")
		return strings.Contains(ev, v1alpha1.SharingNotEnforced), ev
	})
	e.WaitFor(t, "capped waiting with the reason", func() (bool, string) {
		p := e.Pods(t, "default")["capped"]
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && strings.Contains(c.Message, "cannot enforce one (allot.dev/gpu-sharing=none)") {
				return p.Spec.NodeName == "", ""
			}
		}
		return false, fmt.Sprint(p.Status.Conditions)
	})
	nodes, err := inspect.Nodes(e.Ctx, e.Client)
	if err != nil {
		t.Fatal(err)
	}
	if nodes[0].Sharing != v1alpha1.SharingNone || nodes[0].SharingWarning != v1alpha1.SharingNotEnforced {
		t.Errorf("node listing %+v, want sharing none with the warning", nodes[0])
	}
}

// halfOnAMarkedNode is one node of two GPUs with no device plugin and no agent, made to
// look as if an agent ran there (live or not), the whole stack with a 2 s device-report
// timeout, and a half-GPU pod nb submitted.
func halfOnAMarkedNode(t *testing.T, live bool) *kubetest.Env {
	t.Helper()
	e := kubetest.Start(t, 1, 2)
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond, DeviceReportTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	markAgent(t, e, live)
	e.Queue(t, "team-a", 2, nil)
	e.MustPod(t, fraction("nb", "0.5"))
	return e
}

// markAgent makes dgx-1 look as if an agent ran there: the node's mark, and, when live,
// a Lease renewed a moment ago for a minute.
func markAgent(t *testing.T, e *kubetest.Env, live bool) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationAgent + `":"gone"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if !live {
		return
	}
	e.WaitFor(t, "Allot's namespace", func() (bool, string) {
		_, err := e.Client.CoreV1().Namespaces().Get(e.Ctx, v1alpha1.SystemNamespace, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	now, secs, holder := metav1.NewMicroTime(time.Now()), int32(60), "dgx-1/test"
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName("dgx-1"), Namespace: v1alpha1.SystemNamespace,
		Labels: map[string]string{v1alpha1.LabelAgentLease: "dgx-1"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now}}
	if _, err := e.Client.CoordinationV1().Leases(v1alpha1.SystemNamespace).Create(e.Ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A node whose agent is alive (its Lease fresh) but never reports the reservation's
// device: the shared pod is not bound to a guessed device; it gets an Event and a reason,
// and stays pending.
func TestMissingDeviceReportLeavesThePodUnbound(t *testing.T) {
	e := halfOnAMarkedNode(t, true)
	e.WaitFor(t, "an Event and a reason on nb", func() (bool, string) {
		p := e.Pods(t, "default")["nb"]
		ev := strings.Join(e.Events(t, "default", "nb"), "\n")
		reason := waitingReason(p)
		want := "had no device reported by the node's allot agent within 2s"
		return strings.Contains(ev, "DeviceNotReported") && strings.Contains(ev, want) && strings.Contains(reason, want), ev + " | " + reason
	})
	if p := e.Pods(t, "default")["nb"]; p.Spec.NodeName != "" {
		t.Errorf("nb bound to %s without its device known", p.Spec.NodeName)
	}
}

// An agent that crashed or was uninstalled leaves its mark on the Node but renews no
// Lease: a shared pod is then placed by index, as on a node without an agent, and told
// so, rather than waiting for reports that will never come.
func TestStaleAgentMarkPlacesByIndex(t *testing.T) {
	e := halfOnAMarkedNode(t, false)
	e.WaitFor(t, "nb running, told its device was not checked", func() (bool, string) {
		ev := strings.Join(e.Events(t, "default", "nb"), "\n")
		return kubetest.Running(e.Pods(t, "default")["nb"]) && strings.Contains(ev, "AgentNotReporting") &&
			strings.Contains(ev, "placed by index"), ev
	})
}

// enforcedCluster is one node of two GPUs whose agent enforces sharing with mode, sharing
// root and all, with the whole stack (its webhook mounting the root into sharing pods).
func enforcedCluster(t *testing.T, mode string, devices func(*simnode.Devices)) (*kubetest.Env, string) {
	t.Helper()
	root := t.TempDir()
	e, d := kubetest.StartWithDevices(t, 1, 2, mode)
	d.SharingRoot = root
	devices(d)
	if err := d.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond, SharingRoot: root}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 2, nil)
	return e, root
}

// sharingPodsRun starts two halves and returns their common environment, checking the
// webhook mounted what they use of the sharing root into them.
func sharingPodsRun(t *testing.T, e *kubetest.Env, root string) map[string]string {
	t.Helper()
	e.MustPod(t, fraction("nb-1", "0.5"))
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "both halves running", func() (bool, string) {
		n := e.Count(t, "default", kubetest.Running)
		return n == 2, fmt.Sprintf("%d running", n)
	})
	p := e.Pods(t, "default")["nb-1"]
	// Of the sharing root, HAMi-core's directory and the MPS directory the bind names,
	// never the root itself.
	hamiCore, mpsDir, whole := false, false, false
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == root {
			for _, m := range p.Spec.Containers[0].VolumeMounts {
				if m.Name != v.Name {
					continue
				}
				hamiCore = hamiCore || (m.MountPath == root+"/hami-core" && m.SubPath == "hami-core")
				mpsDir = mpsDir || (m.MountPath == v1alpha1.MPSClientDir(root) && m.SubPathExpr == "$(ALLOT_MPS_DIR)")
				whole = whole || (m.MountPath == root && m.SubPath == "" && m.SubPathExpr == "")
			}
		}
	}
	if !hamiCore || !mpsDir || whole {
		t.Errorf("nb-1 mounts of the sharing root %s: hami-core %v, its MPS directory %v, the whole root %v; volumes %+v", root, hamiCore, mpsDir, whole, p.Spec.Volumes)
	}
	_, _, env := gpuOf(t, e, "nb-1")
	return env
}

// devShm is the host directory the kubelet would mount as the named pod's first
// container's /dev/shm, made by the kubelet's own code as it makes a subPathExpr mount: the
// expression expanded with the container's environment (the bind's annotations, read
// through the downward API), the directory made with the mode of the volume's.
func devShm(t *testing.T, e *kubetest.Env, name string) (string, os.FileInfo) {
	t.Helper()
	p := e.Pods(t, "default")[name]
	c := p.Spec.Containers[0]
	env := e.ContainerEnv(t, p, c.Name)
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/dev/shm" {
			continue
		}
		var base string
		for _, v := range p.Spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				base = v.HostPath.Path
			}
		}
		sub := expansion.Expand(m.SubPathExpr, expansion.MappingFuncFor(env))
		if base == "" || sub == "" || filepath.IsAbs(sub) || strings.Contains(sub, "..") {
			t.Fatalf("%s's /dev/shm: volume %q at %q (%q expanded), want a host directory and a relative subdirectory", name, base, sub, m.SubPathExpr)
		}
		info, err := os.Stat(base)
		if err != nil {
			t.Fatal(err)
		}
		if err := subpath.New(mount.New("")).SafeMakeDir(sub, base, info.Mode()); err != nil {
			t.Fatalf("the kubelet could not make %s's /dev/shm: %v", name, err)
		}
		dir := filepath.Join(base, sub)
		made, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return dir, made
	}
	t.Fatalf("%s has no /dev/shm mount: %+v", name, c.VolumeMounts)
	return "", nil
}

// checkDevShm checks where the halves' /dev/shm is: one directory, the MPS daemons', on an
// mps node; one each elsewhere. Either is writable by any user and keeps each one's files
// from the others, as /dev/shm is.
func checkDevShm(t *testing.T, e *kubetest.Env, root string, shared bool) {
	t.Helper()
	one, info1 := devShm(t, e, "nb-1")
	two, info2 := devShm(t, e, "nb-2")
	for _, info := range []os.FileInfo{info1, info2} {
		if info.Mode()&(os.ModeSticky|os.ModePerm) != os.ModeSticky|0o777 {
			t.Errorf("%s's mode is %v, want /dev/shm's drwxrwxrwt", info.Name(), info.Mode())
		}
	}
	if shared && (one != two || one != root+"/shm/mps") {
		t.Errorf("the halves' /dev/shm are %s and %s, want the MPS daemons' %s/shm/mps", one, two, root)
	}
	uid := e.Pods(t, "default")["nb-1"].UID
	if !shared && (one == two || one != root+"/shm/pod-"+string(uid)) {
		t.Errorf("the halves' /dev/shm are %s and %s, want each its own (nb-1's %s/shm/pod-%s)", one, two, root, uid)
	}
}

// hami-core: the agent puts the admin's libvgpu.so under the sharing root, and the
// halves' environment preloads it.
func TestHAMiCoreSharingIsPreloaded(t *testing.T) {
	lib := t.TempDir() + "/libvgpu.so"
	if err := os.WriteFile(lib, []byte("\x7fELF stand-in for HAMi-core's library"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, root := enforcedCluster(t, v1alpha1.SharingHAMiCore, func(d *simnode.Devices) { d.HAMiCoreLibrary = lib })
	env := sharingPodsRun(t, e, root)
	if env["ALLOT_GPU_SHARING"] != "hami-core" || env["CUDA_DEVICE_MEMORY_LIMIT"] != "40960m" {
		t.Errorf("environment %v, want HAMi-core's 40960m cap", env)
	}
	checkDevShm(t, e, root, false)
	// Said where people look: HAMi-core holds cooperative processes only.
	if nodes, err := inspect.Nodes(e.Ctx, e.Client); err != nil || len(nodes) != 1 || nodes[0].SharingWarning != v1alpha1.SharingOnTrust {
		t.Errorf("node listing %+v (%v), want hami-core's on-trust warning", nodes, err)
	}
	if _, set := env["LD_PRELOAD"]; set {
		t.Errorf("LD_PRELOAD is set (%q): a process could empty it for its children", env["LD_PRELOAD"])
	}
	// The loader's own list, read-only: what the container's /etc/ld.so.preload is.
	p := e.Pods(t, "default")["nb-1"]
	var preload *corev1.VolumeMount
	for i, m := range p.Spec.Containers[0].VolumeMounts {
		if m.MountPath == "/etc/ld.so.preload" {
			preload = &p.Spec.Containers[0].VolumeMounts[i]
		}
	}
	if preload == nil || !preload.ReadOnly || preload.SubPath != v1alpha1.PreloadListPath {
		t.Fatalf("nb-1's /etc/ld.so.preload is %+v, want the sharing root's %s, read-only", preload, v1alpha1.PreloadListPath)
	}
	if b, err := os.ReadFile(root + "/" + preload.SubPath); err != nil || string(b) != root+"/hami-core/libvgpu.so\n" {
		t.Errorf("the preload list holds %q (%v), want HAMi-core's library under the sharing root", b, err)
	}
	if b, err := os.ReadFile(root + "/hami-core/libvgpu.so"); err != nil || !strings.Contains(string(b), "stand-in") {
		t.Errorf("the library is not under the sharing root: %v", err)
	}
}

// hami-core without its library: the node declares none, says why, and takes no pod asking
// a hard memory cap.
func TestHAMiCoreWithoutItsLibraryDeclaresNone(t *testing.T) {
	e, _ := enforcedCluster(t, v1alpha1.SharingHAMiCore, func(d *simnode.Devices) { d.HAMiCoreLibrary = "/nonexistent/libvgpu.so" })
	e.WaitFor(t, "the node labelled none with an Event", func() (bool, string) {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		evs, _ := e.Client.CoreV1().Events("default").List(e.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=SharingNotEnforced"})
		return n.Labels[v1alpha1.LabelGPUSharing] == v1alpha1.SharingNone && evs != nil && len(evs.Items) == 1 &&
			strings.Contains(evs.Items[0].Message, "HAMi-core's library is not there to preload"), fmt.Sprint(n.Labels, evs)
	})
}

// mps: the agent runs an MPS control daemon for the shared GPU, seeing only that GPU, with
// its pipes where the halves are pointed, holds it to the halves' share, and stops it when
// the GPU is no longer shared. (kube/agent's MPS tests run a stand-in that speaks the
// control commands; this one only records how it is called.)
// NVIDIA publishes no fake of nvidia-cuda-mps-control: a stand-in script records how it is
// invoked (environment, arguments, input), which is the contract checked here.
func TestMPSDaemonPerSharedGPU(t *testing.T) {
	bin := t.TempDir()
	log := bin + "/calls"
	script := "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $* $(cat)\" >> " + log + "\n"
	if err := os.WriteFile(bin+"/nvidia-cuda-mps-control", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e, root := enforcedCluster(t, v1alpha1.SharingMPS, func(d *simnode.Devices) { d.MPSControl = bin + "/nvidia-cuda-mps-control" })
	env := sharingPodsRun(t, e, root)
	uuid := env["NVIDIA_VISIBLE_DEVICES"]
	// The daemon's pipes on the host; the container sees its GPU's directory alone, at
	// MPSClientDir.
	pipe := root + "/mps/" + uuid + "/pipe"
	if env["CUDA_MPS_PIPE_DIRECTORY"] != v1alpha1.MPSClientDir(root)+"/pipe" || env["ALLOT_MPS_DIR"] != "mps/"+uuid ||
		env["ALLOT_GPU_SHARING"] != "mps" || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" {
		t.Errorf("environment %v, want the pipes of %s's daemon, mounted at %s", env, uuid, v1alpha1.MPSClientDir(root))
	}
	checkDevShm(t, e, root, true)
	calls := func() string { b, _ := os.ReadFile(log); return string(b) }
	e.WaitFor(t, "the daemon started for the shared GPU", func() (bool, string) {
		return strings.Contains(calls(), uuid+" "+pipe+" -d"), calls()
	})
	for _, name := range []string{"nb-1", "nb-2"} {
		if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitFor(t, "the daemon stopped once the GPU is not shared", func() (bool, string) {
		return strings.Contains(calls(), uuid+" "+pipe+"  quit"), calls()
	})
	if n := strings.Count(calls(), uuid+" "+pipe+" -d"); n != 1 {
		t.Errorf("%d daemons started for one shared GPU:\n%s", n, calls())
	}
	// Held to the halves' share, whatever a client sets (its own settings only narrow these).
	for _, want := range []string{"set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 40960M"} {
		if !strings.Contains(calls(), want) {
			t.Errorf("the daemon was not sent %q:\n%s", want, calls())
		}
	}
}
