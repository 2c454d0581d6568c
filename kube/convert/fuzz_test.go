package convert

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// The scheduler reads objects many hands write. These targets feed garbage where those
// hands write to what turns them into the engine's inputs: never a panic, and never more
// than a node's capacity.

// FuzzNode: GFD labels, the agent's UUIDs and the allocatable quantities of a node,
// however wrong, give a node with no more GPUs than its nvidia.com/gpu capacity (at most
// 64), no negative CPU, memory or device memory.
func FuzzNode(f *testing.F) {
	f.Add("8", "81920", "A100-SXM4-80GB", "GPU-a,GPU-b", "64", "512Gi", `{"gpus":[{"index":0,"used":500}]}`, "10,20")
	f.Add("-2", "99999999999999999999", "", ",,,", "-1", "-1Gi", "not json", "{{{")
	f.Add("1e3", "-5", "x", "", "1m", "0", `{"gpus":[{"index":"x"}]}`, "101")
	f.Fuzz(func(t *testing.T, gpus, memMi, product, uuids, cpu, mem, occupancy, util string) {
		// The utilisation string doubles as the admin's cordon list and sharer cap.
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
			Labels: map[string]string{v1alpha1.LabelGPUMemory: memMi, v1alpha1.LabelGPUProduct: product},
			Annotations: map[string]string{v1alpha1.AnnotationGPUUUIDs: uuids, v1alpha1.AnnotationOccupancy: occupancy,
				v1alpha1.AnnotationGPUUtilization: util, v1alpha1.AnnotationGPUCordon: util, v1alpha1.AnnotationGPUMaxSharers: util}}}
		n.Status.Allocatable = corev1.ResourceList{}
		for name, v := range map[corev1.ResourceName]string{GPUResource: gpus, corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem} {
			if q, err := resource.ParseQuantity(v); err == nil {
				n.Status.Allocatable[name] = q
			}
		}
		out := Node(n)
		for _, p := range NodeProblems(n) {
			if !strings.Contains(p, "allocatable") && !strings.Contains(p, "label ") && !strings.Contains(p, "annotation ") {
				t.Fatalf("a problem that names no field: %q", p)
			}
		}
		capacity := n.Status.Allocatable[GPUResource]
		if int64(len(out.GPUs)) > max(capacity.Value(), 0) || len(out.GPUs) > 64 {
			t.Fatalf("%d GPUs on a node of capacity %s", len(out.GPUs), capacity.String())
		}
		if out.CPU < 0 || out.Memory < 0 || out.MaxSharers < 0 || out.MaxSharers > 1000 {
			t.Fatalf("cpu %d, memory %d, sharers %d", out.CPU, out.Memory, out.MaxSharers)
		}
		for _, g := range out.GPUs {
			if g.Memory < 0 {
				t.Fatalf("device memory %d from label %q", g.Memory, memMi)
			}
		}
	})
}

// FuzzPodRequest: a pod's sharing annotations and GPU requests, as an admin could write
// them past the webhook, give a request the engine can place: no negative amount, and a
// shared request only within one device.
func FuzzPodRequest(f *testing.F) {
	f.Add("1", "0.5", "", "", "2")
	f.Add("", "", "8Gi", "30", "")
	f.Add("-3", "2", "-1", "x", "1e30")
	f.Fuzz(func(t *testing.T, gpus, frac, gpuMem, compute, minMember string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: frac, v1alpha1.AnnotationGPUMemory: gpuMem,
				v1alpha1.AnnotationGPUCompute: compute, v1alpha1.AnnotationMinMember: minMember}}}
		c := corev1.Container{Name: "c"}
		if q, err := resource.ParseQuantity(gpus); err == nil {
			c.Resources.Limits = corev1.ResourceList{GPUResource: q}
		}
		p.Spec.Containers = []corev1.Container{c}
		r := PodRequest(p)
		if r.GPUs < 0 || r.GPUFraction < 0 || r.GPUFraction >= engine.OneGPU || r.GPUMemory < 0 || r.CPU < 0 || r.Memory < 0 ||
			r.GPUCompute < 0 || r.GPUCompute > engine.OneGPU || r.Devices < 0 || r.Devices > 64 || (r.GPUs > 0 && r.Shared()) {
			t.Fatalf("request %+v", r)
		}
	})
}

// FuzzQueue: a Queue the schema accepts, with any quantities in its CPU and memory
// quotas, turns into an engine queue without a panic, and a cycle of such queues (or one
// that is its own parent) leaves the engine scheduling the others.
func FuzzQueue(f *testing.F) {
	f.Add(int32(4), int32(1), int32(8), "2", "-1", "16Gi", "1e30", "a", "b")
	f.Add(int32(0), int32(0), int32(0), "", "", "", "", "b", "a")
	f.Fuzz(func(t *testing.T, quota, weight, limit int32, cpuQ, cpuL, memQ, memL, parentA, parentB string) {
		qty := func(s string) *resource.Quantity {
			if q, err := resource.ParseQuantity(s); err == nil {
				return &q
			}
			return nil
		}
		mk := func(name, parent string) *v1alpha1.Queue {
			q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}
			q.Spec.Parent = parent
			q.Spec.GPU = v1alpha1.GPUQuota{Quota: max(quota, 0), OverQuotaWeight: &weight, Limit: &limit}
			q.Spec.CPU = &v1alpha1.ResourceQuota{Quota: qty(cpuQ), Limit: qty(cpuL)}
			q.Spec.Memory = &v1alpha1.ResourceQuota{Quota: qty(memQ), Limit: qty(memL)}
			return q
		}
		snap := &engine.Snapshot{Nodes: []engine.Node{{ID: "n", CPU: 8000, Memory: 64 << 30, GPUs: []engine.GPU{{Memory: 80 << 30}}}},
			Queues: []engine.Queue{Queue(mk("a", parentA)), Queue(mk("b", parentB)), Queue(mk("c", ""))}}
		for _, q := range []engine.QueueID{"a", "b", "c"} {
			id := engine.JobID("j-" + string(q))
			snap.Jobs = append(snap.Jobs, engine.Job{ID: id, Queue: q, MinMember: 1,
				Pods: []engine.Pod{{ID: engine.PodID(id), Request: engine.PodRequest{GPUs: 1}}}})
		}
		plan := engine.New(engine.Options{}).Schedule(snap)
		for id, r := range plan.Pending {
			if r.Message == "" {
				t.Fatalf("%s waits without a reason", id)
			}
		}
	})
}

// FuzzPodGroup: a PodGroup or a Queue as the typed clientset decodes it (keys
// case-sensitive; a field of the wrong type does not decode), with whatever its spec
// holds, gives a gang size between 0 and MaxGang or a problem naming the field, and a
// Queue converts without a panic.
func FuzzPodGroup(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"ddp","namespace":"ml"},"spec":{"minMember":4,"queue":"team-a"}}`))
	f.Add([]byte(`{"metadata":{"name":"big"},"spec":{"minMember":2147483647}}`))
	f.Add([]byte(`{"metadata":{"name":"odd"},"spec":{"minMember":"four","queue":7}}`))
	f.Add([]byte(`{"metadata":{"name":"q"},"spec":{"parent":"q","gpu":{"quota":-3,"limit":1e40},"cpu":{"quota":"banana"}}}`))
	f.Add([]byte(`{"metadata":{"name":"q"},"spec":{"minMember":1.5,"gpu":{"quota":"8"}}}`))
	f.Add([]byte(`{"metadata":{"name":"late"},"spec":{"minMember":-2,"staleGracePeriod":"-1m"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pg v1alpha1.PodGroup
		if utiljson.Unmarshal(data, &pg) == nil {
			g := PodGroup(&pg)
			if g.MinMember < 0 || g.MinMember > v1alpha1.MaxGang {
				t.Fatalf("gang of %d from %s", g.MinMember, data)
			}
			if g.Problem != "" && (g.MinMember != 0 || !strings.Contains(g.Problem, "spec.minMember") && !strings.Contains(g.Problem, "spec.staleGracePeriod")) {
				t.Fatalf("problem %q with size %d", g.Problem, g.MinMember)
			}
		}
		var q v1alpha1.Queue
		if utiljson.Unmarshal(data, &q) == nil {
			_ = Queue(&q)
		}
		if m, err := MinMemberAnnotation(string(data)); err == nil && (m < 0 || m > v1alpha1.MaxGang) {
			t.Fatalf("min-member %d from %q", m, data)
		}
	})
}

// FuzzAccelerators: the scheduler's --accelerators (an admin's), and a node's count, model
// and memory labels and a pod's requests of another vendor's devices (their device
// plugins' and labellers'), however wrong: a table of at most engine.MaxAccelerators kinds
// or an error naming the flag; a node of no more devices than its allocatable (at most 64),
// none of negative memory; a pod of one kind asking for no more than it wrote, or a
// problem.
func FuzzAccelerators(f *testing.F) {
	f.Add("ascend,amd", "8", "192G", "274877906944", "2", "1")
	f.Add("x=x.com/y;memory-label=m;memory-unit=node-bytes", "-4", "-1G", "-9", "1e30", "-1")
	f.Add("none", "1e5", "99999999999999999999G", "banana", "0.5", "")
	f.Fuzz(func(t *testing.T, flag, count, vram, memMax, asked, nvidia string) {
		a, err := ParseAccelerators(strings.Split(flag, " "))
		if err != nil {
			if !strings.Contains(err.Error(), "--accelerators") {
				t.Fatalf("an error that names no flag: %v", err)
			}
			return
		}
		if len(a.Names()) > engine.MaxAccelerators {
			t.Fatalf("%d kinds on", len(a.Names()))
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"amd.com/gpu.vram": vram, "gpu.intel.com/memory.max": memMax, "m": memMax}}}
		n.Status.Allocatable = corev1.ResourceList{}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}}}}
		for _, r := range append(a.Resources(), "amd.com/gpu", "gpu.intel.com/i915") {
			if q, err := resource.ParseQuantity(count); err == nil {
				n.Status.Allocatable[r] = q
			}
			if q, err := resource.ParseQuantity(asked); err == nil {
				p.Spec.Containers[0].Resources.Limits[r] = q
			}
		}
		if q, err := resource.ParseQuantity(nvidia); err == nil {
			p.Spec.Containers[0].Resources.Limits[GPUResource] = q
		}
		out := a.Node(n)
		most := int64(0)
		for _, r := range a.Resources() {
			q := n.Status.Allocatable[r]
			most = max(most, q.Value())
		}
		if len(out.GPUs) > 64 || int64(len(out.GPUs)) > most {
			t.Fatalf("%d devices from allocatable %s", len(out.GPUs), count)
		}
		for _, g := range out.GPUs {
			if g.Memory < 0 {
				t.Fatalf("device memory %d from %q, %q", g.Memory, vram, memMax)
			}
		}
		for _, prob := range a.AcceleratorProblems(n) {
			if !strings.Contains(prob, "allocatable") && !strings.Contains(prob, "label ") {
				t.Fatalf("a problem that names no field: %q", prob)
			}
		}
		r, k := a.PodRequest(p)
		if r.GPUs < 0 || r.GPUs > 1<<21 {
			t.Fatalf("kind %+v: %d devices from %q of each resource", k, r.GPUs, asked)
		}
		// Nothing, or less than nothing, of every kind's resource asks no device of any.
		if q, err := resource.ParseQuantity(asked); err == nil && q.Sign() <= 0 && r.GPUs > 0 && k.Name != "" {
			t.Fatalf("kind %+v: %d devices from %q of each resource", k, r.GPUs, asked)
		}
	})
}
