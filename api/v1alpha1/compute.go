package v1alpha1

import (
	"fmt"
	"slices"
	"strings"
)

// How a slice's compute share holds when the GPU's other sharers are idle. Its memory is
// held to its share whatever the mode, and the booked compute (what fair share counts) is
// the same in each: only what the process may use beyond it changes.
const (
	// ComputeCapped holds the slice to its share at all times (MPS's active thread
	// percentage; HAMi-core's SM limit, forced): what a team serving a model wants of its
	// neighbours. The default.
	ComputeCapped = "capped"
	// ComputeFair holds it to its share only while others use the GPU (HAMi-core's own
	// utilisation policy); on MPS, which has no cap that applies only under contention, it
	// is ComputeShared.
	ComputeFair = "fair"
	// ComputeShared caps no compute: the driver time-slices the GPU among its sharers (or
	// MPS shares its SMs among its clients), and time an idle neighbour leaves goes to the
	// others: what a team of notebooks wants.
	ComputeShared = "shared"
)

// ComputeModes are the modes, strictest first.
var ComputeModes = []string{ComputeCapped, ComputeFair, ComputeShared}

// LabelComputeMode on a node says the loosest compute mode its admin allows its sharing
// pods (the node's agent writes it: --compute, the chart's agent.pools[].compute); absent
// means ComputeCapped. AnnotationComputeMode on a pod is the mode its owner asks, within
// what its node allows: a stricter one is honoured, a looser one held to the node's.
const (
	LabelComputeMode      = "allot.dev/gpu-compute-mode"
	AnnotationComputeMode = "allot.dev/gpu-compute-mode"
)

// ParseComputeMode reads a compute mode named by field (a label or an annotation): ""
// where unset.
func ParseComputeMode(field, v string) (string, error) {
	if v == "" || slices.Contains(ComputeModes, v) {
		return v, nil
	}
	return "", fmt.Errorf("%s: %q is not one of %s", field, v, strings.Join(ComputeModes, ", "))
}

// EffectiveCompute is the mode a sharing pod runs in on a node: the stricter of what the
// node allows and what the pod asks (either unset or unknown: capped for the node, the
// node's for the pod).
func EffectiveCompute(node, pod string) string {
	n := slices.Index(ComputeModes, node)
	if n < 0 {
		n = 0
	}
	if p := slices.Index(ComputeModes, pod); p >= 0 && p < n {
		return ComputeModes[p]
	}
	return ComputeModes[n]
}
