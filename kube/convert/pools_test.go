package convert

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Which pools a pod tries, in order, and which its queue refuses, naming the field.
func TestPodPools(t *testing.T) {
	queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: v1alpha1.QueueSpec{
		NodePools:      v1alpha1.PoolList{"h100", "a100", "default"},
		ClassNodePools: map[string]v1alpha1.PoolList{"interactive": {"a100"}}}}
	open := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "open"}}
	pod := func(selector, list, class string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		if selector != "" {
			p.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: selector}
		}
		if list != "" {
			p.Annotations[v1alpha1.AnnotationNodePools] = list
		}
		if class != "" {
			p.Labels[v1alpha1.LabelClass] = class
		}
		return p
	}
	for _, c := range []struct {
		name  string
		pod   *corev1.Pod
		queue *v1alpha1.Queue
		want  []string
		err   string
	}{
		{"the queue's order, default last", pod("", "", ""), queue, []string{"h100", "a100", ""}, ""},
		{"the class's order", pod("", "", "interactive"), queue, []string{"a100"}, ""},
		{"a class the queue gives none", pod("", "", "train"), queue, []string{"h100", "a100", ""}, ""},
		{"a selector pins one", pod("a100", "", ""), queue, []string{"a100"}, ""},
		{"the pod's own order", pod("", "a100, h100", ""), queue, []string{"a100", "h100"}, ""},
		{"an open queue takes any pool", pod("", "x,y", ""), open, []string{"x", "y"}, ""},
		{"an open queue, none named: the default pool", pod("", "", ""), open, []string{""}, ""},
		{"a pool the queue does not list", pod("l40s", "", ""), queue, nil,
			`spec.nodeSelector[allot.dev/node-pool]: node pool "l40s" is not one queue team-a may use: its nodePools are h100, a100, default`},
		{"one of a list the queue does not list", pod("", "h100,l40s", ""), queue, nil,
			`metadata.annotations[allot.dev/node-pools]: node pool "l40s" is not one queue team-a may use`},
		{"both forms", pod("h100", "a100", ""), queue, nil, "set it or spec.nodeSelector[allot.dev/node-pool], not both"},
		{"a list written wrong", pod("", "h100,,a100", ""), queue, nil, `metadata.annotations[allot.dev/node-pools]: "" is not a node pool`},
		{"a pool twice", pod("", "h100,h100", ""), queue, nil, `node pool "h100" is listed twice`},
	} {
		got, err := Pools(c.pod, c.queue)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && !slices.Equal(got, c.want):
			t.Errorf("%s: pools %q, want %q", c.name, got, c.want)
		}
	}
}

// A queue's quotas per pool reach the engine at the pool's place among the divided
// pools; a pool past the engine's count is said to count for nothing.
func TestPoolQuotas(t *testing.T) {
	lim := int32(6)
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 2,
		Pools: map[string]v1alpha1.PoolQuota{"h100": {Quota: 4, Limit: &lim}, "a100": {Quota: 8}}}}}
	other := &v1alpha1.Queue{Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Pools: map[string]v1alpha1.PoolQuota{"l40s": {}}}}}
	divided := DividedPools([]*v1alpha1.Queue{q, other})
	if !slices.Equal(divided, []string{"a100", "h100", "l40s"}) {
		t.Fatalf("divided pools %q", divided)
	}
	out := Queue(q)
	if p := SetPoolQuotas(q, &out, divided); p != "" {
		t.Fatal(p)
	}
	a100, h100 := out.Resources[engine.PoolResource(0)], out.Resources[engine.PoolResource(1)]
	if a100.Quota != 8000 || h100.Quota != 4000 || h100.Limit == nil || *h100.Limit != 6000 || out.Resources[engine.ResourceGPU].Quota != 2000 {
		t.Errorf("a100 %+v, h100 %+v, the other pools %+v", a100, h100, out.Resources[engine.ResourceGPU])
	}
	many := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	last := &v1alpha1.Queue{Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Pools: map[string]v1alpha1.PoolQuota{"i": {Quota: 1}}}}}
	out = Queue(last)
	if p := SetPoolQuotas(last, &out, many); !strings.Contains(p, "spec.gpu.pools: i: the queues name 9 pools, and the scheduler divides at most 8") {
		t.Errorf("a ninth pool: %q", p)
	}
}
