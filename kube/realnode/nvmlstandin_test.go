package realnode

import (
	"context"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/allot-dev/allot/kube/agent"
)

// The NVML stand-in answers the agent's own inventory and sampling through go-nvml's real
// loader (dlopen, cgo calls), as the chart's agent container calls it.
func TestNVMLStandInAnswersTheAgent(t *testing.T) {
	wd, _ := os.Getwd()
	lib, err := buildNVMLStandIn(context.Background(), t.TempDir(), wd)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{opts: Options{Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		GPUs: []GPU{{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"}}}
	t.Setenv(nvmlEnv, n.nvmlGPUs())
	lib2 := nvml.New(nvml.WithLibraryPath(lib))
	if r := lib2.Init(); r != nvml.SUCCESS {
		t.Fatalf("Init: %v", r)
	}
	defer lib2.Shutdown()
	inv, err := agent.ReadInventory(lib2)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) != 2 || inv[0].UUID != "GPU-aaaa" || inv[1].UUID != "GPU-bbbb" || inv[1].Model != "NVIDIA H100 80GB HBM3" || inv[1].MemoryMiB != 81559 || inv[0].MIG {
		t.Fatalf("inventory %+v", inv)
	}
	s := agent.ReadSample(lib2, len(inv))
	if s.Utilization[0] != 0 || s.MemoryUsed[1] != 0 || len(s.Lost) != 0 {
		t.Fatalf("sample %+v", s)
	}
	// A function the stand-in does not answer reads as unsupported, not a missing symbol.
	d, _ := lib2.DeviceGetHandleByIndex(0)
	if _, r := d.GetPowerUsage(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("GetPowerUsage: %v, want NOT_SUPPORTED", r)
	}
}
