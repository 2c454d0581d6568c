package stack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// A node of the device plugin's single MIG strategy, with the real agent on go-nvml's mock:
// one A100-80GB laid out as seven 1g.10gb, which the simulated device plugin advertises as
// seven nvidia.com/gpu (MIG devices), GFD's labels those of the instances.
//
// Two pods pinned to the product (nvidia.com/gpu.product: A100-SXM4-80GB-MIG-1g.10gb) ask
// nvidia.com/gpu: 2 and 1: they run, booked on three instances, and their queue counts
// 3/7 of a GPU. A pod asking a plain GPU is never given an instance: it waits, told that
// the node's GPUs are MIG instances and how to ask for one.
func TestMIGSingleStrategyNode(t *testing.T) {
	const product = "A100-SXM4-80GB-MIG-1g.10gb"
	e, _ := kubetest.StartNodesWithAgents(t, simnode.Spec{Prefix: "single", Count: 1, GPUs: 1, MIGStrategy: "single",
		MIGLayout: []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}})
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team", 1, nil)
	e.Queue(t, "other", 1, nil)
	for _, s := range []kubetest.PodSpec{{Name: "pinned-2", Queue: "team", GPUs: 2}, {Name: "pinned-1", Queue: "team", GPUs: 1}, {Name: "plain", Queue: "other", GPUs: 1}} {
		p := s.Pod()
		if s.Name != "plain" {
			p.Spec.NodeSelector = map[string]string{v1alpha1.LabelGPUProduct: product}
		}
		if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	e.WaitFor(t, "the pinned pods running on instances, the plain pod waiting told why", func() (bool, string) {
		ps := e.Pods(t, "default")
		for _, n := range []string{"pinned-2", "pinned-1"} {
			if !kubetest.Running(ps[n]) {
				return false, n + " not running; events: " + strings.Join(e.Events(t, "default", n), "; ")
			}
		}
		msg := ""
		for _, c := range ps["plain"].Status.Conditions {
			if c.Type == corev1.PodScheduled {
				msg = c.Message
			}
		}
		return !kubetest.Bound(ps["plain"]) && strings.Contains(msg, "single-1's GPUs are MIG instances (7 × 1g.10gb), given as nvidia.com/gpu by the device plugin's single MIG strategy"), "plain: " + msg
	})
	ps := e.Pods(t, "default")
	booked := map[string]bool{}
	for name, want := range map[string]int{"pinned-2": 2, "pinned-1": 1} {
		at := strings.Split(ps[name].Annotations[v1alpha1.AnnotationMIGInstances], ",")
		if ps[name].Spec.NodeName != "single-1" || len(at) != want {
			t.Fatalf("%s on %s booked %q, want %d instances on single-1", name, ps[name].Spec.NodeName, at, want)
		}
		for _, a := range at {
			if !strings.Contains(a, "/1g.10gb@") || booked[a] {
				t.Errorf("%s booked %q: a 1g.10gb no other pod holds", name, a)
			}
			booked[a] = true
		}
	}
	e.WaitFor(t, "queue team counting 3/7 of a GPU", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		gpu := q.Status.Allocated["nvidia.com/gpu"]
		return gpu.Cmp(resource.MustParse("0.426")) == 0, fmt.Sprintf("allocated %v", q.Status.Allocated)
	})
}
