package stack_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// A tenant with edit in its namespace chooses among the node pools its queue allows, and
// no further:
//
//	dgx-1 [4 GPUs]  pool h100   team-a: nodePools [h100]; h100 quota 2
//	dgx-2 [4 GPUs]  pool a100
//
// a pod naming a100 (by node selector or list) is refused at admission; one naming none
// runs in h100 and counts against team-a's quota there; once admitted, its list of pools
// is fixed, so that a pending pod cannot be moved to another pool's books.
func TestTenantStaysInItsQueuesPools(t *testing.T) {
	e := start(t, 2, 4)
	for node, pool := range map[string]string{"dgx-1": "h100", "dgx-2": "a100"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelNodePool, pool)
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.Queue(t, "team-a", 0, map[string]any{"gpu": map[string]any{"quota": 0, "pools": map[string]any{"h100": map[string]any{"quota": 2}}},
		"nodePools": []any{"h100"}, "namespaces": []any{"ml"}})
	alice := tenant(t, e)
	pod := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Queue: "team-a", GPUs: 1}.Pod()
		p.Namespace = "ml"
		if edit != nil {
			edit(p)
		}
		return p
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a selector on another pool", pod("a100-pinned", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: "a100"} }),
			`spec.nodeSelector[allot.dev/node-pool]: node pool "a100" is not one queue team-a may use: its nodePools are h100`},
		{"a list with another pool", pod("a100-listed", func(p *corev1.Pod) { p.Annotations = map[string]string{v1alpha1.AnnotationNodePools: "h100,a100"} }),
			`metadata.annotations[allot.dev/node-pools]: node pool "a100" is not one queue team-a may use`},
	} {
		e.WaitFor(t, c.name+" refused", func() (bool, string) {
			_, err := alice.CoreV1().Pods("ml").Create(e.Ctx, c.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), c.want), fmt.Sprint(err)
		})
	}
	if _, err := alice.CoreV1().Pods("ml").Create(e.Ctx, pod("mine", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "alice's pod runs in h100", func() (bool, string) {
		p := e.Pods(t, "ml")["mine"]
		return kubetest.Running(p) && p.Spec.NodeName == "dgx-1", fmt.Sprintf("on %q", p.Spec.NodeName)
	})
	e.WaitFor(t, "team-a's h100 quota holds it", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h := q.Status.Allocated[v1alpha1.PoolStatusPrefix+"h100"]
		return h.String() == "1", fmt.Sprintf("allocated %v", q.Status.Allocated)
	})
	fieldsPolicyInForce(t, e, alice, "ml", "mine")
	move := []byte(`{"metadata":{"annotations":{"allot.dev/node-pools":"a100"}}}`)
	if _, err := alice.CoreV1().Pods("ml").Patch(e.Ctx, "mine", types.MergePatchType, move, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "allot.dev/node-pools") {
		t.Errorf("alice rewriting an admitted pod's pools: %v, want it refused", err)
	}
}
