package stack_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// sliceOfTwo is a pod asking 10Gi of each of two GPUs.
func sliceOfTwo(name string) kubetest.PodSpec {
	return kubetest.PodSpec{Name: name, Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUMemory: "10Gi", v1alpha1.AnnotationGPUCount: "2"}}
}

// reservationDevices is each live reservation's GPU index it was made for and its
// reported device, by name.
func reservationDevices(t *testing.T, e *kubetest.Env) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	for name, p := range e.Pods(t, v1alpha1.SystemNamespace) {
		if v1alpha1.IsReservation(p) && p.DeletionTimestamp == nil {
			out[name] = [2]string{p.Annotations[v1alpha1.AnnotationGPUs], p.Annotations[v1alpha1.AnnotationGPUDevices]}
		}
	}
	return out
}

// One hami-core node of four GPUs whose agent reports the devices its (simulated) device
// plugin gives, the highest free first, while the scheduler prefers the lowest:
//
//	pair (2 × 10Gi): preferred GPUs 0,1; their reservations are given GPUs 3 and 2
//	pair-2 (2 × 10Gi): beside it, on GPUs 2,3, held by the same two reservations
//
// Each slice runs on the devices its GPUs' reservations really hold: its indices (pair's
// in the order of the GPUs its reservations were made for), its containers' devices in
// the order of its indices, each held to 10240m, and the node's occupancy all name GPUs 2
// and 3, and no reservation is made for a third device.
func TestSliceOfSeveralGPUsFollowsItsReservations(t *testing.T) {
	lib := t.TempDir() + "/libvgpu.so"
	if err := os.WriteFile(lib, []byte("\x7fELF stand-in for HAMi-core's library"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	e, d := kubetest.StartWithDevices(t, 1, 4, v1alpha1.SharingHAMiCore)
	d.SharingRoot, d.HAMiCoreLibrary = root, lib
	if err := d.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	r, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond, SharingRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	uuids := nodeUUIDs(t, e, "dgx-1")
	e.Queue(t, "team-a", 4, nil)
	running := func(name string) {
		t.Helper()
		e.WaitFor(t, name+" running", func() (bool, string) {
			p := e.Pods(t, "default")[name]
			return kubetest.Running(p), fmt.Sprint(p.Status.Conditions, reservationDevices(t, e))
		})
	}
	// The index of the device each reservation reports, by the GPU it was made for.
	given := func() map[int]int {
		t.Helper()
		out := map[int]int{}
		for name, rd := range reservationDevices(t, e) {
			made, real := convert.Indices(rd[0]), slices.Index(uuids, rd[1])
			if len(made) != 1 || real < 0 {
				t.Fatalf("reservation %s made for GPU %q reports device %q, not one of the node's %v", name, rd[0], rd[1], uuids)
			}
			out[made[0]] = real
		}
		return out
	}

	e.MustPod(t, sliceOfTwo("pair"))
	running("pair")
	g := given()
	if len(g) != 2 || !slices.Equal(slices.Sorted(maps.Values(g)), []int{2, 3}) || g[0] == 0 || g[1] == 1 {
		t.Fatalf("reservations made for GPUs and given devices %v (%v), want those made for GPUs 0 and 1 given GPUs 2 and 3 (the device plugin's choice)", g, reservationDevices(t, e))
	}
	want := map[string][]int{"pair": {g[0], g[1]}, "pair-2": {2, 3}}
	e.WaitFor(t, "pair counted as adopting the device plugin's choice", func() (bool, string) {
		m := scrape(t, r.MetricsURL)
		return strings.Contains(m, `allot_device_choices_adopted_total{kind="shared"} 1`), m
	})

	e.MustPod(t, sliceOfTwo("pair-2"))
	running("pair-2")
	if g2 := given(); len(g2) != 2 || g2[0] != g[0] || g2[1] != g[1] {
		t.Errorf("reservations %v, want only pair's two (%v)", reservationDevices(t, e), g)
	}

	// What each pod is given: the two devices its reservations hold, in the order of its
	// indices, each held to 10Gi.
	for _, name := range []string{"pair", "pair-2"} {
		p := e.Pods(t, "default")[name]
		if got := p.Annotations[v1alpha1.AnnotationGPUs]; got != fmt.Sprintf("%d,%d", want[name][0], want[name][1]) {
			t.Errorf("%s on GPUs %s, want %v (its reservations' devices)", name, got, want[name])
			continue
		}
		env := e.ContainerEnv(t, p, "main")
		for k, v := range map[string]string{
			"NVIDIA_VISIBLE_DEVICES":     uuids[want[name][0]] + "," + uuids[want[name][1]],
			"CUDA_DEVICE_MEMORY_LIMIT":   "10240m",
			"CUDA_DEVICE_MEMORY_LIMIT_0": "10240m",
			"CUDA_DEVICE_MEMORY_LIMIT_1": "10240m",
			"ALLOT_GPU_SHARING":          v1alpha1.SharingHAMiCore,
		} {
			if env[k] != v {
				t.Errorf("%s (GPUs %v) starts with %s=%q, want %q", name, want[name], k, env[k], v)
			}
		}
		if got := p.Annotations[v1alpha1.AnnotationGPUShareMemory]; got != fmt.Sprint(int64(10)<<30) {
			t.Errorf("%s booked %s bytes of each device, want 10Gi", name, got)
		}
	}
	// The node's occupancy, as allot top nodes and the dashboard read it.
	e.WaitFor(t, "the node's occupancy: both slices on GPUs 2 and 3", func() (bool, string) {
		n, err := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		occ, err := convert.ParseOccupancy(n)
		if err != nil || len(occ.GPUs) != 2 {
			return false, fmt.Sprint(n.Annotations[v1alpha1.AnnotationOccupancy], err)
		}
		for i, gpu := range occ.GPUs {
			var who []string
			for _, h := range gpu.Holders {
				who = append(who, fmt.Sprintf("%s:%d", h.Pod, h.Share))
			}
			if gpu.Index != 2+i || gpu.UUID != uuids[gpu.Index] || gpu.Used != 250 || strings.Join(who, " ") != "default/pair:125 default/pair-2:125" {
				return false, fmt.Sprintf("GPU %d (%s) used %d by %v", gpu.Index, gpu.UUID, gpu.Used, who)
			}
		}
		return true, ""
	})
}

// markedSlice is one node of two GPUs with no device plugin and no agent, made to look as
// if a live agent ran there (markAgent), the whole stack with the given device-report
// timeout, and a slice of two GPUs submitted; it returns once both GPUs' reservations
// are there, by the GPU each was made for. The test plays the agent.
func markedSlice(t *testing.T, timeout time.Duration) (*kubetest.Env, []string, map[int]*corev1.Pod) {
	t.Helper()
	e := kubetest.Start(t, 1, 2)
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond, DeviceReportTimeout: timeout}); err != nil {
		t.Fatal(err)
	}
	markAgent(t, e, true)
	n, err := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uuids := strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
	e.Queue(t, "team-a", 2, nil)
	e.MustPod(t, sliceOfTwo("pair"))
	res := map[int]*corev1.Pod{}
	e.WaitFor(t, "both GPUs' reservations", func() (bool, string) {
		res = map[int]*corev1.Pod{}
		for _, p := range e.Pods(t, v1alpha1.SystemNamespace) {
			if v1alpha1.IsReservation(p) {
				res[convert.Indices(p.Annotations[v1alpha1.AnnotationGPUs])[0]] = p
			}
		}
		return len(res) == 2 && res[0] != nil && res[1] != nil && len(uuids) == 2, fmt.Sprint(uuids, reservationDevices(t, e))
	})
	return e, uuids, res
}

// report records device uuid on a reservation, as the node's agent does.
func report(t *testing.T, e *kubetest.Env, p *corev1.Pod, uuid string) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationGPUDevices + `":"` + uuid + `"}}}`)
	if _, err := e.Client.CoreV1().Pods(p.Namespace).Patch(e.Ctx, p.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A slice of two GPUs on a node whose agent reports devices is bound only once both
// GPUs' reservations have reported distinct devices. One never reporting, one refused by
// the kubelet, or both reporting one device: the pod gets an Event and a reason naming
// the reservation (or the two), and stays unbound, given no device, no limits and no
// indices: nothing of the half that did report is handed to it.
func TestSliceWaitsForEveryReservation(t *testing.T) {
	cases := []struct {
		name, event string
		timeout     time.Duration
		act         func(t *testing.T, e *kubetest.Env, uuids []string, res map[int]*corev1.Pod)
		want        func(res map[int]*corev1.Pod, uuids []string) string
	}{
		{"one never reports", "DeviceNotReported", 3 * time.Second,
			func(t *testing.T, e *kubetest.Env, uuids []string, res map[int]*corev1.Pod) {
				report(t, e, res[0], uuids[0])
			},
			func(res map[int]*corev1.Pod, _ []string) string {
				return "placed on dgx-1 GPUs 0,1, but the reservation " + res[1].Name + " holding GPU 1 had no device reported by the node's allot agent within 3s"
			}},
		{"one is refused", "DeviceNotReported", 20 * time.Second,
			func(t *testing.T, e *kubetest.Env, uuids []string, res map[int]*corev1.Pod) {
				report(t, e, res[0], uuids[0])
				p, err := e.Client.CoreV1().Pods(v1alpha1.SystemNamespace).Get(e.Ctx, res[1].Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "UnexpectedAdmissionError", "Allocate failed: no device free"
				if _, err := e.Client.CoreV1().Pods(p.Namespace).UpdateStatus(e.Ctx, p, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			func(res map[int]*corev1.Pod, _ []string) string {
				return "placed on dgx-1 GPUs 0,1, but the reservation " + res[1].Name + " holding GPU 1 failed: Allocate failed: no device free"
			}},
		{"both report one device", "DevicesCollide", 20 * time.Second,
			func(t *testing.T, e *kubetest.Env, uuids []string, res map[int]*corev1.Pod) {
				report(t, e, res[0], uuids[1])
				report(t, e, res[1], uuids[1])
			},
			func(res map[int]*corev1.Pod, uuids []string) string {
				return fmt.Sprintf("placed on dgx-1 GPUs 0,1, but the reservations %s (made for GPU 0) and %s (made for GPU 1) both report device 1 (%s)",
					res[0].Name, res[1].Name, uuids[1])
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, uuids, res := markedSlice(t, c.timeout)
			// Held, not bound, while its reservations have not all reported.
			if p := e.Pods(t, "default")["pair"]; kubetest.Bound(p) {
				t.Fatalf("pair bound to %s before its reservations reported", p.Spec.NodeName)
			}
			c.act(t, e, uuids, res)
			want := c.want(res, uuids)
			e.WaitFor(t, "an Event and a reason on pair", func() (bool, string) {
				p := e.Pods(t, "default")["pair"]
				ev := strings.Join(e.Events(t, "default", "pair"), "\n")
				reason := waitingReason(p)
				return strings.Contains(ev, c.event) && strings.Contains(ev, want) && strings.Contains(reason, want), ev + " | " + reason
			})
			// Nothing handed to it: no node, no indices, no device, no limits, over a
			// few cycles (a placement again waits for the back-off).
			for range 10 {
				p := e.Pods(t, "default")["pair"]
				if p.Spec.NodeName != "" || p.Annotations[v1alpha1.AnnotationGPUs] != "" || p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"] != "" ||
					p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"CUDA_DEVICE_MEMORY_LIMIT_0"] != "" {
					t.Fatalf("pair was given something: node %q, annotations %v", p.Spec.NodeName, p.Annotations)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

// TestSliceOfAllOfAGPUKeepsItsPlace: a slice of all of a GPU's compute (HAMi's gpucores:
// 100) counts below a whole GPU (999 thousandths), so that the next cycles read it back on
// the GPU it was bound to, not as a pod bound by hand on GPU 0, and its reservation stays:
// the GPU is full to everyone else.
func TestSliceOfAllOfAGPUKeepsItsPlace(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "whole", Queue: "team-a", GPUs: 1})
	e.WaitFor(t, "whole running", func() (bool, string) {
		p := e.Pods(t, "default")["whole"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase)
	})
	e.MustPod(t, kubetest.PodSpec{Name: "all", Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUCompute: "100"}})
	e.WaitFor(t, "all running", func() (bool, string) {
		p := e.Pods(t, "default")["all"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase, " ", waitingReason(p))
	})
	all := e.Pods(t, "default")["all"]
	want := e.Pods(t, "default")["whole"].Annotations[v1alpha1.AnnotationGPUs]
	if want == "0" {
		want = "1"
	} else {
		want = "0"
	}
	if got := all.Annotations[v1alpha1.AnnotationGPUs]; got != want || all.Annotations[v1alpha1.AnnotationGPUShare] != "999" ||
		all.Annotations[v1alpha1.AnnotationGPUShareCompute] != "1000" {
		t.Fatalf("all on GPU %s, share %s, compute %s: want GPU %s, 999, 1000", got, all.Annotations[v1alpha1.AnnotationGPUShare],
			all.Annotations[v1alpha1.AnnotationGPUShareCompute], want)
	}
	// Cycles later, no GPU has room: a fraction waits, and the slice's reservation is kept.
	e.MustPod(t, fraction("half", "0.5"))
	e.WaitFor(t, "half waiting for room", func() (bool, string) {
		p := e.Pods(t, "default")["half"]
		r := waitingReason(p)
		return p.Spec.NodeName == "" && strings.Contains(r, "the most free on one GPU is 0"), r
	})
	if len(reservations(t, e)) != 1 {
		t.Fatalf("reservations %v: want the one holding all's GPU", reservations(t, e))
	}
	if got := e.Pods(t, "default")["all"].Annotations[v1alpha1.AnnotationGPUs]; got != want {
		t.Fatalf("all moved to GPU %s", got)
	}
}

// TestOneContainerHoldsThePodsSlice: a sharing pod of two containers holds its slice once.
// The container allot.dev/gpu-container names (the first without it) is given the device
// and the limits; the other is given no GPU. HAMi-core counts per container, so each
// container holding the whole slice would let the pod hold it twice (docs/gpu-nodes.md).
func TestOneContainerHoldsThePodsSlice(t *testing.T) {
	e := start(t, 1, 1)
	e.Queue(t, "team-a", 1, nil)
	for _, c := range []struct {
		name, given string
		ann         map[string]string
	}{
		{"first", "main", nil},
		{"named", "sidecar", map[string]string{v1alpha1.AnnotationGPUContainer: "sidecar"}},
	} {
		p := fraction(c.name, "0.25").Pod()
		for k, v := range c.ann {
			p.Annotations[k] = v
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "cuda"})
		if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		e.WaitFor(t, c.name+" running", func() (bool, string) {
			p := e.Pods(t, "default")[c.name]
			return kubetest.Running(p), fmt.Sprint(p.Status.Phase, " ", p.Spec.NodeName, " ", waitingReason(p), " ", e.Events(t, "default", c.name))
		})
		p = e.Pods(t, "default")[c.name]
		for _, ct := range p.Spec.Containers {
			env := e.ContainerEnv(t, p, ct.Name)
			if ct.Name == c.given {
				if env["CUDA_DEVICE_MEMORY_LIMIT"] == "" || env["NVIDIA_VISIBLE_DEVICES"] == "void" {
					t.Errorf("%s: container %s, given the slice, has %v", c.name, ct.Name, env)
				}
			} else if env["NVIDIA_VISIBLE_DEVICES"] != "void" || env["CUDA_DEVICE_MEMORY_LIMIT"] != "" {
				t.Errorf("%s: container %s, not given the slice, has %v", c.name, ct.Name, env)
			}
		}
	}
	// A name that is no container of the pod is refused, naming them.
	p := fraction("nobody", "0.25").Pod()
	p.Annotations[v1alpha1.AnnotationGPUContainer] = "trainer"
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), `allot.dev/gpu-container: "trainer" is not allowed`) {
		t.Fatalf("a slice given to a container the pod lacks: %v", err)
	}
}
