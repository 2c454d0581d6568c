package engine

import (
	"fmt"
	"math"
	"time"
)

// Usage is a queue's past use of GPUs above its quota: GPU-seconds in which every second
// counts for half as much after each half-life, as of At. The engine only reads it (as
// Queue.Usage); whoever drives the engine keeps it between cycles (the Kubernetes scheduler
// in the Queue's status, the simulator in memory) and advances it with Accrue.
//
// Only use above quota counts: a quota is a guarantee, and a team that uses its own GPUs
// all week has borrowed nothing, so it is owed the same part of the idle GPUs as one that
// used none.
type Usage struct {
	GPUSeconds float64
	At         time.Time
}

// DefaultUsageHalfLife is how fast past use is forgotten unless told otherwise (the
// scheduler's and the simulator's --usage-half-life): it counts half after a day and an
// eighth after three, so last week matters and last month hardly.
const DefaultUsageHalfLife = 24 * time.Hour

// CheckUsageStrength says what is wrong with a strength for Options.UsageStrength, for
// the caller to put after the flag or field it came from.
func CheckUsageStrength(k float64) error {
	if k < 0 || math.IsNaN(k) || math.IsInf(k, 0) {
		return fmt.Errorf("%v is not allowed: a number 0 or more (0 ignores past use; 1 lets a queue that alone used everything get none of the idle GPUs while others want them)", k)
	}
	return nil
}

// Accrue returns the usage at `to`, given that the queue held `gpus` GPUs above its quota
// since u.At. The integral of a constant rate under exponential decay is exact, so it does
// not matter how often it is called.
func (u Usage) Accrue(to time.Time, gpus float64, halfLife time.Duration) Usage {
	if u.At.IsZero() || !to.After(u.At) {
		if u.At.IsZero() {
			u.At = to
		}
		return u
	}
	dt := to.Sub(u.At).Seconds()
	if halfLife <= 0 {
		// No memory: usage is the present rate only, over the last second.
		return Usage{GPUSeconds: max(gpus, 0), At: to}
	}
	lambda := math.Ln2 / halfLife.Seconds()
	keep := math.Exp(-lambda * dt)
	return Usage{GPUSeconds: u.GPUSeconds*keep + max(gpus, 0)*(1-keep)/lambda, At: to}
}

// Decayed is the usage at t with nothing more used since u.At.
func (u Usage) Decayed(t time.Time, halfLife time.Duration) float64 {
	return u.Accrue(t, 0, halfLife).GPUSeconds
}

// AboveQuota is how many GPUs a queue holds beyond its quota in a plan's accounting: the
// rate at which its usage grows.
func AboveQuota(q Queue, st QueueStatus) float64 {
	var over int64
	for r := Resource(0); r < numResources; r++ {
		if r.NVIDIA() {
			// Each pool divided apart has its own quota: what is above one is not
			// offset by another's room.
			over += max(st.Allocated[r]-q.Resources[r].Quota, 0)
		}
	}
	return float64(over) / float64(OneGPU)
}

// tiltByUsage lowers the over-quota weight of siblings that used more than their weighted
// part of what was above quota in the past and raises the others', by strength k:
//
//	w'ᵢ = W · max(0, wᵢ/W + k·(wᵢ/W − uᵢ/U))
//
// where W and U are the members' total weight and usage. The tilts add up to zero, so the
// members divide the same amount; with k = 0, or no usage, nothing changes. With k = 1 a
// queue that alone used everything gets nothing of the idle GPUs while the others want
// them (but still all that they leave: water-filling lends what nobody else takes).
func tiltByUsage(weights []float64, members []int, kids []*queueState, k float64) {
	if k <= 0 {
		return
	}
	var w, u float64
	for _, i := range members {
		w += max(weights[i], 0)
		u += max(kids[i].q.Usage, 0)
	}
	if w <= 0 || u <= 0 {
		return
	}
	for _, i := range members {
		ws, us := max(weights[i], 0)/w, max(kids[i].q.Usage, 0)/u
		weights[i] = w * max(0, ws+k*(ws-us))
	}
}
