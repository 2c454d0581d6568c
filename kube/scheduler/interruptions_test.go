package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// A spot notice on the embedded cluster:
//
//	spot-1 [4 GPUs]  karpenter.sh/capacity-type: spot      gang ddp: 2 pods × 2 GPUs,
//	od-1   [4 GPUs]  on-demand                              spot first, on-demand after 6s
//
// The gang runs on spot-1 though od-1 is free. Karpenter taints spot-1 as disrupted: each
// pod is told when it will be stopped (allot.dev/interruption, an InterruptionNotice
// Event) and, that time come, both are stopped with reason Interrupted (the gang whole),
// its PodGroup counting one interruption. Its controller's new pods start whole on od-1
// once the six seconds have passed.
func TestSpotNoticeStopsTheGangAfterItsGrace(t *testing.T) {
	e := &env{Env: kubetest.StartNodes(t,
		simnode.Spec{Prefix: "spot", Count: 1, GPUs: 4, Labels: map[string]string{"karpenter.sh/capacity-type": "spot"}},
		simnode.Spec{Prefix: "od", Count: 1, GPUs: 4})}
	e.ctx, e.client, e.dyn, e.c = e.Ctx, e.Client, e.Dyn, e.Cluster
	defer e.run(t, Options{Interval: 200 * time.Millisecond, InterruptionGrace: 2 * time.Second})()
	e.queue(t, "team-a", 8)
	e.podGroup(t, "ddp", "team-a", 2)
	spot := map[string]string{v1alpha1.AnnotationSpot: "first", v1alpha1.AnnotationOnDemandAfter: "6s"}
	gang := func(prefix string) {
		for i := range 2 {
			e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("%s-%d", prefix, i), Queue: "team-a", GPUs: 2,
				Labels: map[string]string{LabelPodGroup: "ddp"}, Annotations: spot})
		}
	}
	gang("ddp")
	e.waitFor(t, "the gang runs on spot-1", func() (bool, string) {
		pods := e.pods(t)
		return running(pods["ddp-0"]) && running(pods["ddp-1"]) && pods["ddp-0"].Spec.NodeName == "spot-1" && pods["ddp-1"].Spec.NodeName == "spot-1",
			fmt.Sprintf("on %q and %q", pods["ddp-0"].Spec.NodeName, pods["ddp-1"].Spec.NodeName)
	})

	taint := []byte(`{"spec":{"taints":[{"key":"karpenter.sh/disrupted","effect":"NoSchedule"}]}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "spot-1", types.MergePatchType, taint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	noticed := time.Now()
	var when string
	e.waitFor(t, "each pod told when it is stopped", func() (bool, string) {
		pods := e.pods(t)
		a, b := pods["ddp-0"], pods["ddp-1"]
		if a == nil || b == nil {
			return false, "a pod is gone before its notice"
		}
		when = a.Annotations[v1alpha1.AnnotationInterruption]
		return when != "" && b.Annotations[v1alpha1.AnnotationInterruption] == when, fmt.Sprintf("%q, %q", when, b.Annotations[v1alpha1.AnnotationInterruption])
	})
	at, err := time.Parse(time.RFC3339, when)
	if err != nil {
		t.Fatalf("allot.dev/interruption %q: %v", when, err)
	}
	if d := at.Sub(noticed); d < time.Second || d > 4*time.Second {
		t.Errorf("the pods are to be stopped %s after the notice, want about the 2s grace", d)
	}
	e.waitFor(t, "an InterruptionNotice Event on the pod", func() (bool, string) {
		evs := e.Events(t, "default", "ddp-0")
		for _, ev := range evs {
			if strings.Contains(ev, "node spot-1 goes soon (taint karpenter.sh/disrupted: the node goes soon): save your work") {
				return true, ""
			}
		}
		return false, strings.Join(evs, "; ")
	})
	e.waitFor(t, "both stopped after the grace, the gang whole", func() (bool, string) {
		pods := e.pods(t)
		gone := func(p *corev1.Pod) bool { return p == nil || p.DeletionTimestamp != nil }
		return gone(pods["ddp-0"]) && gone(pods["ddp-1"]), "still running"
	})
	if time.Now().Before(at.Add(-500 * time.Millisecond)) {
		t.Errorf("the pods were stopped before the time they were told (%s)", when)
	}
	e.waitFor(t, "the PodGroup counts one interruption", func() (bool, string) {
		pg, err := e.Allot.AllotV1alpha1().PodGroups("default").Get(e.Ctx, "ddp", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pg.Status.Interruptions == 1, fmt.Sprintf("%d %+v; %v", pg.Status.Interruptions, pg.Status, e.Events(t, "default", "ddp-0"))
	})

	// Its controller makes the gang again; past six seconds it may use on-demand.
	e.waitFor(t, "the old pods gone", func() (bool, string) {
		pods := e.pods(t)
		return pods["ddp-0"] == nil && pods["ddp-1"] == nil, "terminating"
	})
	gang("again")
	e.waitFor(t, "the gang starts again whole on od-1", func() (bool, string) {
		pods := e.pods(t)
		return running(pods["again-0"]) && running(pods["again-1"]) && pods["again-0"].Spec.NodeName == "od-1" && pods["again-1"].Spec.NodeName == "od-1",
			fmt.Sprintf("on %q and %q", pods["again-0"].Spec.NodeName, pods["again-1"].Spec.NodeName)
	})
}
