package inspect

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotations the idle controller (kube/idle) writes on a workload's own object. Only Allot
// writes them, and only for people to read: the controller decides from its own memory of
// the nodes' reports, never from these, so a tenant who edits them changes only what is
// shown.
const (
	// AnnotationIdleSince is when every GPU the workload holds went under its queue's
	// idleThreshold (RFC 3339); absent while any is busy or unknown.
	AnnotationIdleSince = "allot.dev/idle-since"
	// AnnotationIdleSuspended says the workload was stopped for being idle: JSON of
	// IdleSuspension. Resuming it removes it.
	AnnotationIdleSuspended = "allot.dev/idle-suspended"
)

// Idle is what a workload's object says of its GPUs' idleness.
type Idle struct {
	// IdleSince is when its GPUs went idle; nil while busy or unknown.
	IdleSince *time.Time `json:"idleSince,omitempty"`
	// IdleSuspended is set while it is stopped for being idle.
	IdleSuspended *IdleSuspension `json:"idleSuspended,omitempty"`
}

// IdleSuspension is why and when a workload was stopped for being idle.
type IdleSuspension struct {
	At time.Time `json:"at"`
	// IdleFor is how long its GPUs had been idle.
	IdleFor metav1.Duration `json:"idleFor"`
	// Threshold is the utilisation, in percent, they all stayed under.
	Threshold int `json:"threshold"`
	// Queue is the queue whose idleTimeout applied, for Class (interactive, inference).
	Queue string `json:"queue"`
	Class string `json:"class"`
}

// Sentence is allot describe's line: "suspended after 2h idle (GPU utilisation under 5%,
// queue team-a's idleTimeout)".
func (s IdleSuspension) Sentence() string {
	verb := "suspended"
	if s.Class == "inference" {
		verb = "scaled to zero"
	}
	return fmt.Sprintf("%s after %s idle (GPU utilisation under %d%%, queue %s's idleTimeout)", verb, Short(s.IdleFor.Duration), s.Threshold, s.Queue)
}

// IdleFor is how long the workload's GPUs have been idle at now; zero when they are not.
func (i Idle) IdleFor(now time.Time) time.Duration {
	if i.IdleSince == nil || now.Before(*i.IdleSince) {
		return 0
	}
	return now.Sub(*i.IdleSince)
}

// readIdle reads the idle annotations of the workload's object; one that does not parse
// (edited by hand) is left out.
func (w *Workload) readIdle(m *metav1.ObjectMeta) {
	if v := m.Annotations[AnnotationIdleSince]; v != "" {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			w.IdleSince = &t
		}
	}
	if v := m.Annotations[AnnotationIdleSuspended]; v != "" {
		var s IdleSuspension
		if json.Unmarshal([]byte(v), &s) == nil {
			w.IdleSuspended = &s
		}
	}
}

// Short writes a duration as people do: 2h, 1h30m, 45s, without trailing zero units.
func Short(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := d/time.Hour, (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	out := ""
	if h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	if m > 0 {
		out += fmt.Sprintf("%dm", m)
	}
	if s > 0 || out == "" {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}
