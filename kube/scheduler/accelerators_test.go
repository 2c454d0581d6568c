package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/kubetest"
)

// The snapshot carries the scheduler's kinds: nodes of each kind, jobs asking for them (an
// Ascend gang whose CPU launcher goes with it; a gang mixing kinds, or a pod asking for a
// kind that is off, waits naming why), and queues' quotas of them, a kind no one schedules
// named for the Queue's Event. A job asking for devices by a name a node of its kind does
// not have is kept off that node.
func TestSnapshotOfOtherKinds(t *testing.T) {
	kinds, err := convert.ParseAccelerators([]string{"amd,ascend"})
	if err != nil {
		t.Fatal(err)
	}
	node := func(name string, r corev1.ResourceName, n string) *corev1.Node {
		out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}}
		out.Status.Allocatable = corev1.ResourceList{r: resource.MustParse(n), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
		out.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		return out
	}
	asking := func(name, gang string, r corev1.ResourceName, n string) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Queue: "q"}.Pod()
		p.UID = types.UID(name)
		if gang != "" {
			p.Labels[LabelPodGroup] = gang
		}
		if r != "" {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{r: resource.MustParse(n)}
		}
		return p
	}
	nodes := []*corev1.Node{node("ascend-910", "huawei.com/Ascend910", "8"), node("ascend-310p", "huawei.com/Ascend310P", "4"),
		node("dgx", GPUResource, "8")}
	pods := []*corev1.Pod{
		asking("launcher", "ddp", "", ""), asking("worker-0", "ddp", "huawei.com/Ascend910", "8"),
		asking("mix-0", "mix", "huawei.com/Ascend910", "1"), asking("mix-1", "mix", GPUResource, "1"),
		asking("neuron", "", "aws.amazon.com/neuron", "1"),
	}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8},
		Accelerators: map[string]v1alpha1.GPUQuota{"ascend": {Quota: 8}, "tpu": {Quota: 2}}}}
	conv := &convCache{kinds: kinds}
	snap, idx := buildSnapshot(time.Unix(1e9, 0), nodes, pods, []*v1alpha1.Queue{q}, nil, nil, conv)
	if got := strings.Join(snap.Accelerators, ","); got != "amd,ascend" {
		t.Errorf("snapshot kinds %s", got)
	}
	kindOf := map[engine.NodeID]string{}
	for _, n := range snap.Nodes {
		kindOf[n.ID] = n.Accelerator
	}
	if kindOf["ascend-910"] != "ascend" || kindOf["ascend-310p"] != "ascend" || kindOf["dgx"] != "" {
		t.Errorf("node kinds %v", kindOf)
	}
	if r := snap.Queues[0].Resources[engine.AcceleratorResource(1)]; r.Quota != 8000 {
		t.Errorf("q's ascend quota %d, want 8000", r.Quota)
	}
	want := "spec.accelerators: tpu is not a kind the scheduler schedules: its --accelerators turns on amd, ascend; its quota of them counts for nothing"
	if got := idx.queueProblems["q"]; got != want {
		t.Errorf("queue problem %q,\nwant %q", got, want)
	}
	jobs := map[engine.JobID]*engine.Job{}
	for i := range snap.Jobs {
		jobs[snap.Jobs[i].ID] = &snap.Jobs[i]
	}
	for id, c := range map[engine.JobID]struct{ kind, invalid string }{
		"default/ddp":    {"ascend", ""},
		"default/mix":    {"", "pod default/mix-1 asks for NVIDIA GPUs and pod default/mix-0 of its gang for ascend devices: a gang's pods ask for devices of one kind"},
		"default/neuron": {"", "pod default/neuron: aws.amazon.com/neuron asks for kind neuron, which the scheduler does not schedule"},
	} {
		j := jobs[id]
		if j == nil || (c.invalid == "" && j.Accelerator != c.kind) || !strings.HasPrefix(j.Invalid, c.invalid) || (c.invalid == "") != (j.Invalid == "") {
			t.Errorf("%s: %+v, want kind %q, invalid %q", id, j, c.kind, c.invalid)
		}
	}
	// The 910 pods may not go to the node whose device plugin says Ascend310P.
	constrain(context.Background(), nil, snap, idx, nodes, pods, conv)
	f := jobs["default/ddp"].Nodes
	if f == nil || len(f.Allowed) != 2 || f.Allowed[0] == "ascend-310p" || f.Allowed[1] == "ascend-310p" ||
		!strings.Contains(f.Excluded, "1 node(s) of kind ascend have no huawei.com/Ascend910") {
		t.Errorf("ddp's nodes: %+v", f)
	}
}

// A Queue's status shows a kind it has a quota of, a share of, holds or asks for, keyed by
// the kind's first resource; a kind it stopped holding is written as null, as a merge
// patch keeps what it does not name.
func TestQueueStatusOfOtherKinds(t *testing.T) {
	kinds := convert.DefaultTable().On()
	var st engine.QueueStatus
	ascend := engine.AcceleratorResource(2)
	st.Allocated[ascend], st.FairShare[ascend], st.FairShare[engine.ResourceGPU] = 4000, 8000, 2000
	q := &v1alpha1.Queue{}
	shown := kindsShown(q, st, kinds)
	if len(shown) != 1 || kinds[shown[0]].Name != "ascend" {
		t.Fatalf("kinds shown %v", shown)
	}
	got := resources(st.Allocated, shownOf{kinds: kinds, accels: shown})
	if got["huawei.com/Ascend910"] != "4" || got["nvidia.com/gpu"] != "0" || len(got) != 4 {
		t.Errorf("allocated %v", got)
	}
	q.Spec.Accelerators = map[string]v1alpha1.GPUQuota{"amd": {Quota: 2}}
	if shown := kindsShown(q, engine.QueueStatus{}, kinds); len(shown) != 1 || kinds[shown[0]].Name != "amd" {
		t.Errorf("a kind of the spec alone: %v", shown)
	}
	want := map[string]any{"allocated": resources(engine.Resources{}, shownOf{kinds: kinds}), "fairShare": resources(engine.Resources{}, shownOf{kinds: kinds})}
	have := v1alpha1.QueueStatus{Allocated: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("1")}}
	patch := withDropped(want, have)
	alloc := patch["allocated"].(map[string]any)
	if v, ok := alloc["huawei.com/Ascend910"]; !ok || v != nil || alloc["nvidia.com/gpu"] != "0" {
		t.Errorf("patch of allocated %v: the Ascend devices it no longer holds are not taken out", alloc)
	}
	if _, ok := want["allocated"].(map[string]any)["huawei.com/Ascend910"]; ok {
		t.Error("withDropped changed the status it was given")
	}
}
