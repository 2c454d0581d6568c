package engine

import (
	"cmp"
	"math/bits"
	"slices"
)

// exactMax bounds the candidates on one node an exact search weighs (2^10 sets), and
// exactTrials the sets it tries there, the cheapest first.
const (
	exactMax    = 10
	exactTrials = 128
	exactNodes  = 4
)

// tryExact weighs every set of the node's candidates that would free enough for the pods,
// the fewest GPUs first (then the fewest victims), and keeps the first the rules allow.
// Walking the candidates in victim order finds a set quickly, but not always one the rules
// allow when one exists: taking the queue furthest over its share first can take it below
// what it must keep where a larger unit of it, or the job's own lower-priority work, would
// have left it there. With few candidates every set is cheap to try.
func (vs *victimSearch) tryExact(s *session, n *nodeState, cands []unit) (trial, bool) {
	var units []unit
	for _, u := range cands {
		if u.bound() {
			units = append(units, u)
		}
	}
	if len(units) == 0 || len(units) > exactMax {
		return trial{}, false
	}
	need := s.need(vs.pods)[vs.job.res]
	free := int64(freeMilli(n))
	type set struct {
		mask uint
		gpu  int64
	}
	var sets []set
	for mask := uint(1); mask < 1<<len(units); mask++ {
		var g int64
		for i, u := range units {
			if mask&(1<<i) != 0 {
				g += u.gpu
			}
		}
		if free+g >= need {
			sets = append(sets, set{mask, g})
		}
	}
	slices.SortStableFunc(sets, func(a, b set) int {
		return cmp.Or(cmp.Compare(a.gpu, b.gpu), cmp.Compare(bits.OnesCount(a.mask), bits.OnesCount(b.mask)))
	})
	for k, st := range sets {
		if k == exactTrials {
			break
		}
		var order []unit
		for i, u := range units {
			if st.mask&(1<<i) != 0 {
				order = append(order, u)
			}
		}
		if t, ok := vs.tryOrder(s, n, order); ok {
			return t, true
		}
	}
	return trial{}, false
}
