package stack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// A MIG-mixed node with a fixed layout, a node whose GPUs Allot lays out, and an Ascend
// node, under one set of queues, each node with the real agent on go-nvml's mock:
//
//	fixed-1: A100-80GB [3g.40gb 2g.20gb 1g.10gb]   dyn-1: A100-80GB ×2 (mig-dynamic)   ascend-1: 910B3 ×8
//	team: gpu quota 3, ascend quota 4
//
// A pod asking the device plugin's nvidia.com/mig-3g.40gb takes the fixed layout's 3g; a
// pod annotated allot.dev/mig: 4g.40gb is held until the dyn node's agent has made a 4g
// (through NVML), then given that MIG device; a 7g takes the other GPU, and a second 7g
// waits, told every place is held. The queue counts each instance as its compute
// slices' share of a GPU (3/7, 4/7, 7/7) and its Ascend devices apart.
func TestMIGLayoutsAndAscendUnderOneSetOfQueues(t *testing.T) {
	kinds := convert.DefaultTable()
	ascend, _ := kinds.Kind("ascend")
	e, _ := kubetest.StartNodesWithAgents(t,
		simnode.Spec{Prefix: "fixed", Count: 1, GPUs: 1, MIGLayout: []string{"3g.40gb", "2g.20gb", "1g.10gb"}},
		simnode.Spec{Prefix: "dyn", Count: 1, GPUs: 2, MIGDynamic: true},
		simnode.Spec{Prefix: "ascend", Count: 1, GPUs: 8, GPUType: "910B3", GPUMemoryMi: 64 << 10, Kind: &ascend})
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond, Accelerators: kinds}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team", 3, map[string]any{"accelerators": map[string]any{"ascend": map[string]any{"quota": 4}}})

	fixed := kubetest.PodSpec{Name: "fixed-3g", Queue: "team"}.Pod()
	fixed.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}
	npu := kubetest.PodSpec{Name: "npu", Queue: "team"}.Pod()
	npu.Spec.Containers[0].Resources.Limits = corev1.ResourceList{ascendResource: resource.MustParse("4")}
	for _, p := range []*corev1.Pod{fixed, npu,
		kubetest.PodSpec{Name: "dyn-4g", Queue: "team", Annotations: map[string]string{v1alpha1.AnnotationMIG: "4g.40gb"}}.Pod()} {
		if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	e.WaitFor(t, "the fixed 3g, the Ascend pod and the made 4g running", func() (bool, string) {
		ps := e.Pods(t, "default")
		for _, n := range []string{"fixed-3g", "npu", "dyn-4g"} {
			if !kubetest.Running(ps[n]) {
				return false, n + " not running; events: " + strings.Join(e.Events(t, "default", n), "; ")
			}
		}
		return true, ""
	})
	ps := e.Pods(t, "default")
	if p := ps["fixed-3g"]; p.Spec.NodeName != "fixed-1" || !strings.HasSuffix(p.Annotations[v1alpha1.AnnotationMIGInstances], "/3g.40gb@0") {
		t.Errorf("fixed-3g on %s at %q, want the fixed layout's 3g at slice 0", p.Spec.NodeName, p.Annotations[v1alpha1.AnnotationMIGInstances])
	}
	if p := ps["npu"]; p.Spec.NodeName != "ascend-1" {
		t.Errorf("npu on %s, want ascend-1", p.Spec.NodeName)
	}
	// The 4g was made by the agent through NVML, and the pod was given that MIG device.
	dyn := ps["dyn-4g"]
	uuid := dyn.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"]
	if dyn.Spec.NodeName != "dyn-1" || !strings.HasPrefix(uuid, "MIG-") {
		t.Fatalf("dyn-4g on %s given %q, want a MIG device on dyn-1", dyn.Spec.NodeName, uuid)
	}
	made := false
	n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dyn-1", metav1.GetOptions{})
	inv, _ := v1alpha1.ParseInventory(n.Annotations[v1alpha1.AnnotationGPUInventory])
	for _, g := range inv {
		for _, in := range g.MIGInstances {
			made = made || (in.UUID == uuid && in.Profile == "4g.40gb")
		}
	}
	if !made {
		t.Errorf("the agent's inventory has no 4g.40gb %s: %+v", uuid, inv)
	}

	// A 7g takes the other GPU of dyn-1; a second waits: every place it could have is held.
	for _, name := range []string{"dyn-7g", "dyn-7g-more"} {
		e.MustPod(t, kubetest.PodSpec{Name: name, Queue: "team", Annotations: map[string]string{v1alpha1.AnnotationMIG: "7g.80gb"}})
		if name == "dyn-7g" {
			e.WaitFor(t, "the 7g running", func() (bool, string) {
				p := e.Pods(t, "default")["dyn-7g"]
				return kubetest.Running(p), strings.Join(e.Events(t, "default", "dyn-7g"), "; ")
			})
		}
	}
	e.WaitFor(t, "the second 7g waiting, told why", func() (bool, string) {
		p := e.Pods(t, "default")["dyn-7g-more"]
		msg := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				msg = c.Message
			}
		}
		return !kubetest.Bound(p) && strings.Contains(msg, "every instance it could have"), msg
	})

	// The queue counts each instance by its compute slices, and Ascend devices apart:
	// 3/7 + 4/7 + 7/7 of a GPU, 4 Ascend devices.
	e.WaitFor(t, "queue team's allocation per kind", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		gpu, npus := q.Status.Allocated["nvidia.com/gpu"], q.Status.Allocated[ascendResource]
		return gpu.Cmp(resource.MustParse("1.999")) == 0 && npus.Cmp(resource.MustParse("4")) == 0,
			fmt.Sprintf("allocated %v", q.Status.Allocated)
	})
}

// A node asking Allot to lay out its GPUs in MIG mode, under the GPU Operator's defaults
// (its MIG manager applying nvidia.com/mig.config=all-disabled, its device plugin deployed
// there with the mixed strategy), is not laid out: a pod asking for an instance waits,
// told what acts on the instances and which label of the node turns it off. With both
// switched off on the node, the instance is made and the pod runs.
//
//	dyn-1: A100-80GB ×2 (mig-dynamic; mig.config=all-disabled, gpu.deploy.device-plugin=true, mig.strategy=mixed)
func TestMIGLayoutRefusedBesideTheOperatorsMIGComponents(t *testing.T) {
	e, _ := kubetest.StartNodesWithAgents(t, simnode.Spec{Prefix: "dyn", Count: 1, GPUs: 2, MIGDynamic: true,
		Labels: map[string]string{convert.LabelMIGConfig: "all-disabled", convert.LabelDeployDevicePlugin: "true", convert.LabelDeployMIGManager: "true"}})
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team", 2, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "dyn-4g", Queue: "team", Annotations: map[string]string{v1alpha1.AnnotationMIG: "4g.40gb"}})
	reason := func() string {
		for _, c := range e.Pods(t, "default")["dyn-4g"].Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return c.Message
			}
		}
		return ""
	}
	e.WaitFor(t, "dyn-4g waiting, told why", func() (bool, string) {
		msg := reason()
		return strings.Contains(msg, "MIG manager applies nvidia.com/mig.config=all-disabled") && strings.Contains(msg, "nvidia.com/gpu.deploy.mig-manager=false") &&
			strings.Contains(msg, "mixed MIG strategy") && strings.Contains(msg, "nvidia.com/gpu.deploy.device-plugin=false"), msg
	})
	if p := e.Pods(t, "default")["dyn-4g"]; kubetest.Bound(p) {
		t.Fatalf("dyn-4g bound to %s beside the operator's MIG manager", p.Spec.NodeName)
	}
	t.Logf("waiting: %s", reason())
	e.WaitFor(t, "the conflict said on the Node", func() (bool, string) {
		evs := strings.Join(e.Events(t, "default", "dyn-1"), "; ")
		return strings.Contains(evs, "not laid out by Allot") && strings.Contains(evs, "MIG manager"), evs
	})
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"false",%q:"false"}}}`, convert.LabelDeployMIGManager, convert.LabelDeployDevicePlugin)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dyn-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "dyn-4g running on the instance made for it", func() (bool, string) {
		p := e.Pods(t, "default")["dyn-4g"]
		return kubetest.Running(p) && strings.HasPrefix(p.Annotations[v1alpha1.AnnotationGPUEnvPrefix+"NVIDIA_VISIBLE_DEVICES"], "MIG-"), reason()
	})
}
