package inspect

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/submit"
)

// migNode is a node whose agent reports these devices, all in MIG mode.
func migNode(t *testing.T, name string, dynamic bool, inv []v1alpha1.GPUInfo, wishes []v1alpha1.MIGWish) *corev1.Node {
	t.Helper()
	raw, _ := json.Marshal(inv)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUInventory: string(raw), v1alpha1.AnnotationAgent: "test"}}}
	if dynamic {
		n.Labels[v1alpha1.LabelMIGDynamic] = "true"
	}
	if wishes != nil {
		w, _ := json.Marshal(wishes)
		n.Annotations[v1alpha1.AnnotationMIGWanted] = string(w)
	}
	return n
}

func migPodOn(name, node string, ann map[string]string, res corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Annotations: ann},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: res}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// Two A100s in MIG mode with fixed layouts and one Allot lays out:
//
//	fixed-1 GPU 0: 3g.40gb@0 ml/byhand (bound by hand: the first free 3g), 3g.40gb@4 ml/train (where the bind booked it)
//	fixed-1 GPU 1: 1g.10gb@0 in use by no Allot pod, 1g.10gb@1 ml/rec (the agent's record), 2g.20gb@4 idle (ml/done finished)
//	dyn-1   GPU 0: 1g.10gb@0 ml/nb, 3g.40gb@4 being made for ml/wait, which waits on it
func migCluster(t *testing.T) []Node {
	mig3g := corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}
	fixed := migNode(t, "fixed-1", false, []v1alpha1.GPUInfo{
		{Index: 0, UUID: "GPU-f0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true,
			MIGInstances: []v1alpha1.MIGInstance{{Profile: "3g.40gb", Start: 4, UUID: "MIG-b"}, {Profile: "3g.40gb", Start: 0, UUID: "MIG-a"}}},
		{Index: 1, UUID: "GPU-f1", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true,
			MIGInstances: []v1alpha1.MIGInstance{{Profile: "1g.10gb", Start: 0, UUID: "MIG-c", InUse: true}, {Profile: "1g.10gb", Start: 1, UUID: "MIG-d"},
				{Profile: "2g.20gb", Start: 4, UUID: "MIG-e"}}},
	}, nil)
	dyn := migNode(t, "dyn-1", true, []v1alpha1.GPUInfo{
		{Index: 0, UUID: "GPU-d0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true,
			MIGInstances: []v1alpha1.MIGInstance{{Profile: "1g.10gb", Start: 0, UUID: "MIG-f"}, {Profile: "1g.10gb", Start: 5, UUID: "MIG-g"}}},
	}, []v1alpha1.MIGWish{{GPU: "GPU-d0", Profile: "3g.40gb", Start: 4, Pod: "ml/wait"}, {GPU: "GPU-d0", Profile: "2g.20gb", Start: 2, Pod: "ml/gone"}})
	done := migPodOn("done", "fixed-1", map[string]string{v1alpha1.AnnotationMIGInstances: "GPU-f1/2g.20gb@4"}, corev1.ResourceList{"nvidia.com/mig-2g.20gb": resource.MustParse("1")})
	done.Status.Phase = corev1.PodSucceeded
	wait := migPodOn("wait", "", map[string]string{v1alpha1.AnnotationMIG: "3g.40gb"}, nil)
	wait.Status.Phase = corev1.PodPending
	pods := []*corev1.Pod{
		migPodOn("train", "fixed-1", map[string]string{v1alpha1.AnnotationMIGInstances: "GPU-f0/3g.40gb@4"}, mig3g),
		migPodOn("byhand", "fixed-1", nil, mig3g),
		migPodOn("rec", "fixed-1", map[string]string{v1alpha1.AnnotationGPUDevices: "MIG-d"}, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}),
		done,
		migPodOn("nb", "dyn-1", map[string]string{v1alpha1.AnnotationMIG: "1g.10gb", v1alpha1.AnnotationMIGInstances: "GPU-d0/1g.10gb@0"}, nil),
		wait,
	}
	return BuildNodes([]*corev1.Node{fixed, dyn}, pods)
}

func layoutOf(l *MIGLayout) string {
	var out []string
	for _, in := range l.Instances {
		s := in.Name() + "="
		switch {
		case in.Making:
			s += "making:" + in.Pod
		case in.InUse:
			s += "in use"
		case in.Pod == "":
			s += "idle"
		default:
			s += in.Pod
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// Each MIG GPU shows its instances by place and who holds each, as the scheduler books
// them: where the kubelet gave them (the agent's record), where the bind booked them, or
// for a pod bound by hand the first free of its profile; an instance the scheduler asked
// the agent for, for a pod that still waits, in place of the idle one in its way; the
// agent's word on an instance used by no pod of Allot's. The GPU's allocation is its
// instances' shares (a 3g of seven compute slices is 0.428).
func TestMIGLayoutsAndHolders(t *testing.T) {
	nodes := migCluster(t)
	if len(nodes) != 2 || nodes[0].Name != "dyn-1" || nodes[1].Name != "fixed-1" {
		t.Fatalf("nodes %+v", nodes)
	}
	dyn, fixed := nodes[0], nodes[1]
	if len(fixed.GPUs) != 2 || fixed.GPUs[0].MIG == nil || fixed.GPUs[1].MIG == nil || fixed.GPUs[0].MIG.Dynamic || fixed.GPUs[0].MIG.Model != "A100-80GB" {
		t.Fatalf("fixed-1's GPUs %+v", fixed.GPUs)
	}
	for _, c := range []struct {
		what string
		l    *MIGLayout
		want string
		free string
	}{
		{"fixed-1 GPU 0", fixed.GPUs[0].MIG, "3g.40gb@0=ml/byhand 3g.40gb@4=ml/train", ""},
		{"fixed-1 GPU 1", fixed.GPUs[1].MIG, "1g.10gb@0=in use 1g.10gb@1=ml/rec 2g.20gb@4=idle", "2-3, 6-7"},
		// ml/gone's wish is stale: no such pod waits. The idle 1g at 5 is in ml/wait's way.
		{"dyn-1 GPU 0", dyn.GPUs[0].MIG, "1g.10gb@0=ml/nb 3g.40gb@4=making:ml/wait", "1-3"},
	} {
		if got := layoutOf(c.l); got != c.want {
			t.Errorf("%s: %s, want %s", c.what, got, c.want)
		}
		if got := strings.Join(c.l.FreeSlices(), ", "); got != c.free {
			t.Errorf("%s: free slices %q, want %q", c.what, got, c.free)
		}
	}
	if !dyn.GPUs[0].MIG.Dynamic {
		t.Error("dyn-1 is labelled allot.dev/mig-dynamic: its GPU is Allot's to lay out")
	}
	g := fixed.GPUs[0]
	if len(g.Holders) != 2 || g.Holders[0].Pod != "ml/byhand" || g.MIG.Held("ml/byhand") != "3g.40gb@0" || g.Holders[0].Share != 0.428 || g.Used != 0.856 {
		t.Errorf("fixed-1 GPU 0 held %+v, used %v; want ml/byhand and ml/train, 3g each (0.428), 0.856 in all", g.Holders, g.Used)
	}
	if fixed.Allocated != 0.856+0.142 || fixed.GPUs[1].FreeMi != 20480 {
		t.Errorf("fixed-1 allocated %v, GPU 1 free %d MiB; want 0.998 and the idle 2g's 20480", fixed.Allocated, fixed.GPUs[1].FreeMi)
	}
	// Making for ml/wait is not yet held: the GPU counts ml/nb's 1g alone, and has the
	// slices neither takes free to lay out (3 of 8).
	if d := dyn.GPUs[0]; d.Used != 0.142 || len(d.Holders) != 1 || d.FreeMi != 81920*3/8 {
		t.Errorf("dyn-1 GPU 0 used %v by %+v, %d MiB free; want ml/nb's 0.142 and 30720 MiB", d.Used, d.Holders, d.FreeMi)
	}
}

// A MIG request fits where a fixed layout has that many instances of the profile, or a GPU
// Allot lays out has it; where none does, the error names what the nodes give and the
// flag that asks it.
func TestFitsMIG(t *testing.T) {
	nodes := migCluster(t)
	for _, r := range []submit.Request{
		{Pods: 1, MIG: "3g.40gb", MIGCount: 2},
		{Pods: 1, MIG: "4g.40gb", MIGCount: 1, MIGDynamic: true},
		{Pods: 1, MIG: "smallest", MIGCount: 1, MIGDynamic: true, MemoryMi: 30000},
		{Pods: 7, MIG: "1g.10gb", MIGCount: 1, MIGDynamic: true},
	} {
		if err := Fits(nodes, r); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, c := range []struct {
		r    submit.Request
		want string
	}{
		{submit.Request{Pods: 1, MIG: "3g.40gb", MIGCount: 3}, "--mig 3g.40gb --gpu-count 3: no node can hold it: the most 3g.40gb instances on one node of the cluster's nodes is 2 (fixed-1)"},
		{submit.Request{Pods: 1, MIG: "4g.40gb", MIGCount: 1}, "--mig 4g.40gb: no node of the cluster's nodes has a 4g.40gb instance in a fixed layout (the device plugin's nvidia.com/mig-4g.40gb); " +
			"Allot lays out MIG on dyn-1 (A100-80GB: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb): ask with --mig-dynamic PROFILE (or smallest); " +
			"fixed layouts offer fixed-1 (1g.10gb ×2, 2g.20gb ×1, 3g.40gb ×2): ask with --mig PROFILE"},
		{submit.Request{Pods: 1, MIG: "4g.20gb", MIGCount: 1, MIGDynamic: true}, "--mig-dynamic 4g.20gb: no GPU Allot lays out on the cluster's nodes (nodes labelled allot.dev/mig-dynamic=true) has that profile; Allot lays out MIG on dyn-1"},
		{submit.Request{Pods: 1, MIG: "smallest", MIGCount: 1, MIGDynamic: true, MemoryMi: 100000}, "--mig-dynamic smallest: no GPU Allot lays out on the cluster's nodes has an instance that holds the slice asked"},
		{submit.Request{Pods: 8, MIG: "1g.10gb", MIGCount: 1, MIGDynamic: true}, "a gang of 8 pods of 1 1g.10gb instance(s) each starts whole or not at all, and the cluster's nodes hold 7 such pods at most"},
		{submit.Request{Pods: 1, GPUs: 1}, "every GPU of the cluster's nodes is in MIG mode, given out only as instances: ask one with --mig PROFILE (a fixed layout's) or --mig-dynamic PROFILE (one Allot lays out)"},
		{submit.Request{Pods: 1, MemoryMi: 8192}, "every GPU of the cluster's nodes is in MIG mode"},
	} {
		if err := Fits(nodes, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v,\nwant %q", c.r, err, c.want)
		}
	}
	// Without a dynamic node the dynamic request is told there is none; without MIG at all,
	// so is any MIG request.
	if err := Fits(nodes[1:], submit.Request{Pods: 1, MIG: "3g.40gb", MIGCount: 1, MIGDynamic: true}); err == nil ||
		!strings.Contains(err.Error(), "--mig-dynamic 3g.40gb: no GPU Allot lays out on the cluster's nodes (nodes labelled allot.dev/mig-dynamic=true) has that profile; fixed layouts offer fixed-1") {
		t.Errorf("no dynamic node: %v", err)
	}
	whole := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1"}}
	whole.Status.Allocatable = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("8")}
	if err := Fits(BuildNodes([]*corev1.Node{whole}, nil), submit.Request{Pods: 1, MIG: "1g.10gb", MIGCount: 1}); err == nil ||
		!strings.Contains(err.Error(), "--mig 1g.10gb: no GPU of the cluster's nodes is in MIG mode") {
		t.Errorf("no MIG at all: %v", err)
	}
}

// A dynamic fraction's pod carries its request as booked, its limit (a fraction of the
// GPU in MiB once the booking says the GPU's size) and the agent's measure; a slice without
// a limit carries none.
func TestDynamicFractionMemory(t *testing.T) {
	pod := func(name string, ann map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Annotations: ann, Labels: map[string]string{v1alpha1.LabelQueue: "q"}},
			Spec: corev1.PodSpec{NodeName: "dgx-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		return p
	}
	ws := BuildWorkloads(Objects{Pods: []*corev1.Pod{
		pod("burst", map[string]string{v1alpha1.AnnotationGPUMemory: "10Gi", v1alpha1.AnnotationGPUMemoryLimit: "40Gi", v1alpha1.AnnotationPodGPUMemoryUsed: "12800"}),
		pod("frac", map[string]string{v1alpha1.AnnotationGPUFraction: "0.25", v1alpha1.AnnotationGPUFractionLimit: "0.75",
			v1alpha1.AnnotationGPUShareMemory: "21474836480"}),
		pod("plain", map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}),
	}})
	got := map[string]*GPUMemory{}
	for _, w := range ws {
		for _, p := range w.Pods {
			got[p.Name] = p.GPUMemory
		}
	}
	if m := got["burst"]; m == nil || m.RequestMi != 10240 || m.LimitMi != 40960 || m.UsedMi == nil || *m.UsedMi != 12800 || m.PastRequestMi() != 2560 {
		t.Errorf("burst: %+v, want 12800 MiB used of 10240 asked, limit 40960, 2560 past the request", m)
	}
	if m := got["frac"]; m == nil || m.Fraction != 0.25 || m.RequestMi != 20480 || m.FractionLimit != 0.75 || m.LimitMi != 61440 || m.UsedMi != nil || m.PastRequestMi() != 0 {
		t.Errorf("frac: %+v, want 0.25 booked as 20480 MiB, limit 0.75 = 61440 MiB, not measured", m)
	}
	if got["plain"] != nil {
		t.Errorf("a slice without a limit shows %+v", got["plain"])
	}
}
