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
						req = req.Add(s.pendingCost(p.p.Request))
					}
				}
			}
			d = req
		} else {
			for _, c := range q.children {
				d = d.Add(c.demand)
				req = req.Add(c.request)
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
		divide(s.capacity[r], s.roots, r, s.opts.UsageStrength)
	}
}

// divide hands amount to the siblings of one level and recurses into their children;
// past usage tilts the over-quota part of GPUs by strength (tiltByUsage).
func divide(amount int64, kids []*queueState, r Resource, strength float64) {
	if len(kids) == 0 {
		return
	}
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
	if r == ResourceGPU && amount%int64(OneGPU) == 0 {
		quantum = int64(OneGPU)
		for _, k := range kids {
			if k.demand[r]%int64(OneGPU) != 0 || k.deserved[r]%int64(OneGPU) != 0 {
				quantum = 1
				break
			}
		}
	}
	rank := rankByID(kids)
	if sumWant >= amount {
		// Quotas oversubscribe what this level has: split it in proportion to quota.
		weights := make([]float64, len(kids))
		for i, k := range kids {
			weights[i] = float64(k.q.Resources[r].Quota)
		}
		waterfill(amount, share, want, weights, all(len(kids)), quantum, rank)
	} else {
		copy(share, want)
	}
	if left := amount - sumWant; left > 0 {
		// Over quota, higher-priority queues are served first; equals share by weight.
		byPrio := all(len(kids))
		sort.SliceStable(byPrio, func(a, b int) bool { return kids[byPrio[a]].q.Priority > kids[byPrio[b]].q.Priority })
		for start := 0; start < len(byPrio) && left > 0; {
			end := start
			for end < len(byPrio) && kids[byPrio[end]].q.Priority == kids[byPrio[start]].q.Priority {
				end++
			}
			level := byPrio[start:end]
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
			if r == ResourceGPU {
				// Only those still wanting compare their past: a heavy user that wants
				// nothing more now takes nothing from anyone.
				tiltByUsage(weights, wanting, kids, strength)
			}
			extra := make([]int64, len(kids))
			left = waterfill(left, extra, caps, weights, level, quantum, rank)
			for _, i := range level {
				share[i] += extra[i]
			}
			start = end
		}
	}
	for i, q := range kids {
		q.fair[r] = share[i]
		divide(share[i], q.children, r, strength)
	}
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
// time by largest remainder (Hamilton's method), ties to the larger weight, then by rank.
// It returns what is left.
func waterfill(amount int64, out, caps []int64, weights []float64, members []int, quantum int64, rank []int) int64 {
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
				return rank[x] < rank[y]
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
