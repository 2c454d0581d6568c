package stack_test

import (
	"fmt"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// A claim a tenant writes in its own namespace may ask what kube-scheduler's allocator can
// only answer by trying every combination of devices: seventeen requests of one GPU each,
// every one among GPUs 0 to 15, on a node of 32 (17 ≤ 32, so the books let it try). The
// allocator gives up on it within its deadline, the pod waits saying why, and the pods of
// the other teams keep being placed (without the deadline the cycle never ends).
//
//	dgx-1: 32 GPUs    ml/greedy (alice): 17 requests in GPUs 0-15   waits: "gave up"
//	                  default/next (team-b): 1 GPU                  runs
func TestTenantClaimCannotHoldTheCycle(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 32, DRA: true})
	e.Queue(t, "team-a", 32, nil)
	e.Queue(t, "team-b", 32, nil)
	alice := tenant(t, e)
	var spec resourcev1.ResourceClaimSpec
	for i := range 17 {
		r := kubetest.DeviceClaim(simnode.DRAClass, 1, `device.attributes["gpu.nvidia.com"].index < 16`).Devices.Requests[0]
		r.Name = fmt.Sprintf("gpu-%d", i)
		spec.Devices.Requests = append(spec.Devices.Requests, r)
	}
	tpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "greedy", Namespace: "ml"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec}}
	if _, err := alice.ResourceV1().ResourceClaimTemplates("ml").Create(e.Ctx, tpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	greedy := kubetest.PodSpec{Name: "greedy", Namespace: "ml", Queue: "team-a", Claims: kubetest.FromTemplate("greedy")}.Pod()
	if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, greedy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "greedy waits, saying the allocator gave up", func() (bool, string) {
		p := e.Pods(t, "ml")["greedy"]
		return strings.Contains(waitingReason(p), "the DRA allocator gave up"), waitingReason(p)
	})
	claimTemplate(t, e, "one-gpu", 1)
	e.MustPod(t, kubetest.PodSpec{Name: "next", Queue: "team-b", Claims: kubetest.FromTemplate("one-gpu")})
	e.WaitFor(t, "team-b's pod runs", func() (bool, string) {
		p := e.Pods(t, "default")["next"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase, " ", waitingReason(p))
	})
	if p := e.Pods(t, "ml")["greedy"]; p.Spec.NodeName != "" {
		t.Errorf("greedy was bound to %s", p.Spec.NodeName)
	}
}
