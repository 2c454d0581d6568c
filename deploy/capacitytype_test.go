package deploy_test

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
)

// The chart's allot-capacity-type policy is the one the scheduler installs where the chart
// is not used.
func TestHelmCapacityTypeIsTheSchedulers(t *testing.T) {
	objs := deploy.Render(t)
	chart := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs["ValidatingAdmissionPolicy/allot-capacity-type"])
	want, _ := scheduler.CapacityTypePolicy()
	if a, b := string(deploy.MustJSON(t, chart.Spec)), string(deploy.MustJSON(t, want.Spec)); a != b {
		t.Errorf("the chart's policy differs from the scheduler's:\nchart:     %s\nscheduler: %s", a, b)
	}
	if objs["ValidatingAdmissionPolicyBinding/allot-capacity-type"] == nil {
		t.Error("no binding for allot-capacity-type")
	}
}

// The chart's allot-capacity-type policy: a node labelled allot.dev/capacity-type with
// anything but spot or on-demand is refused, naming the label and the values allowed, when
// it is made or the label set; a node that carried a wrong value before the policy may
// still be updated otherwise (the kubelet's updates pass), and have it mended.
func TestCapacityTypePolicyRefusesAnUnknownType(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 1, 1)
	nodes := e.Client.CoreV1().Nodes()
	// A wrong value from before the policy.
	if _, err := nodes.Patch(e.Ctx, "dgx-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"allot.dev/capacity-type":"cheap"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	install(t, e, objs, "ValidatingAdmissionPolicy/allot-capacity-type", "ValidatingAdmissionPolicyBinding/allot-capacity-type")
	node := func(name, capacity string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"allot.dev/capacity-type": capacity}}}
	}
	n := 0
	e.WaitFor(t, "the policy in force", func() (bool, string) {
		n++
		_, err := nodes.Create(e.Ctx, node(fmt.Sprintf("probe-%d", n), "sometimes"), metav1.CreateOptions{})
		return err != nil, fmt.Sprint(err)
	})
	const refused = `metadata.labels[allot.dev/capacity-type]: "Spot" is not allowed; allowed: spot or on-demand`
	if _, err := nodes.Create(e.Ctx, node("spot-9", "Spot"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), refused) {
		t.Errorf("a node made with Spot: %v, want refused with %q", err, refused)
	}
	for _, ok := range []string{"spot", "on-demand"} {
		if _, err := nodes.Create(e.Ctx, node("node-"+ok, ok), metav1.CreateOptions{}); err != nil {
			t.Errorf("a node made %s: %v", ok, err)
		}
	}
	if _, err := nodes.Patch(e.Ctx, "node-spot", types.MergePatchType, []byte(`{"metadata":{"labels":{"allot.dev/capacity-type":"Spot"}}}`), metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), refused) {
		t.Errorf("node-spot labelled Spot: %v, want refused with %q", err, refused)
	}
	// dgx-1's old value stays through its other updates, and may be mended.
	if _, err := nodes.Patch(e.Ctx, "dgx-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"rack":"r1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling dgx-1, which carried cheap from before: %v", err)
	}
	if _, err := nodes.Patch(e.Ctx, "dgx-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"allot.dev/capacity-type":"on-demand"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("mending dgx-1's capacity type: %v", err)
	}
}
