package agent

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// An agent that restarts finds the MPS daemons its earlier run started still serving pods
// (their control pipes are there). It must neither start a second daemon for a GPU still
// shared nor leave running the daemon of a GPU no longer shared:
//
//	GPU a: daemon left, still shared   → kept
//	GPU b: daemon left, no longer shared → quit
//	GPU c: no daemon, now shared        → started
//
// NVIDIA publishes no fake of nvidia-cuda-mps-control: a stand-in records its calls.
func TestRestartedAgentAdoptsItsMPSDaemons(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	calls := bin + "/calls"
	script := "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES $* $(cat)\" >> " + calls + "\n"
	if err := os.WriteFile(bin+"/mps-control", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"GPU-a", "GPU-b"} {
		dir := v1alpha1.MPSDir(root, u) + "/pipe"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(dir+"/control", 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{opts: Options{Node: "n1", SharingRoot: root, MPSControl: bin + "/mps-control"}, declared: v1alpha1.SharingMPS,
		inv: []v1alpha1.GPUInfo{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}}, mps: map[string]bool{}}
	reservation := func(name, uuid string) any {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.SystemNamespace,
			Labels:      map[string]string{v1alpha1.LabelReservation: "true"},
			Annotations: map[string]string{v1alpha1.AnnotationGPUDevices: uuid}}}
	}
	a.syncMPS(context.Background(), []any{reservation("r-a", "GPU-a"), reservation("r-c", "GPU-c")})
	b, _ := os.ReadFile(calls)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	want := []string{"GPU-c -d", "GPU-b quit"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q", got, want)
	}
}
