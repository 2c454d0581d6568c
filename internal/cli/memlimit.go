package cli

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
)

// envMemoryLimit is the variable the Helm chart fills with the scheduler container's
// memory limit, in bytes (a resourceFieldRef on limits.memory).
const envMemoryLimit = "ALLOT_MEMORY_LIMIT"

// memoryLimitShare is the part of the container's limit the Go runtime is told to keep to:
// the rest is room for what it does not count (thread stacks, cgo) and for a moment's
// overshoot, short of the kernel's OOM kill.
const memoryLimitShare = 0.9

// applyMemoryLimit tells the Go runtime the container's memory limit, unless GOMEMLIMIT
// already does. Without it the collector lets the heap grow to twice what is live, and a
// restart is when the most arrives at once (805 MiB of RSS at 140,000 pods,
// docs/performance.md; 1.3 GiB before other schedulers' pods were shared and trimmed once):
// a limit sized for the steady state would see the scheduler killed as it starts on the
// clusters it is most needed on. With it the collector works harder near the limit instead.
// It returns the limit set (0: none) and an error naming the variable when it is not bytes.
func applyMemoryLimit() (int64, error) {
	v := os.Getenv(envMemoryLimit)
	if v == "" || os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q is not allowed: the container's memory limit in bytes, a positive whole number (the chart fills it from resources.limits.memory)", envMemoryLimit, v)
	}
	limit := int64(float64(n) * memoryLimitShare)
	debug.SetMemoryLimit(limit)
	slog.Info("allot scheduler: Go memory limit set from the container's", "limitBytes", n, "goMemLimitBytes", limit)
	return limit, nil
}
