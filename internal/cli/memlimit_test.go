package cli

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// The chart's ALLOT_MEMORY_LIMIT becomes the Go runtime's soft limit, at 90%; GOMEMLIMIT,
// where an admin set it, wins; a value that is not bytes is refused naming the variable.
func TestMemoryLimitFromTheContainer(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv(envMemoryLimit, "1073741824")
	if got, err := applyMemoryLimit(); err != nil || got != 966367641 || debug.SetMemoryLimit(-1) != 966367641 {
		t.Errorf("1 GiB: set %d (%v), runtime %d; want 90%% of it", got, err, debug.SetMemoryLimit(-1))
	}
	t.Setenv("GOMEMLIMIT", "2GiB")
	debug.SetMemoryLimit(math.MaxInt64)
	if got, err := applyMemoryLimit(); err != nil || got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT: set %d (%v), runtime %d; want none", got, err, debug.SetMemoryLimit(-1))
	}
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv(envMemoryLimit, "1Gi")
	if _, err := applyMemoryLimit(); err == nil || !strings.Contains(err.Error(), "ALLOT_MEMORY_LIMIT=\"1Gi\" is not allowed") {
		t.Errorf("1Gi: %v, want a refusal naming the variable", err)
	}
}
