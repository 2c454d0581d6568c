package trace

import (
	"math/rand/v2"

	"github.com/allot-dev/allot/engine"
)

// Capacity is the cluster's GPU count in MilliGPU.
func Capacity(nodes []engine.Node) engine.MilliGPU {
	var c engine.MilliGPU
	for _, n := range nodes {
		c += engine.MilliGPU(len(n.GPUs)) * engine.OneGPU
	}
	return c
}

// Tune follows the published protocol's workload step: starting from the pod list, append
// copies of pods drawn uniformly at random from the original list while the total GPU
// demand stays within target, stopping before the first copy that would pass it.
func Tune(pods []Pod, target engine.MilliGPU, rng *rand.Rand) []Pod {
	out := append([]Pod(nil), pods...)
	var total engine.MilliGPU
	for _, p := range pods {
		total += p.Demand()
	}
	if len(pods) == 0 {
		return out
	}
	for total < target {
		p := pods[rng.IntN(len(pods))]
		if total+p.Demand() > target {
			break
		}
		out = append(out, p)
		total += p.Demand()
	}
	return out
}

// Shuffle orders the pods with the seeded generator (Fisher–Yates).
func Shuffle(pods []Pod, rng *rand.Rand) {
	rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
}

// NewRand is the generator of one seed; tuning and shuffling both draw from it.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }
