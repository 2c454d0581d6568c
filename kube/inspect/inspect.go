// Package inspect reads what the CLI shows from a cluster running Allot: workloads with
// their pods, GPUs and state, queues, and who holds each GPU of each node. The reading is
// separate from the printing so that tables, JSON and YAML show the same thing.
package inspect

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Pod is one pod of a workload.
type Pod struct {
	Name   string    `json:"name"`
	UID    types.UID `json:"uid,omitempty"`
	Node   string    `json:"node,omitempty"`
	GPUs   string    `json:"gpus,omitempty"` // device indices, with the share of a shared one
	Asks   float64   `json:"gpusRequested"`
	Phase  string    `json:"phase"`
	Reason string    `json:"reason,omitempty"`
	// Translated is what the webhook read from another scheduler's names (HAMi's,
	// KAI-Scheduler's) and wrote as Allot's (allot.dev/translated).
	Translated string `json:"translated,omitempty"`
}

// PodGPUs is what a pod asks: whole GPUs, or its fraction of one (a memory request counts
// as its placed share once bound, else 0).
func PodGPUs(p *corev1.Pod) float64 {
	if n := v1alpha1.WholeGPUs(p); n > 0 {
		return float64(n)
	}
	if share, err := strconv.Atoi(p.Annotations[v1alpha1.AnnotationGPUShare]); err == nil && share > 0 {
		return float64(share) / 1000
	}
	if idx := p.Annotations[v1alpha1.AnnotationGPUs]; len(p.Spec.ResourceClaims) > 0 && idx != "" {
		// Its GPUs through DRA claims: the scheduler wrote the devices they hold in the
		// bind. (Waiting, what its claims ask is in the claims, not the pod.)
		return float64(len(strings.Split(idx, ",")))
	}
	if s, err := v1alpha1.ParseGPUShare(p.Annotations); err == nil {
		return s.Fraction
	}
	return 0
}

func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// waitingReason is the scheduler's reason on a pending pod.
func waitingReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// EventTime is when an event last happened.
func EventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
