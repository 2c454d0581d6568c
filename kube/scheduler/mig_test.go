package scheduler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/engine"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// A pod of another scheduler on a MIG node books nothing by Allot's MIG annotations, which
// no webhook or policy of Allot's saw (a tenant could otherwise have Allot keep every
// instance from everyone); what it asks of the device plugin it holds, on the first free
// instances of its profile, never where its annotations say.
func TestOtherSchedulersMIGAnnotationsBookNothing(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mig-1", UID: "mig-1", Labels: map[string]string{
		v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"}}}
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("7"),
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	foreign := func(name string, ann map[string]string, res corev1.ResourceList) *corev1.Pod {
		p := kubetest.PodSpec{Name: name, Annotations: ann}.Pod()
		p.UID, p.Spec.SchedulerName, p.Spec.NodeName = types.UID(name), "default-scheduler", "mig-1"
		p.Spec.Containers[0].Resources.Limits = res
		return p
	}
	pods := []*corev1.Pod{
		foreign("grab", map[string]string{v1alpha1.AnnotationMIG: "7g.80gb", v1alpha1.AnnotationMIGInstances: "#0/7g.80gb@0"}, nil),
		foreign("real", map[string]string{v1alpha1.AnnotationMIGInstances: "#0/1g.10gb@6"}, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}),
	}
	snap, _ := buildSnapshot(time.Unix(1e9, 0), []*corev1.Node{n}, pods, nil, nil, nil, nil)
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			switch p.ID {
			case "default/grab":
				if p.Request.WantsMIG() {
					t.Errorf("grab asks %+v by its annotation", p.Request)
				}
			case "default/real":
				if b := p.Binding; b == nil || b.MIG != "1g.10gb" || len(b.MIGStarts) != 1 || b.MIGStarts[0] != 0 {
					t.Errorf("real holds %+v: want its 1g on the first free instance (slice 0), not where its annotation says (6)", b)
				}
			}
		}
	}
}

// A MIG wish lasts as long as its pod waits on it: a pod given up on after the device
// report timeout, or deleted while it waited, has its wish taken off the node, the other
// pods' wishes kept; with none left the annotation goes. A wish left behind would keep its
// slices from the next layout asked there (the agent refuses an overlapping one whole).
func TestMIGWishesLeaveWithTheirPods(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dyn-1"}}
	client := k8sfake.NewSimpleClientset(n)
	informer := func(obj runtime.Object) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, obj, 0, cache.Indexers{})
	}
	s := &Scheduler{client: client, recorder: record.NewFakeRecorder(10), nodes: informer(&corev1.Node{}), pods: informer(&corev1.Pod{}),
		opts:    Options{Now: func() time.Time { return now }, DeviceReportTimeout: time.Minute},
		assumed: map[types.UID]engine.Binding{}, backoff: map[types.UID]time.Time{}, migAwaiting: map[types.UID]migAwait{}, migWished: map[string][]v1alpha1.MIGWish{}}
	_ = s.nodes.GetStore().Add(n)
	held := map[string]*corev1.Pod{}
	for i, name := range []string{"slow", "gone", "kept"} {
		p := kubetest.PodSpec{Name: name, Annotations: map[string]string{v1alpha1.AnnotationMIG: "3g.20gb"}}.Pod()
		p.UID = types.UID(name)
		held[name] = p
		if name != "gone" {
			_ = s.pods.GetStore().Add(p)
		}
		if err := s.wishMIG(ctx, n, v1alpha1.MIGWish{GPU: "GPU-0", Profile: "3g.20gb", Start: 4 * (i % 2), Pod: "default/" + name, Since: now}); err != nil {
			t.Fatal(err)
		}
		since := now
		if name == "kept" {
			since = now.Add(50 * time.Second) // placed later: not yet overdue
		}
		s.migAwaiting[p.UID] = migAwait{job: bindJob{p: p, b: engine.Binding{Node: "dyn-1", GPUs: []int{0}, MIG: "3g.20gb", MIGStarts: []int{0}}}, since: since}
	}
	wanted := func() (string, []string) {
		got, err := client.CoreV1().Nodes().Get(ctx, "dyn-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := got.Annotations[v1alpha1.AnnotationMIGWanted]
		ws, _ := v1alpha1.ParseMIGWishes(v)
		var pods []string
		for _, w := range ws {
			pods = append(pods, w.Pod)
		}
		if !ok {
			return "no annotation", nil
		}
		return v, pods
	}
	if _, pods := wanted(); len(pods) != 3 {
		t.Fatalf("wished for %v, want the three pods", pods)
	}
	// kept's name is taken by a pod made again (a StatefulSet's), placed and waiting:
	// the wish under the name is the new pod's, not to be dropped with the old.
	again := held["kept"].DeepCopy()
	again.UID = "kept-2"
	_ = s.pods.GetStore().Update(again)
	s.migAwaiting[again.UID] = migAwait{job: bindJob{p: again, b: engine.Binding{Node: "dyn-1", GPUs: []int{0}, MIG: "3g.20gb", MIGStarts: []int{0}}}, since: now.Add(50 * time.Second)}
	now = now.Add(70 * time.Second) // past slow's timeout, not the new kept's
	s.resumeMIG(ctx)
	if _, pods := wanted(); len(pods) != 1 || pods[0] != "default/kept" {
		t.Errorf("after the timeout and the deletions: wishes for %v, want default/kept alone (the pod made again)", pods)
	}
	_ = s.pods.GetStore().Delete(again)
	s.resumeMIG(ctx)
	if v, pods := wanted(); v != "no annotation" {
		t.Errorf("no pod waits: the node still carries %s (%v)", v, pods)
	}
}

// A pod bound on the instance made for it waits on its wish no more: the wish goes.
func TestMIGWishGoesOnceItsPodIsBound(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	inv, _ := json.Marshal([]v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true,
		MIGInstances: []v1alpha1.MIGInstance{{Profile: "3g.40gb", Start: 0, UUID: "MIG-a"}}}})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dyn-1", UID: "dyn-1",
		Labels: map[string]string{v1alpha1.LabelMIGDynamic: "true", v1alpha1.LabelGPUDelivery: v1alpha1.DeliveryEnv,
			v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUUUIDs: "GPU-0", v1alpha1.AnnotationGPUInventory: string(inv)}}}
	p := kubetest.PodSpec{Name: "nb", Annotations: map[string]string{v1alpha1.AnnotationMIG: "3g.40gb"}}.Pod()
	p.UID = "nb"
	client := k8sfake.NewSimpleClientset(n, p)
	s := &Scheduler{client: client, recorder: record.NewFakeRecorder(10),
		nodes:   cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Node{}, 0, cache.Indexers{}),
		opts:    Options{Now: func() time.Time { return now }, DeviceReportTimeout: time.Minute},
		assumed: map[types.UID]engine.Binding{}, backoff: map[types.UID]time.Time{}, migAwaiting: map[types.UID]migAwait{}, migWished: map[string][]v1alpha1.MIGWish{}}
	_ = s.nodes.GetStore().Add(n)
	if err := s.wishMIG(ctx, n, v1alpha1.MIGWish{GPU: "GPU-0", Profile: "3g.40gb", Start: 0, Pod: "default/nb", Since: now}); err != nil {
		t.Fatal(err)
	}
	err := s.bindMIG(ctx, &bindJob{p: p, b: engine.Binding{Node: "dyn-1", GPUs: []int{0}, MIG: "3g.40gb", MIGStarts: []int{0}, Share: engine.OneGPU * 3 / 7}})
	if err != nil {
		t.Fatalf("bind: %v", err)
	}
	got, _ := client.CoreV1().Nodes().Get(ctx, "dyn-1", metav1.GetOptions{})
	if v, ok := got.Annotations[v1alpha1.AnnotationMIGWanted]; ok {
		t.Errorf("nb is bound: the node still carries %s", v)
	}
}
