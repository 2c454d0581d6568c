package stack_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode/kubeletdm"
	"github.com/allot-dev/allot/kube/stack"
)

// The node's devices are handed out by the kubelet's own device manager, which our
// simulated NVIDIA plugin registered with over the device-plugin API, and read back through
// the kubelet's own PodResources server: whole-GPU pods and a 0.5 + 0.5 pair get the
// devices the manager chose, and the scheduler's books follow those, whatever index Allot
// preferred: each pod's record and allot top nodes show the manager's devices, the pair
// halves each start on their reservation's device and are booked there (one reservation
// when they are placed in one cycle, two when the second comes a cycle later), and a last
// pod is booked on exactly the devices the manager still has free.
//
//	dgx-1, 6 GPUs: train ×2 · one ×1 · nb-1 0.5 + nb-2 0.5 (on the reservation's device) · last ×2
func TestKubeletDeviceManagerHandsOutTheDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kubelet's device manager serves only at /var/lib/kubelet/device-plugins/kubelet.sock: needs root (CI runs as root)")
	}
	e, devices := kubetest.StartWithDevices(t, 1, 6, "")
	m := devices.Machine("dgx-1")
	var uuids []string
	for g := range 6 {
		uuids = append(uuids, m.UUID(g))
	}
	k, err := kubeletdm.Start(e.Ctx, uuids, devices.Socket("dgx-1")+".kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	devices.UseKubelet("dgx-1", k)
	if err := devices.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 6, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "train", Queue: "team-a", GPUs: 2})
	e.MustPod(t, kubetest.PodSpec{Name: "one", Queue: "team-a", GPUs: 1})
	e.MustPod(t, fraction("nb-1", "0.5"))
	e.MustPod(t, fraction("nb-2", "0.5"))
	e.WaitFor(t, "all four running, the whole-GPU pods' devices recorded", func() (bool, string) {
		pods := e.Pods(t, "default")
		var state []string
		ok := true
		for _, name := range []string{"train", "one", "nb-1", "nb-2"} {
			p := pods[name]
			rec := ""
			if p != nil {
				rec = p.Annotations[v1alpha1.AnnotationGPUDevices]
			}
			ok = ok && kubetest.Running(p) && (strings.HasPrefix(name, "nb") || rec != "")
			state = append(state, fmt.Sprintf("%s %v %q", name, p != nil && kubetest.Running(p), rec))
		}
		return ok, strings.Join(state, ", ")
	})

	// What the kubelet's manager gave, read from its PodResources server.
	client, closeConn, err := agent.DialPodResources(k.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	inv, err := agent.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	given, err := agent.GivenDevices(e.Ctx, client, inv)
	if err != nil {
		t.Fatal(err)
	}
	indexOf := func(u string) int { return slices.Index(uuids, u) }
	books := func() map[string][]int { // pod → indices the scheduler's occupancy shows
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		occ, err := scheduler.ParseOccupancy(n)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]int{}
		for _, g := range occ.GPUs {
			for _, h := range g.Holders {
				out[h.Pod] = append(out[h.Pod], g.Index)
			}
		}
		for _, v := range out {
			sort.Ints(v)
		}
		return out
	}
	pods := e.Pods(t, "default")
	for _, name := range []string{"train", "one"} {
		want := given[agent.PodKey{Namespace: "default", Name: name}]
		var got []int
		for _, u := range want {
			got = append(got, indexOf(u))
		}
		t.Logf("%s: Allot preferred GPUs %s, the kubelet's manager gave %v", name, pods[name].Annotations[v1alpha1.AnnotationGPUs], got)
		if got := strings.Split(pods[name].Annotations[v1alpha1.AnnotationGPUDevices], ","); !slices.Equal(sorted(got), sorted(want)) {
			t.Errorf("%s's record %v, the kubelet's manager gave %v", name, got, want)
		}
		nodes, err := inspect.Nodes(e.Ctx, e.Client)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range want {
			g := nodes[0].GPUs[indexOf(u)]
			if len(g.Holders) != 1 || g.Holders[0].Pod != "default/"+name {
				t.Errorf("allot top nodes shows GPU %d (%s) held by %+v, the kubelet gave it to %s", indexOf(u), u, g.Holders, name)
			}
		}
	}
	// The devices the kubelet gave the reservations: one, when the pair was placed in one
	// cycle; two, when the second half came a cycle after the first and was placed on
	// another GPU (less packed, not wrong: each half on its own reservation's device).
	var reserved []string
	for key, devs := range given {
		if key.Namespace == v1alpha1.SystemNamespace {
			if len(devs) != 1 {
				t.Errorf("reservation %s was given %v, want one device", key.Name, devs)
			}
			reserved = append(reserved, devs...)
		}
	}
	// What a person needs to read a failure below: every reservation and the pair, with
	// what the scheduler booked and what the kubelet gave.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		all, _ := e.Client.CoreV1().Pods("").List(e.Ctx, metav1.ListOptions{})
		for _, p := range all.Items {
			if p.Labels[v1alpha1.LabelReservation] == "true" || strings.HasPrefix(p.Name, "nb-") {
				t.Logf("%s/%s %s node %s gpus %q devices %q deleting %v", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName,
					p.Annotations[v1alpha1.AnnotationGPUs], p.Annotations[v1alpha1.AnnotationGPUDevices], p.DeletionTimestamp != nil)
			}
		}
		t.Logf("the kubelet gave %v; devices by index %v", given, uuids)
	})
	if len(reserved) < 1 || len(reserved) > 2 {
		t.Fatalf("the kubelet gave reservations %v, want one or two devices for the pair", given)
	}
	for _, name := range []string{"nb-1", "nb-2"} {
		env := e.ContainerEnv(t, pods[name], pods[name].Spec.Containers[0].Name)
		dev := env["NVIDIA_VISIBLE_DEVICES"]
		if !slices.Contains(reserved, dev) {
			t.Errorf("%s starts on %q, which no reservation holds in the kubelet's books (they hold %v)", name, dev, reserved)
			continue
		}
		e.WaitFor(t, name+" booked on its reservation's device", func() (bool, string) {
			b := books()
			return slices.Equal(b["default/"+name], []int{indexOf(dev)}), fmt.Sprint(b)
		})
	}

	// What is free in the kubelet's books (two devices, or one where the pair took two
	// reservations): the scheduler books the last pod on exactly those.
	free := int64(6 - 3 - len(reserved))
	e.MustPod(t, kubetest.PodSpec{Name: "last", Queue: "team-a", GPUs: free})
	e.WaitFor(t, "last running with its devices recorded", func() (bool, string) {
		p := e.Pods(t, "default")["last"]
		return kubetest.Running(p) && p.Annotations[v1alpha1.AnnotationGPUDevices] != "", fmt.Sprint(p.Status.Phase, p.Annotations)
	})
	last := e.Pods(t, "default")["last"]
	var recorded []string
	for _, u := range strings.Split(last.Annotations[v1alpha1.AnnotationGPUDevices], ",") {
		recorded = append(recorded, fmt.Sprint(indexOf(u)))
	}
	if booked := strings.Split(last.Annotations[v1alpha1.AnnotationGPUs], ","); !slices.Equal(sorted(booked), sorted(recorded)) {
		t.Errorf("last booked on GPUs %v, the kubelet gave it %v: the scheduler's books did not follow the earlier pods' devices", booked, recorded)
	}
}

func sorted(v []string) []string {
	out := slices.Clone(v)
	sort.Strings(out)
	return out
}
