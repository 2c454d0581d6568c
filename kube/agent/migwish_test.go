package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/simgpu"
	"github.com/allot-dev/allot/mig"
)

// migNode is an agent on go-nvml's mock DGX A100 (A100-SXM4-40GB) with GPU 0 in MIG
// mode, writing to a Node of its own.
type migNode struct {
	a      *Agent
	lib    *simgpu.Machine
	dev    *server.Device
	client *fake.Clientset
}

func newMIGNode(t *testing.T) *migNode {
	t.Helper()
	lib := simgpu.DGXA100()
	dev := lib.Devices[0].(*server.Device)
	if r, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", r)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dyn-1"}})
	a, err := New(client, Options{Node: "dyn-1", NVML: lib})
	if err != nil {
		t.Fatal(err)
	}
	if a.inv, err = ReadInventory(lib); err != nil {
		t.Fatal(err)
	}
	return &migNode{a: a, lib: lib, dev: dev, client: client}
}

// instances is GPU 0's MIG instances as the Node's inventory says.
func (n *migNode) instances(t *testing.T) []v1alpha1.MIGInstance {
	t.Helper()
	node, err := n.client.CoreV1().Nodes().Get(context.Background(), "dyn-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var inv []v1alpha1.GPUInfo
	_ = json.Unmarshal([]byte(node.Annotations[v1alpha1.AnnotationGPUInventory]), &inv)
	if len(inv) == 0 {
		return nil
	}
	return inv[0].MIGInstances
}

func (n *migNode) wishes(t *testing.T, ws ...v1alpha1.MIGWish) string {
	t.Helper()
	for i := range ws {
		ws[i].GPU = n.a.inv[0].UUID
	}
	raw, err := json.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func made(ins []v1alpha1.MIGInstance, profile string, start int) bool {
	for _, in := range ins {
		if in.Profile == profile && in.Start == start && in.UUID != "" {
			return true
		}
	}
	return false
}

// A wish refused because a busy instance is in its way is tried again each interval, and
// made once the instance is idle: not only when the scheduler writes new wishes, which it
// does not while its pod waits.
func TestFailedMIGWishIsTriedAgainEachInterval(t *testing.T) {
	ctx := context.Background()
	n := newMIGNode(t)
	model, ok := mig.ForProduct(n.a.inv[0].Model, n.a.inv[0].MemoryMiB<<20)
	if !ok {
		t.Fatalf("no geometry for %s", n.a.inv[0].Model)
	}
	busy, err := CreateMIGInstance(n.dev, model, "1g.5gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	n.lib.SetMIGProcesses(busy, []uint32{777})
	n.a.migWanted = n.wishes(t, v1alpha1.MIGWish{Profile: "3g.20gb", Start: 0, Pod: "ml/nb", Since: time.Unix(1e9, 0)})
	n.a.migRetry = !n.a.syncMIG(ctx, n.lib, n.a.migWanted)
	if !n.a.migRetry || made(n.instances(t), "3g.20gb", 0) {
		t.Fatalf("made over a busy instance (retry %v, inventory %+v)", n.a.migRetry, n.instances(t))
	}
	n.a.retryMIG(ctx, n.lib) // still busy: still refused, kept to try again
	if !n.a.migRetry {
		t.Fatal("a wish still refused is not tried again")
	}
	n.lib.SetMIGProcesses(busy, nil)
	n.a.retryMIG(ctx, n.lib) // the next interval, the same wishes
	if ins := n.instances(t); !made(ins, "3g.20gb", 0) || n.a.migRetry {
		t.Errorf("after the instance in the way went idle: inventory %+v (retry %v), want the 3g.20gb at 0 made", ins, n.a.migRetry)
	}
}

// A stale wish (its pod gone, the wish not yet taken off) overlapping the wish of the pod
// waiting now does not keep the GPU from having the newer made.
func TestStaleOverlappingMIGWishGivesWay(t *testing.T) {
	ctx := context.Background()
	n := newMIGNode(t)
	wanted := n.wishes(t,
		v1alpha1.MIGWish{Profile: "7g.40gb", Start: 0, Pod: "ml/gone", Since: time.Unix(1e9, 0)},
		v1alpha1.MIGWish{Profile: "3g.20gb", Start: 4, Pod: "ml/nb", Since: time.Unix(1e9+60, 0)},
		v1alpha1.MIGWish{Profile: "2g.10gb", Start: 0, Pod: "ml/web", Since: time.Unix(1e9+30, 0)})
	if !n.a.syncMIG(ctx, n.lib, wanted) {
		t.Error("the sync failed")
	}
	ins := n.instances(t)
	if !made(ins, "3g.20gb", 4) || !made(ins, "2g.10gb", 0) || made(ins, "7g.40gb", 0) {
		t.Errorf("inventory %+v, want the newer 3g.20gb at 4 and 2g.10gb at 0, not the stale 7g.40gb", ins)
	}
}
