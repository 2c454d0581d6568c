package realnode_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A container asking nvidia.com/gpu: 2 of the real kubelet is given, through the device
// plugin's CDI names and containerd's CDI injection, exactly two GPU device nodes and the
// control devices; its neighbour asking none sees no NVIDIA device at all.
//
//	real-1: nvidia0 nvidia1 nvidia2 nvidia3
//	  pod whole: [main: nvidia.com/gpu 2] [side: none]
func TestWholeGPUPodSeesExactlyItsDevices(t *testing.T) {
	need(t)
	main := script("main")
	main.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	seen := runAndRead(t, shellPod("whole", "whole", main, script("side")), "main", "side")
	var gpus []string
	for _, d := range seen["main"].NVIDIA() {
		if d != "nvidiactl" && d != "nvidia-uvm" && d != "nvidia-uvm-tools" {
			gpus = append(gpus, d)
		}
	}
	t.Logf("main sees /dev/%v; side sees %v", seen["main"].NVIDIA(), seen["side"].NVIDIA())
	if len(gpus) != 2 {
		t.Fatalf("main sees GPU devices %v (all of /dev: %v), want exactly two /dev/nvidiaN", gpus, seen["main"].Dev)
	}
	for _, want := range []string{"nvidiactl", "nvidia-uvm"} {
		if !slices.Contains(seen["main"].Dev, want) {
			t.Errorf("main lacks /dev/%s, which NVIDIA's spec gives every GPU container: %v", want, seen["main"].Dev)
		}
	}
	if got := seen["side"].NVIDIA(); len(got) != 0 {
		t.Errorf("side asked for no GPU and sees %v", got)
	}
}
