package engine

import "fmt"

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
	PlacementBinPack Placement = iota // fill used nodes and partly used GPUs first
	PlacementSpread                   // prefer the emptiest node and GPU
)

func (p Placement) String() string {
	if p == PlacementSpread {
		return "spread"
	}
	return "binpack"
}

// ParsePlacement reads the user-facing spelling of a placement strategy.
func ParsePlacement(s string) (Placement, error) {
	switch s {
	case "binpack", "":
		return PlacementBinPack, nil
	case "spread":
		return PlacementSpread, nil
	}
	return 0, fmt.Errorf("unknown placement %q: allowed values are binpack, spread", s)
}
