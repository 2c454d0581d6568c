package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/kube/simgpu"
)

// allot agent inventory on go-nvml's mock of a DGX A100: the inventory the agent writes,
// each device's compute mode and events, the load it samples, and an XID raised while it
// watches. On a real GPU the same command is what docs/gpu-nodes.md shows.
func TestAgentInventoryPrintsWhatTheAgentReads(t *testing.T) {
	m := simgpu.DGXA100()
	m.SetLoad(3, 87, 12345)
	go func() {
		time.Sleep(300 * time.Millisecond)
		m.RaiseXID(5, 48)
	}()
	var out bytes.Buffer
	if err := printInventory(context.Background(), &out, m, 2, 100*time.Millisecond, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		`"uuid":"` + m.UUID(7) + `"`,
		`"memoryMiB":40960`,
		"GPU 0 " + m.UUID(0) + ": compute mode DEFAULT; events it delivers: single-bit-ecc,double-bit-ecc,xid-critical",
		"sample 2: utilization [0 0 0 87 0 0 0 0] %, memory used [0 0 0 12345 0 0 0 0] MiB, lost []",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// One event, two sets waiting on the mock's one channel: whichever takes it says so.
	if !strings.Contains(text, "GPU 5 failed: XID 48 (double-bit ECC error)") && !strings.Contains(text, "raw event: xid-critical data 48 on "+m.UUID(5)) {
		t.Errorf("the XID raised is not in the output:\n%s", text)
	}
}
