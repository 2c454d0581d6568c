package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/kube/inspect"
)

// TestIdleColumnAndDescribeLine: allot list's IDLE is how long the GPUs have been idle, '-'
// when they are not; describe says why a workload stopped for being idle while it is
// suspended, and nothing of it once it runs again.
func TestIdleColumnAndDescribeLine(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-90 * time.Minute)
	if got := idleFor(inspect.Idle{IdleSince: &since}, now); got != "1h30m" {
		t.Fatalf("IDLE %q, want 1h30m", got)
	}
	if got := idleFor(inspect.Idle{}, now); got != "-" {
		t.Fatalf("IDLE of a busy workload %q, want -", got)
	}
	w := &inspect.Workload{Name: "nb-alice", Status: "Suspended", Idle: inspect.Idle{IdleSuspended: &inspect.IdleSuspension{
		At: now.Add(-time.Minute), IdleFor: metav1.Duration{Duration: 2 * time.Hour}, Threshold: 5, Queue: "team-a", Class: "interactive"}}}
	line := idleLine(w, now)
	if !strings.HasPrefix(line, "suspended after 2h idle (GPU utilisation under 5%, queue team-a's idleTimeout), 1m ago; allot resume nb-alice") {
		t.Fatalf("describe: %q", line)
	}
	w.Status = "Running"
	if line := idleLine(w, now); line != "" {
		t.Fatalf("describe of a resumed workload: %q", line)
	}
}
