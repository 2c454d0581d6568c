package scheduler

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// replica is a pod of another scheduler's ReplicaSet as each arrives from the API server:
// decoded on its own, with maps of its own.
func replica(name string, cpu string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "web",
			Labels:          map[string]string{"app": "web", "pod-template-hash": "5d4f"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d4f", UID: "rs-1", Controller: &yes}}},
		Spec: corev1.PodSpec{SchedulerName: "default-scheduler", NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "web:1",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
	}
}

func sameMap[M any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestReplicasShareTheirSets: the trimmed replicas of one ReplicaSet hold one copy of their
// labels, owner and requests; a replica asking something else keeps its own requests; and
// the replica's decoded object, written afterwards, changes no other pod.
func TestReplicasShareTheirSets(t *testing.T) {
	kept := shared
	shared = &interner{} // not one that other tests may have filled to its limit
	t.Cleanup(func() { shared = kept })
	a, b := replica("web-a", "100m"), replica("web-b", "0.1")
	other := replica("web-c", "200m")
	ta, tb, tc := trimPod(a), trimPod(b), trimPod(other)

	if !sameMap(ta.Labels, tb.Labels) || !sameMap(ta.Labels, tc.Labels) {
		t.Error("replicas with one label set hold copies of their own")
	}
	if &ta.OwnerReferences[0] != &tb.OwnerReferences[0] {
		t.Error("replicas of one owner hold copies of their own owner list")
	}
	ra, rb, rc := ta.Spec.Containers[0].Resources, tb.Spec.Containers[0].Resources, tc.Spec.Containers[0].Resources
	if !sameMap(ra.Requests, rb.Requests) || !sameMap(ra.Limits, rc.Limits) {
		t.Error("equal requests (100m and 0.1 CPU are one value) or limits are held twice")
	}
	if sameMap(ra.Requests, rc.Requests) {
		t.Error("a replica asking 200m shares the requests of one asking 100m")
	}
	if got := rc.Requests[corev1.ResourceCPU]; got.MilliValue() != 200 {
		t.Errorf("the 200m replica's request reads %s", got.String())
	}

	a.Labels["app"] = "changed"
	a.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("8")
	if tb.Labels["app"] != "web" || tb.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() != 100 {
		t.Errorf("writing one decoded pod changed another's trimmed copy: labels %v, requests %v", tb.Labels, tb.Spec.Containers[0].Resources.Requests)
	}
}

// TestInternTableIsBounded: pods whose label sets are all different (a StatefulSet's) fill
// the table to its limit at most, and each keeps its own set.
func TestInternTableIsBounded(t *testing.T) {
	in := &interner{}
	for i := range internLimit + 10 {
		m := map[string]string{"statefulset.kubernetes.io/pod-name": fmt.Sprintf("db-%d", i)}
		if got := in.labels(m); got["statefulset.kubernetes.io/pod-name"] != m["statefulset.kubernetes.io/pod-name"] {
			t.Fatalf("pod %d was given another's labels: %v", i, got)
		}
	}
	// Full at internLimit, emptied, then the last 10 sets kept: none kept (nothing shared)
	// or more (never emptied) fails.
	if n := len(in.labelSets); n != 10 {
		t.Errorf("the table holds %d sets after %d distinct ones, want the 10 since it was emptied at its limit of %d", n, internLimit+10, internLimit)
	}
}

// TestStreamedListTrimsEachPodOnce: on client-go's own path for a streamed initial list (the
// pods trimmed into the list's store as they arrive, then the whole list handed to the
// informer's queue, which applies the transform again), the queue gets the very pod the list
// trimmed, not a second copy.
func TestStreamedListTrimsEachPodOnce(t *testing.T) {
	listed := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.WithTransformer(trimObject))
	if err := listed.Add(replica("web-a", "100m")); err != nil {
		t.Fatal(err)
	}
	trimmed := listed.List()[0].(*corev1.Pod)
	if trimmed.Spec.Containers[0].Image != "" {
		t.Fatal("the list's store holds the pod whole")
	}
	fifo := cache.NewRealFIFO(cache.MetaNamespaceKeyFunc, cache.NewStore(cache.MetaNamespaceKeyFunc), trimObject)
	if err := fifo.Replace(listed.List(), "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := fifo.Pop(func(obj any, _ bool) error {
		if got := obj.(cache.Deltas)[0].Object.(*corev1.Pod); got != trimmed {
			t.Errorf("the informer's queue holds another copy of the trimmed pod")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerKeysDoNotCollide: an owner's fields may hold any bytes, yet one owner list made to
// read like two (a UID holding the second owner's fields) is not given the other's list.
func TestOwnerKeysDoNotCollide(t *testing.T) {
	in := &interner{}
	two := []metav1.OwnerReference{{APIVersion: "v1", Kind: "A", Name: "a", UID: "1"}, {APIVersion: "v1", Kind: "B", Name: "b", UID: "2"}}
	one := []metav1.OwnerReference{{APIVersion: "v1", Kind: "A", Name: "a", UID: "1\x00--v1\x00B\x00b\x002"}}
	in.owners(two)
	if got := in.owners(one); len(got) != 1 || got[0].UID != one[0].UID {
		t.Errorf("a one-owner list was given %v", got)
	}
}
