package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/kubetest"
)

// An elastic workload is offered growth only when all the members its count asks for
// exist, its owner is a kind whose count the scheduler can change, and its queue lets it
// grow (spec.growth never keeps it at the count it asks).
func TestGrowthOfferedOnlyWhereTheWorkloadCanGrow(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx", UID: "dgx"}}
	node.Status.Allocatable = corev1.ResourceList{GPUResource: resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	worker := func(name string) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Queue: "q", GPUs: 1, Labels: map[string]string{LabelPodGroup: "ddp"}}.Pod()
		p.UID = types.UID(name)
		return p
	}
	job := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "ddp", UID: "job-uid"}
	pytorch := metav1.OwnerReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "ddp", UID: "pt-uid"}
	for _, c := range []struct {
		name          string
		members, made int // the count asked, the pods made
		owner         metav1.OwnerReference
		growth        string
		wantMax       int // 0: no growth offered
		// master, for a PyTorchJob: its master (no GPU) is made after its workers, which
		// carry the operator's worker label where labelled.
		master, labelled bool
	}{
		{"1 of up to 4, its one pod made", 1, 1, job, "", 3, false, false},
		{"its queue says never", 1, 1, job, "never", 0, false, false},
		{"its second pod not made yet", 2, 1, job, "", 0, false, false},
		{"a kind whose count the scheduler does not change", 1, 1, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "ddp", UID: "s"}, "", 0, false, false},
		// A new worker asks what a worker asks (1 GPU), not what the newest pod asks.
		{"a PyTorchJob whose master is its newest pod", 2, 2, pytorch, "", 2, true, true},
		{"a PyTorchJob with no pod labelled a worker", 2, 2, pytorch, "", 0, true, false},
	} {
		q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8}, Growth: c.growth}}
		var pods []*corev1.Pod
		for i := range c.made {
			p := worker(fmt.Sprintf("ddp-%d", i))
			if c.labelled {
				p.Labels["training.kubeflow.org/replica-type"] = "worker"
			}
			if c.master && i == c.made-1 {
				p = kubetest.PodSpec{Name: "ddp-master-0", Queue: "q", Labels: map[string]string{LabelPodGroup: "ddp", "training.kubeflow.org/replica-type": "master"}}.Pod()
				p.UID = "master"
			}
			pods = append(pods, p)
		}
		groups := map[string]convert.Group{"default/ddp": {MinMember: 1,
			Elastic: &convert.Elastic{Members: c.members, MaxMembers: 4, Owner: c.owner}}}
		snap, _ := buildSnapshot(time.Unix(1e9, 0), []*corev1.Node{node}, pods, []*v1alpha1.Queue{q}, groups, nil, &convCache{})
		var got *engine.Growth
		for _, j := range snap.Jobs {
			if j.ID == "default/ddp" {
				got = j.Growth
			}
		}
		switch {
		case c.wantMax == 0 && got != nil:
			t.Errorf("%s: growth offered: %+v", c.name, got)
		case c.wantMax > 0 && (got == nil || got.Max != c.wantMax || got.Pod.GPUs != 1):
			t.Errorf("%s: growth %+v, want up to %d more of 1 GPU", c.name, got, c.wantMax)
		}
	}
}

// Before the members a plan takes from an elastic Job are evicted, its count is lowered:
// a reclaim's evictions wait the grace for the Job controller to stop them; a spot
// notice's go at once (their checkpoint notice was given); a move, or a gang stopped whole,
// lowers nothing.
func TestShrinkLowersTheCountFirst(t *testing.T) {
	job := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "ddp", "namespace": "default", "uid": "job-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"parallelism": int64(4), "completions": int64(4)}}}
	running := func(name string) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Queue: "q", GPUs: 1}.Pod()
		p.Spec.NodeName = "dgx"
		return p
	}
	pods := []*corev1.Pod{running("ddp-0"), running("ddp-1"), running("ddp-2"), running("ddp-3")}
	e := elasticJob{&convert.Elastic{Members: 4, MaxMembers: 4,
		Owner: metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "ddp", UID: "job-uid"}}, 1}
	evict := func(code engine.ReasonCode, names ...string) *engine.Plan {
		p := &engine.Plan{}
		for _, n := range names {
			p.Evictions = append(p.Evictions, engine.Eviction{Job: "default/ddp", Pod: engine.PodID("default/" + n),
				Reason: engine.Reason{Code: code, Message: "taken"}})
		}
		return p
	}
	for _, c := range []struct {
		name     string
		plan     *engine.Plan
		wantHeld int
		wantTo   int64 // the Job's count after; 4: unchanged
	}{
		{"a reclaim of two", evict(engine.ReasonReclaimed, "ddp-3", "ddp-2"), 2, 2},
		{"a spot notice", evict(engine.ReasonInterrupted, "ddp-3"), 0, 3},
		{"the gang stopped whole", evict(engine.ReasonReclaimed, "ddp-0", "ddp-1", "ddp-2", "ddp-3"), 0, 4},
		{"a move", func() *engine.Plan {
			p := evict(engine.ReasonConsolidated, "ddp-3")
			p.Binds = []engine.Bind{{Job: "default/ddp", Pod: "default/ddp-3", Binding: engine.Binding{Node: "other"}}}
			return p
		}(), 0, 4},
	} {
		dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), job.DeepCopy())
		rec := record.NewFakeRecorder(10)
		s := &Scheduler{dyn: dyn, recorder: rec, scaled: map[engine.JobID]scaleMark{}, shrunk: map[engine.JobID]scaleMark{}}
		idx := &index{jobs: map[engine.JobID][]*corev1.Pod{"default/ddp": pods}, elastic: map[engine.JobID]elasticJob{"default/ddp": e}}
		held := s.shrinkFirst(context.Background(), c.plan, idx)
		got, err := dyn.Resource(scaleTargets["batch/v1/Job"].gvr).Namespace("default").Get(context.Background(), "ddp", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, _, _ := unstructured.NestedInt64(got.Object, "spec", "parallelism")
		n, _, _ := unstructured.NestedInt64(got.Object, "spec", "completions")
		if len(held) != c.wantHeld || p != c.wantTo || n != c.wantTo {
			t.Errorf("%s: %d evictions held, parallelism %d, completions %d; want %d held, both %d", c.name, len(held), p, n, c.wantHeld, c.wantTo)
		}
		if c.wantTo != 4 {
			if ev := <-rec.Events; !strings.Contains(ev, "ScaledDown scaled down to") {
				t.Errorf("%s: Event %q", c.name, ev)
			}
		}
	}
}
