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
	HostIP string    `json:"hostIP,omitempty"` // the node's address, where a NodePort is reached
	GPUs   string    `json:"gpus,omitempty"`   // device indices, with the share of a shared one
	Asks   float64   `json:"gpusRequested"`
	Phase  string    `json:"phase"`
	Reason string    `json:"reason,omitempty"`
	// Group is the gang it belongs to (allot.dev/pod-group): the scheduler names the job
	// by it in what it tells the pods it moves or stops.
	Group string `json:"podGroup,omitempty"`
	// Translated is what the webhook read from another scheduler's names (HAMi's,
	// KAI-Scheduler's) and wrote as Allot's (allot.dev/translated).
	Translated string `json:"translated,omitempty"`
	// GPUMemory is a dynamic fraction's memory (a slice with a limit past its request):
	// its request, its limit and what it was last measured to hold; nil for other pods.
	GPUMemory *GPUMemory `json:"gpuMemory,omitempty"`
	// devices are the indices of its GPUs on its node, shared whether it holds a slice of
	// them, sliceUsedMi what its agent last measured it to hold of a shared one: what
	// withUse reads.
	devices     []int
	shared      bool
	sliceUsedMi *int64
}

// GPUMemory is a dynamic fraction's GPU memory. Each amount is in MiB, 0 where it is not
// known (a fraction's memory before the bind booked it on a GPU of some size).
type GPUMemory struct {
	RequestMi int64 `json:"requestMi,omitempty"`
	// Fraction is the fraction asked, where the request is one (-g 0.25).
	Fraction float64 `json:"fraction,omitempty"`
	LimitMi  int64   `json:"limitMi,omitempty"`
	// FractionLimit is the limit as asked, where it is a fraction (--gpu-fraction-limit).
	FractionLimit float64 `json:"fractionLimit,omitempty"`
	// UsedMi is what its processes hold, as its node's agent last measured it
	// (allot.dev/gpu-memory-used-mib); nil before any measure.
	UsedMi *int64 `json:"usedMi,omitempty"`
}

// PastRequestMi is what the pod holds past its request, lent while no request needs it;
// 0 when it holds no more than it asked, or either is not known.
func (m *GPUMemory) PastRequestMi() int64 {
	if m.UsedMi == nil || m.RequestMi == 0 {
		return 0
	}
	return max(*m.UsedMi-m.RequestMi, 0)
}

// podGPUMemory reads a pod's dynamic fraction: the request as the bind booked it (else as
// asked), the limit (a fraction of the GPU in MiB where the booking tells the GPU's size),
// and the agent's measure.
func podGPUMemory(p *corev1.Pod) *GPUMemory {
	share, err := v1alpha1.ParseGPUShare(p.Annotations)
	if err != nil || (share.MemoryLimit == 0 && share.FractionLimit == 0) {
		return nil
	}
	m := &GPUMemory{RequestMi: share.Memory >> 20, Fraction: share.Fraction, LimitMi: share.MemoryLimit >> 20, FractionLimit: share.FractionLimit}
	booked, _ := v1alpha1.ParseBookedSlice(p.Annotations)
	if booked > 0 {
		m.RequestMi = booked >> 20
	}
	if share.FractionLimit > 0 && share.Fraction > 0 && booked > 0 {
		// A fraction's booking is that part of its GPU: the limit is the same part, larger.
		m.LimitMi = int64(float64(booked>>20) / share.Fraction * share.FractionLimit)
	}
	m.UsedMi = podMemoryUsed(p)
	return m
}

// podMemoryUsed is the GPU memory a pod sharing a GPU held at its agent's last reading
// (allot.dev/gpu-memory-used-mib); nil where none was read.
func podMemoryUsed(p *corev1.Pod) *int64 {
	if v, err := strconv.ParseInt(strings.TrimSpace(p.Annotations[v1alpha1.AnnotationPodGPUMemoryUsed]), 10, 64); err == nil && v >= 0 && v < 1<<30 {
		return &v
	}
	return nil
}

// PodGPUs is what a pod asks: whole GPUs, or its fraction of one (a memory request counts
// as its placed share once bound, else 0); a pod of MIG instances, their part of a GPU.
func PodGPUs(p *corev1.Pod) float64 {
	if share, ok := migShare(p); ok {
		return share
	}
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
