package scheduler

import (
	"fmt"
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
	for _, c := range []struct {
		name          string
		members, made int // the count asked, the pods made
		owner         metav1.OwnerReference
		growth        string
		wantMax       int // 0: no growth offered
	}{
		{"1 of up to 4, its one pod made", 1, 1, job, "", 3},
		{"its queue says never", 1, 1, job, "never", 0},
		{"its second pod not made yet", 2, 1, job, "", 0},
		{"a kind whose count the scheduler does not change", 1, 1, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "ddp", UID: "s"}, "", 0},
	} {
		q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8}, Growth: c.growth}}
		var pods []*corev1.Pod
		for i := range c.made {
			pods = append(pods, worker(fmt.Sprintf("ddp-%d", i)))
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
