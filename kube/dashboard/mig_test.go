package dashboard

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// An A100 in MIG mode that Allot lays out, a 3g of team-a's and a 1g of team-b's on it, an
// idle 1g: the state the pages get carries the layout (instances by place, held or idle,
// dynamic), the GPU counts as its instances' shares, and a tenant of team-a is shown
// team-b's instance as another namespace's.
func TestStateShowsMIGLayouts(t *testing.T) {
	inv, _ := json.Marshal([]v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: true,
		MIGInstances: []v1alpha1.MIGInstance{{Profile: "3g.40gb", Start: 4, UUID: "MIG-a"}, {Profile: "1g.10gb", Start: 0, UUID: "MIG-b"}, {Profile: "1g.10gb", Start: 1, UUID: "MIG-c"}}}})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a100-1",
		Labels:      map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelMIGDynamic: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUInventory: string(inv)}}}
	pod := func(ns, name, booked string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1alpha1.LabelQueue: ns},
			Annotations: map[string]string{v1alpha1.AnnotationMIG: strings.Split(booked, "@")[0], v1alpha1.AnnotationMIGInstances: "GPU-0/" + booked}},
			Spec: corev1.PodSpec{NodeName: "a100-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	st := Build(Input{Nodes: []*corev1.Node{n}, Objects: inspect.Objects{Pods: []*corev1.Pod{pod("team-a", "train", "3g.40gb@4"), pod("team-b", "nb", "1g.10gb@0")}}})
	if st.Totals.GPUs != 1 || st.Totals.Allocated != 0.57 || st.Totals.SharedGPUs != 1 {
		t.Errorf("totals %+v: want 1 GPU, 0.57 of it allocated (a 3g and a 1g of seven), shared by two pods", st.Totals)
	}
	b, _ := json.Marshal(st.Nodes)
	for _, want := range []string{`"mig":{"model":"A100-80GB","dynamic":true,"memorySlices":8,"memoryMi":81920,"instances":[`,
		`{"profile":"1g.10gb","start":0,"slices":1,"share":0.142,"uuid":"MIG-b","pod":"team-b/nb"}`,
		`{"profile":"1g.10gb","start":1,"slices":1,"share":0.142,"uuid":"MIG-c"}`,
		`{"profile":"3g.40gb","start":4,"slices":4,"share":0.428,"uuid":"MIG-a","pod":"team-a/train"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the nodes' JSON lacks %s:\n%s", want, b)
		}
	}
	before, _ := json.Marshal(st)
	got := Filter(st, viewer{namespaces: []string{"team-a"}})
	if after, _ := json.Marshal(st); string(after) != string(before) {
		t.Fatal("Filter changed the state it was given")
	}
	l := got.Nodes[0].GPUs[0].MIG
	if l.Instances[0].Pod != OtherNamespace || l.Instances[2].Pod != "team-a/train" || l.Instances[1].Pod != "" {
		t.Errorf("a tenant of team-a is shown the instances %+v", l.Instances)
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), "team-b") {
		t.Errorf("a tenant of team-a is shown team-b:\n%s", b)
	}
}

// A node whose device plugin advertises MIG instances, without the agent: the layout is the
// advertised instances on as few GPUs as hold them, fixed.
func TestStateShowsAdvertisedMIG(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a100-2", Labels: map[string]string{v1alpha1.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", v1alpha1.LabelGPUMemory: "81920"}}}
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("2")}
	st := Build(Input{Nodes: []*corev1.Node{n}})
	if len(st.Nodes) != 1 || len(st.Nodes[0].GPUs) != 1 {
		t.Fatalf("nodes %+v", st.Nodes)
	}
	l := st.Nodes[0].GPUs[0].MIG
	if l == nil || l.Dynamic || len(l.Instances) != 2 || l.Instances[0].Name() != "3g.40gb@0" || l.Instances[1].Name() != "3g.40gb@4" {
		t.Errorf("advertised layout %+v, want two idle 3g.40gb at 0 and 4, fixed", l)
	}
}
