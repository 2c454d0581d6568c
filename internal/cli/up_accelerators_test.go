package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/browsertest"
	allotclient "github.com/allot-dev/allot/kube/client"
)

// allot up --accelerator ascend:1x8 beside one NVIDIA node, used as a person would: a queue
// with an Ascend quota, allot submit --accelerator ascend -g 2 running on the Ascend node,
// allot top nodes naming each node's kind and totalling each, and allot queues showing the
// queue's Ascend devices apart from its GPUs. The NVIDIA node is then put in a node pool
// the queue has a quota of its own in: the dashboard's queues page shows the pool's row
// apart, as it does the Ascend devices.
func TestUpAccelerators(t *testing.T) {
	up := startUp(t, "--nodes", "1", "--accelerator", "ascend:1x8")
	ctx, kc := up.ctx, up.kubeconfig
	if !strings.Contains(up.out.String(), "1 simulated ascend nodes (ascend-1 …) × 8 910B3 devices (huawei.com/Ascend910)") {
		t.Errorf("allot up does not say what it made:\n%s", up.out.String())
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "vision"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 4},
		Accelerators: map[string]v1alpha1.GPUQuota{"ascend": {Quota: 8}}}}
	if _, err := allotclient.NewForConfigOrDie(rc).AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := runAllot(ctx, kc, "submit", "half-npu", "-p", "vision", "-i", "mindspore", "--accelerator", "ascend", "-g", "0.5"); err == nil ||
		!strings.Contains(err.Error(), "fractions are NVIDIA GPUs only") {
		t.Errorf("a fraction of an NPU: %v\n%s", err, out)
	}
	if out, err := runAllot(ctx, kc, "submit", "npu", "-p", "vision", "-i", "mindspore", "--accelerator", "ascend", "-g", "2"); err != nil {
		t.Fatalf("allot submit --accelerator ascend -g 2: %v\n%s", err, out)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "allot.dev/workload=npu"})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Spec.NodeName == "ascend-1" && string(pods.Items[0].Status.Phase) == "Running", nil
	})
	if err != nil {
		t.Fatal("npu did not run on ascend-1")
	}
	var top, queues string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		top, _ = runAllot(ctx, kc, "top", "nodes")
		queues, _ = runAllot(ctx, kc, "queues")
		t, q := strings.Join(strings.Fields(top), " "), strings.Join(strings.Fields(queues), " ")
		return strings.Contains(t, "ascend-1 910B3 [ascend] 2/8") && strings.Contains(t, "Allocated/Total GPUs: 0/8") &&
			strings.Contains(t, "Allocated/Total ascend devices: 2/8") && strings.Contains(q, "vision ascend 8 - 2 2 2"), nil
	})
	if err != nil {
		t.Fatalf("allot top nodes:\n%s\nallot queues:\n%s", top, queues)
	}
	// The dashboard's queues page shows the queue's Ascend devices apart from its GPUs.
	m := regexp.MustCompile(`dashboard: (http://\S+)`).FindStringSubmatch(up.out.String())
	if m == nil {
		t.Fatalf("allot up printed no dashboard address:\n%s", up.out.String())
	}
	b := browsertest.Start(t, 1280, 900)
	b.Open(t, strings.TrimSuffix(m[1], "/")+"/#/queues")
	b.WaitText(t, "table.queue-kinds tr[data-queue=vision][data-kind=ascend]", "vision's Ascend devices on the queues page",
		func(s string) bool { return strings.Join(strings.Fields(s), " ") == "vision ascend 8 none 2 2 2" })
	// The nodes page names the node's kind.
	b.Open(t, strings.TrimSuffix(m[1], "/")+"/#/nodes")
	b.WaitText(t, "article.node[data-node=ascend-1][data-kind=ascend] .node-meta", "ascend-1's kind on the nodes page",
		browsertest.Contains("910B3 [ascend]"))

	// A node pool divided apart: dgx-1 in pool h100, where vision has 2 GPUs of its own.
	if _, err := client.CoreV1().Nodes().Patch(ctx, "dgx-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"allot.dev/node-pool":"h100"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := runAllot(ctx, kc, "queue", "edit", "vision", "--pool-quota", "h100=2", "--pool-limit", "h100=3"); err != nil {
		t.Fatalf("allot queue edit vision --pool-quota h100=2: %v\n%s", err, out)
	}
	if out, err := runAllot(ctx, kc, "submit", "on-h100", "-p", "vision", "-i", "pytorch", "-g", "1", "--node-pool", "h100"); err != nil {
		t.Fatalf("allot submit --node-pool h100: %v\n%s", err, out)
	}
	b.Open(t, strings.TrimSuffix(m[1], "/")+"/#/queues")
	b.WaitText(t, "table.queue-pools tr[data-queue=vision][data-pool=h100]", "vision's pool h100 on the queues page",
		func(s string) bool { return strings.Join(strings.Fields(s), " ") == "vision h100 2 3 1 1 1" })
}
