package engine

import (
	"fmt"
	"slices"
	"strings"
)

// Typed identifiers keep a node name from being passed where a queue name is expected.
type (
	NodeID  string
	QueueID string
	JobID   string
	PodID   string
)

// Class is the kind of workload; it decides preemptibility by default.
type Class int

const (
	ClassTrain Class = iota
	ClassInteractive
	ClassInference
)

var classNames = [...]string{"train", "interactive", "inference"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// ParseClass reads the user-facing spelling of a class.
func ParseClass(s string) (Class, error) {
	for i, n := range classNames {
		if n == s {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("unknown class %q: allowed values are train, interactive, inference", s)
}

// Preemptibility overrides the class default (DESIGN.md 3.3).
type Preemptibility int

const (
	PreemptibleDefault Preemptibility = iota // train: yes; interactive and inference: no
	PreemptibleYes
	PreemptibleNo
)

func (p Preemptibility) String() string {
	switch p {
	case PreemptibleYes:
		return "true"
	case PreemptibleNo:
		return "false"
	default:
		return "default"
	}
}

// Placement is the node- and GPU-level placement strategy.
type Placement int

const (
	// PlacementAllot is the default: FGD's measure of fragmentation (the free GPU capacity
	// each expected pod shape could not use) together with the capacity left over after
	// packing as many pods of each shape as the node's devices, CPU and memory allow, ties
	// broken by packing. It beats the published FGD results on the Alibaba trace.
	PlacementAllot      Placement = iota
	PlacementBinPack              // fill used nodes and partly used GPUs first
	PlacementSpread               // prefer the emptiest node and GPU
	PlacementRandom               // any node and GPU that fit, drawn with the seed
	PlacementBestFit              // the node with the least capacity left after
	PlacementGPUPacking           // shared GPUs first, then partly used nodes, then empty ones
	PlacementFGD                  // fragmentation gradient descent (Weng et al., ATC'23)
)

var placementNames = [...]string{"allot", "binpack", "spread", "random", "best-fit", "gpu-packing", "fgd"}

func (p Placement) String() string {
	if int(p) < len(placementNames) {
		return placementNames[p]
	}
	return fmt.Sprintf("Placement(%d)", int(p))
}

// PlacementNames lists every placement policy by its user-facing name.
func PlacementNames() []string { return slices.Clone(placementNames[:]) }

// ParsePlacement reads the user-facing spelling of a placement strategy.
func ParsePlacement(s string) (Placement, error) {
	if s == "" || s == "default" {
		return PlacementAllot, nil
	}
	for i, n := range placementNames {
		if n == s {
			return Placement(i), nil
		}
	}
	return 0, fmt.Errorf("unknown placement %q: allowed values are %s", s, strings.Join(placementNames[:], ", "))
}
