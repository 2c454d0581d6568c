package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/dra"
)

// draCluster is nodeCount DRA nodes of 8 GPUs (as NVIDIA's driver publishes them), with
// running one-GPU pods filling all but the last GPU of each node (claims from a template,
// allocated and reserved), and pending one-GPU pods with claims made but not allocated.
func draCluster(nodeCount, pending int) ([]*corev1.Node, []*corev1.Pod, *draCycle) {
	var nodes []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	claims := map[string]*resourceapi.ResourceClaim{}
	var pods []*corev1.Pod
	claim := func(pod string) *resourceapi.ResourceClaim {
		owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: types.UID(pod), Controller: ptr(true)}}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: pod + "-gpu", Namespace: "default", UID: types.UID(pod + "-gpu"),
			ResourceVersion: "1", OwnerReferences: owner},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dra.NVIDIAGPUClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}
	}
	pod := func(name, node string) *corev1.Pod {
		p := basePod(name, v1alpha1.SchedulerName)
		p.Labels[v1alpha1.LabelQueue] = "q"
		p.Spec.NodeName = node
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("one")}}
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr(name + "-gpu")}}
		return p
	}
	for i := 0; i < nodeCount; i++ {
		name := fmt.Sprintf("node-%04d", i)
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods: resource.MustParse("110")}
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: "1",
			Labels: map[string]string{corev1.LabelHostname: name}},
			Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
		slices = append(slices, dra.NVIDIASlice(dra.NVIDIANode{Name: name, Product: "H100", GPUs: 8, MemoryMi: 81920,
			UUID: func(g int) string { return fmt.Sprintf("GPU-%s-%d", name, g) }}))
		for g := 0; g < 7; g++ {
			p := pod(fmt.Sprintf("run-%d-%d", i, g), name)
			c := claim(p.Name)
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: dra.NVIDIADriver, Pool: name, Device: fmt.Sprintf("gpu-%d", g)}}}}
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
			claims[claimKey(c)] = c
			pods = append(pods, p)
		}
	}
	for i := 0; i < pending; i++ {
		p := pod(fmt.Sprintf("wait-%d", i), "")
		c := claim(p.Name)
		claims[claimKey(c)] = c
		pods = append(pods, p)
	}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	classes := dra.Classes{}
	for _, c := range dra.NVIDIAClasses() {
		classes[c.Name] = c
	}
	d := &draCycle{inv: dra.NewInventory(slices, dra.NVIDIAClasses(), dra.DefaultClassNames, cel.NewCache(100, cel.Features{})),
		classes: classes, features: dra.DefaultFeatures, claims: claims, nodes: byName, fits: &fitCache{m: map[string]map[string]bool{}}}
	return nodes, pods, d
}

// BenchmarkClaimsStage is the cost a cycle adds for DRA on 250 nodes of 8 GPUs, 1,750
// running pods with allocated claims and 200 pending: the claims stage (GPUs from the
// slices, counting and placing claims) and the node filter of the pending pods (the
// allocator's fit per pod and node, cached between cycles as it is in the scheduler).
// It prints the inventory's cost (built each cycle) apart.
func BenchmarkClaimsStage(b *testing.B) {
	nodes, pods, d := draCluster(250, 200)
	ctx := context.Background()
	now := time.Unix(1e9, 0)
	var conv convCache
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap, idx := buildSnapshot(now, nodes, pods, nil, nil, nil, &conv)
		d.addClaims(now, snap, idx, pods)
		d.filterClaims(ctx, snap, idx)
	}
	b.StopTimer()
	var slices []*resourceapi.ResourceSlice
	for _, n := range nodes {
		slices = append(slices, dra.NVIDIASlice(dra.NVIDIANode{Name: n.Name, Product: "H100", GPUs: 8, MemoryMi: 81920,
			UUID: func(g int) string { return fmt.Sprintf("GPU-%s-%d", n.Name, g) }}))
	}
	start := time.Now()
	const rounds = 5
	for i := 0; i < rounds; i++ {
		dra.NewInventory(slices, dra.NVIDIAClasses(), dra.DefaultClassNames, cel.NewCache(100, cel.Features{}))
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/rounds/1000, "ms-inventory")
}

// BenchmarkAllocateOneClaim is a bind's allocation in the same cluster: the held devices
// read from every claim, then kube-scheduler's allocator on the chosen node.
func BenchmarkAllocateOneClaim(b *testing.B) {
	nodes, _, d := draCluster(250, 1)
	ctx := context.Background()
	all := make([]*resourceapi.ResourceClaim, 0, len(d.claims))
	for _, c := range d.claims {
		all = append(all, c)
	}
	open := d.claims["default/wait-0-gpu"]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := d.inv.Allocate(ctx, d.features, d.classes, dra.NewState(all), nodes[i%len(nodes)], []*resourceapi.ResourceClaim{open}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
