package engine

import (
	"math"
	"slices"
	"sort"
)

// computeFairShares divides the cluster top-down through the queue tree, per resource
// (DESIGN.md 3.1): every queue first gets min(quota, demand, limit); what is left goes to
// queues that still want more, by priority and then in proportion to overQuotaWeight,
// water-filling so that a queue needing less than its portion hands the rest back.
func (s *session) computeFairShares() {
	// The smallest waiting job of each queue, in GPUs: where a whole GPU is left over after
	// rounding, it goes where it lets a job start.
	next := map[Resource]map[*queueState]int64{}
	// Demand bottom-up: leaves from their jobs, parents from their children; limits cap both.
	for i := len(s.queues) - 1; i >= 0; i-- {
		q := s.queues[i]
		var d, req Resources
		if len(q.children) == 0 {
			for _, j := range q.jobs {
				for _, p := range j.pods {
					if p.node != nil {
						req = req.Add(p.cost)
					} else {
						req = req.Add(s.pendingCost(p.p.Request, j.res))
					}
				}
				if j.bound < len(j.pods) && (j.started() || len(j.pods) >= j.j.MinMember) {
					if g := s.nextGPUs(j, passGangs); g > 0 {
						m := next[j.res]
						if m == nil {
							m = map[*queueState]int64{}
							next[j.res] = m
						}
						if m[q] == 0 || g < m[q] {
							m[q] = g
						}
					}
				}
			}
			d = req
		} else {
			for _, c := range q.children {
				d = d.Add(c.demand)
				req = req.Add(c.request)
				for _, m := range next {
					if g := m[c]; g > 0 && (m[q] == 0 || g < m[q]) {
						m[q] = g
					}
				}
			}
		}
		for r := range d {
			if l := q.q.Resources[r].Limit; l != nil && d[r] > *l {
				d[r] = *l
			}
			q.deserved[r] = min(q.q.Resources[r].Quota, d[r])
		}
		q.demand, q.request = d, req
	}
	for r := Resource(0); r < numResources; r++ {
		if r >= resourceAccel0 && s.capacity[r] == 0 {
			continue // a kind the cluster has none of: every share stays 0
		}
		dv := division{r: r, strength: s.opts.UsageStrength, next: next[r]}
		dv.divide(s.capacity[r], s.roots)
	}
}

// division divides one resource through the tree; past usage tilts the over-quota part
// of GPUs by strength (tiltByUsage).
type division struct {
	r        Resource
	strength float64
	next     map[*queueState]int64 // the smallest waiting job per queue; GPUs only
}

// divide hands amount to the siblings of one level and recurses into their children.
func (dv *division) divide(amount int64, kids []*queueState) {
	if len(kids) == 0 {
		return
	}
	r := dv.r
	share := make([]int64, len(kids))
	want := make([]int64, len(kids))
	var sumWant int64
	for i, k := range kids {
		want[i] = max(k.deserved[r], 0)
		sumWant += want[i]
	}
	// Where every sibling's demand is in whole GPUs, shares are too: a share of 1.75
	// GPUs serves no job, and a queue must be able to reclaim for a job of its share.
	quantum := int64(1)
	if r.Accelerator() && amount%int64(OneGPU) == 0 {
		quantum = int64(OneGPU)
		for _, k := range kids {
			if k.demand[r]%int64(OneGPU) != 0 || k.deserved[r]%int64(OneGPU) != 0 {
				quantum = 1
				break
			}
		}
	}
	tb := dv.ties(kids)
	if sumWant >= amount {
		// Quotas oversubscribe what this level has: higher-priority queues get their
		// quotas first, and queues of one priority split what is left in proportion to
		// quota.
		weights := make([]float64, len(kids))
		for i, k := range kids {
			weights[i] = float64(k.q.Resources[r].Quota)
		}
		left := amount
		for _, level := range byPriority(kids) {
			left = waterfill(left, share, nil, want, weights, level, quantum, tb)
		}
	} else {
		copy(share, want)
	}
	if left := amount - sumWant; left > 0 {
		// Over quota, higher-priority queues are served first; equals share by weight.
		for _, level := range byPriority(kids) {
			if left == 0 {
				break
			}
			caps := make([]int64, len(kids))
			weights := make([]float64, len(kids))
			var wanting []int
			for _, i := range level {
				caps[i] = max(kids[i].demand[r]-share[i], 0)
				weights[i] = kids[i].q.Resources[r].Weight()
				if caps[i] > 0 {
					wanting = append(wanting, i)
				}
			}
			if r.NVIDIA() {
				// Only those still wanting compare their past: a heavy user that wants
				// nothing more now takes nothing from anyone.
				tiltByUsage(weights, wanting, kids, dv.strength)
			}
			extra := make([]int64, len(kids))
			left = waterfill(left, extra, share, caps, weights, level, quantum, tb)
			for _, i := range level {
				share[i] += extra[i]
			}
		}
	}
	for i, q := range kids {
		q.fair[r], q.grain[r] = share[i], quantum
		dv.divide(share[i], q.children)
	}
}

// byPriority groups the siblings by queue priority, highest first.
func byPriority(kids []*queueState) [][]int {
	idx := all(len(kids))
	sort.SliceStable(idx, func(a, b int) bool { return kids[idx[a]].q.Priority > kids[idx[b]].q.Priority })
	var levels [][]int
	for start := 0; start < len(idx); {
		end := start
		for end < len(idx) && kids[idx[end]].q.Priority == kids[idx[start]].q.Priority {
			end++
		}
		levels = append(levels, idx[start:end])
		start = end
	}
	return levels
}

// tieBreak orders siblings whose claims to one more quantum are equal (the same
// remainder and weight): never by the order queues were declared in, and by name only
// last.
type tieBreak struct {
	prio  []int32
	alloc []int64
	next  []int64 // the smallest waiting job; 0: none known
	rank  []int   // by name
}

func (dv *division) ties(kids []*queueState) *tieBreak {
	tb := &tieBreak{prio: make([]int32, len(kids)), alloc: make([]int64, len(kids)), next: make([]int64, len(kids)), rank: rankByID(kids)}
	for i, k := range kids {
		tb.prio[i], tb.alloc[i], tb.next[i] = k.q.Priority, k.alloc[dv.r], dv.next[k]
	}
	return tb
}

// first reports whether member x gets the next quantum before y, given what each has so
// far (has) and the quantum: the higher queue priority; then a queue that would be left
// with nothing it can use without the quantum (one holding nothing whose smallest waiting
// job fits its share only with it, or one whose only share it is and which uses it), so
// that no queue is left at 0 beside idle GPUs it could use; then a queue that already
// holds more than it has so far (it keeps the GPU it uses: taking it back would only
// evict), of two such the one holding more beyond it; then one whose waiting job the
// quantum lets start within its share; then the one holding less; then the name.
func (tb *tieBreak) first(x, y int, hasX, hasY, quantum int64) bool {
	if tb.prio[x] != tb.prio[y] {
		return tb.prio[x] > tb.prio[y]
	}
	if a, b := tb.starved(x, hasX, quantum), tb.starved(y, hasY, quantum); a != b {
		return a
	}
	if a, b := tb.alloc[x] > hasX, tb.alloc[y] > hasY; a != b {
		return a
	} else if a && tb.alloc[x]-hasX != tb.alloc[y]-hasY {
		// Both hold more than they have so far: the one holding more beyond it keeps the
		// quantum. Were it the one whose waiting job the quantum starts, two queues sharing
		// one GPU in slices would trade its share, and the slices, every cycle, each
		// reclaiming in turn for the job that waits (TestInvariantsOnRandomClusters).
		return tb.alloc[x]-hasX > tb.alloc[y]-hasY
	}
	if a, b := tb.starts(x, hasX, quantum), tb.starts(y, hasY, quantum); a != b {
		return a
	}
	if tb.alloc[x] != tb.alloc[y] {
		return tb.alloc[x] < tb.alloc[y]
	}
	return tb.rank[x] < tb.rank[y]
}

// starved: without one more quantum the queue would have nothing it can use: it holds
// nothing and its smallest waiting job fits its share only with the quantum, or the
// quantum is all its share and it uses it now.
func (tb *tieBreak) starved(i int, has, quantum int64) bool {
	if tb.alloc[i] == 0 {
		return tb.next[i] > has && tb.next[i] <= has+quantum
	}
	return has == 0
}

// starts: one more quantum lets the queue's smallest waiting job start within its share.
func (tb *tieBreak) starts(i int, has, quantum int64) bool {
	a := tb.alloc[i] + tb.next[i]
	return tb.next[i] > 0 && a > has && a <= has+quantum
}

func all(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// rankByID orders siblings by name, the tie-break of last resort: never the order in
// which queues were declared or listed by an informer.
func rankByID(kids []*queueState) []int {
	byID := all(len(kids))
	sort.Slice(byID, func(a, b int) bool { return kids[byID[a]].q.ID < kids[byID[b]].q.ID })
	rank := make([]int, len(kids))
	for pos, i := range byID {
		rank[i] = pos
	}
	return rank
}

// waterfill gives amount to the members in proportion to weight, none beyond its cap,
// passing what a capped member cannot take to the others. If every member still wanting
// has zero weight they share equally: idle capacity is lent rather than left idle.
// Portions are whole multiples of quantum; what flooring leaves goes one quantum at a
// time by largest remainder (Hamilton's method), ties to the larger weight, then as tb
// orders them (base[i] + out[i] is what member i has so far; base may be nil).
// It returns what is left.
func waterfill(amount int64, out, base, caps []int64, weights []float64, members []int, quantum int64, tb *tieBreak) int64 {
	has := func(i int) int64 {
		if base == nil {
			return out[i]
		}
		return base[i] + out[i]
	}
	active := make([]int, 0, len(members))
	for _, i := range members {
		if caps[i] > out[i] {
			active = append(active, i)
		}
	}
	exact := make([]float64, len(out))
	for amount > 0 && len(active) > 0 {
		var total float64
		for _, i := range active {
			total += math.Max(weights[i], 0)
		}
		weightOf := func(i int) float64 {
			if total == 0 {
				return 1
			}
			return math.Max(weights[i], 0)
		}
		sum := total
		if sum == 0 {
			sum = float64(len(active))
		}
		// Every member whose portion would pass its cap is filled and leaves the round.
		var saturated []int
		for _, i := range active {
			if float64(amount)*weightOf(i)/sum >= float64(caps[i]-out[i]) {
				saturated = append(saturated, i)
			}
		}
		if len(saturated) > 0 {
			for _, i := range saturated {
				give := min(caps[i]-out[i], amount) // float rounding must never overdraw
				out[i] += give
				amount -= give
			}
			active = slices.DeleteFunc(active, func(i int) bool { return out[i] >= caps[i] })
			continue
		}
		given := int64(0)
		for _, i := range active {
			exact[i] = float64(amount) * weightOf(i) / sum
			p := int64(exact[i]/float64(quantum)) * quantum
			p = min(p, caps[i]-out[i])
			exact[i] -= float64(p)
			out[i] += p
			given += p
		}
		amount -= given
		if amount > 0 {
			order := slices.Clone(active)
			sort.Slice(order, func(a, b int) bool {
				x, y := order[a], order[b]
				if exact[x] != exact[y] {
					return exact[x] > exact[y]
				}
				if weightOf(x) != weightOf(y) {
					return weightOf(x) > weightOf(y)
				}
				return tb.first(x, y, has(x), has(y), quantum)
			})
			for _, i := range order {
				if amount == 0 {
					break
				}
				if give := min(quantum, amount, caps[i]-out[i]); give > 0 && weightOf(i) > 0 {
					out[i] += give
					amount -= give
				}
			}
		}
		active = slices.DeleteFunc(active, func(i int) bool { return out[i] >= caps[i] })
	}
	return amount
}
