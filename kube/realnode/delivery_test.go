package realnode_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/realnode"
)

// A fraction on a cdi node gets its one GPU (and the control devices) whichever toolkit
// the GPU Operator runs, NVIDIA's NRI plugin beside Allot's; its sidecar gets none.
//
//	real-1 (hami-core, cdi; NVIDIA NRI plugin 1.19 | 1.20): nb 0.5 [main: one GPU] [side: none]
func TestFractionGetsItsDeviceUnderEachToolkit(t *testing.T) {
	need(t)
	queue(t, "team-cdi", "cdi", 4)
	for _, version := range realnode.Toolkits {
		t.Run(version, func(t *testing.T) {
			withNVIDIANRI(t, version)
			name := "nb-" + version[1:5]
			seen := runAndRead(t, sharingPod("cdi", sanitize(name), "team-cdi", script("main"), script("side")), "main", "side")
			t.Logf("toolkit %s: main sees %v, side sees %v", version, seen["main"].NVIDIA(), seen["side"].NVIDIA())
			if gpus := gpuDevices(seen["main"]); len(gpus) != 1 {
				t.Errorf("toolkit %s: the fraction's container sees GPU devices %v, want exactly one", version, gpus)
			}
			if got := seen["side"].NVIDIA(); len(got) != 0 {
				t.Errorf("toolkit %s: the sidecar sees %v, want no NVIDIA device", version, got)
			}
			reservationHolds(t, gpuDevices(seen["main"]))
		})
	}
}

// reservationHolds checks that the device a fraction's container sees (/dev/nvidiaN, the
// GPU of index N) is the one a reservation pod was given by the real kubelet, as
// the agent read it from the kubelet's PodResources API: the fraction runs on a GPU the
// kubelet will not hand to another pod.
func reservationHolds(t *testing.T, devs []string) {
	t.Helper()
	if len(devs) != 1 {
		return
	}
	var index int
	fmt.Sscanf(devs[0], "nvidia%d", &index)
	uuid := machine.UUID(index)
	// Given by the kubelet (allocated at its admission, what the agent read from the
	// PodResources API), whether or not its pause container is up yet: that is what keeps
	// the device from another pod.
	var last []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelReservation + "=true"})
		if err != nil {
			return false, nil // asked again: a slow answer on a loaded machine is not the point
		}
		last = last[:0]
		for _, p := range pods.Items {
			last = append(last, fmt.Sprintf("%s %s %q", p.Name, p.Status.Phase, p.Annotations[v1alpha1.AnnotationGPUDevices]))
			if p.DeletionTimestamp == nil && strings.Contains(p.Annotations[v1alpha1.AnnotationGPUDevices], uuid) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no reservation pod was given %s (/dev/%s) by the kubelet: %v; reservations: %v", uuid, devs[0], err, last)
	}
}

// gpuDevices are the /dev/nvidiaN a container sees (not the control devices).
func gpuDevices(s Seen) []string {
	var out []string
	for _, d := range s.NVIDIA() {
		if d != "nvidiactl" && d != "nvidia-uvm" && d != "nvidia-uvm-tools" && d != "nvidia-caps" {
			out = append(out, d)
		}
	}
	return out
}

func sanitize(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == '.' {
			out[i] = '-'
		}
	}
	return string(out)
}

// The agent's pod (Allot's namespace) is given every GPU of the node and the driver's
// control devices by Allot's NRI plugin, from the annotation the chart writes, whichever
// toolkit runs; NVIDIA's annotation, which the chart wrote before, reaches nothing from
// allot-system on either (1.19: no pod outside the operator's namespace; 1.20: no
// management device outside the namespaces an admin lists).
//
//	real-1: allot-system/agent [agent: cdi.allot.dev -> all] [legacy: nvidia.cdi.k8s.io -> nothing]
func TestAgentGetsManagementDevicesUnderEachToolkit(t *testing.T) {
	need(t)
	for _, version := range realnode.Toolkits {
		t.Run(version, func(t *testing.T) {
			withNVIDIANRI(t, version)
			p := shellPod(v1alpha1.SystemNamespace, "agent-"+sanitize(version[1:5]), script("agent"), script("legacy"))
			p.Annotations = map[string]string{
				v1alpha1.AnnotationCDIPrefix + "agent":           "management.nvidia.com/gpu=all",
				v1alpha1.AnnotationNRIContainerPrefix + "legacy": "management.nvidia.com/gpu=all",
			}
			seen := runAndRead(t, p, "agent", "legacy")
			t.Logf("toolkit %s: agent sees %v; by NVIDIA's annotation: %v", version, seen["agent"].NVIDIA(), seen["legacy"].NVIDIA())
			if got := gpuDevices(seen["agent"]); len(got) != 4 || !slices.Contains(seen["agent"].Dev, "nvidiactl") || !slices.Contains(seen["agent"].Dev, "nvidia-caps") {
				t.Errorf("toolkit %s: the agent's container sees %v, want all 4 GPUs, nvidiactl and nvidia-caps", version, seen["agent"].NVIDIA())
			}
			if got := seen["legacy"].NVIDIA(); len(got) != 0 {
				t.Errorf("toolkit %s: NVIDIA's annotation from %s gave %v: the chart would not need Allot's plugin", version, v1alpha1.SystemNamespace, got)
			}
		})
	}
}

// A tenant's pod naming management devices for Allot's plugin (past the chart's CDI guard,
// which refuses the annotation outside Allot's namespace) is not created: the plugin
// refuses the container rather than start it with every GPU of the node.
func TestTenantCannotTakeManagementDevices(t *testing.T) {
	need(t)
	p := shellPod("tenant-mgmt", "grab", script("main"))
	p.Annotations = map[string]string{v1alpha1.AnnotationCDIPrefix + "main": "management.nvidia.com/gpu=all"}
	ctx := context.Background()
	_, _ = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}, metav1.CreateOptions{})
	if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = realnode.PodState(cur)
		for _, cs := range cur.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil {
				return false, fmt.Errorf("the tenant's container started: %s", last)
			}
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerError" && strings.Contains(w.Message, "management.nvidia.com/gpu") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; last state: %s", err, last)
	}
	t.Logf("refused: %s", last)
}
