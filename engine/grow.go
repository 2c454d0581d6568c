package engine

import "fmt"

// Growth is what an elastic workload may still add of itself: up to Max more pods, each
// asking Pod. Unlike a job's waiting pods these do not exist yet: the workload makes them
// once it is asked to (its replica count raised), so the engine only says how many would
// fit now (Plan.Grow) and places none of them.
type Growth struct {
	Max int
	Pod PodRequest
}

// grow finds, for each started elastic job with nothing left waiting, how many more of
// its members would fit on what the cycle left free: first within its queue's fair share,
// then on idle GPUs lent over it (rule 11), never by evicting anything, since a member
// that does not exist yet must not stop one that runs. The trial placements are undone:
// the members, once made, are placed by the next cycles as any other waiting pod, so a
// job that grew one member per cycle and one that grew four at once end alike.
//
// Jobs take turns, one member each per round, so that two elastic jobs share what is free
// rather than the first taking all of it. A job whose pods need the placement rules of
// other pods (affinity, spread) is left out: those rules are asked of pods that exist.
func (s *session) grow() map[JobID]GrowBy {
	var jobs []*jobState
	for _, j := range s.jobs {
		g := j.j.Growth
		if g == nil || g.Max <= 0 || j.stopped || !j.started() || j.bound < len(j.pods) ||
			(j.filter != nil && j.filter.f.Dynamic) {
			continue
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil
	}
	cp := s.checkpoint()
	sizes := make([]int, len(jobs))
	for i, j := range jobs {
		sizes[i] = len(j.pods)
	}
	grown := map[JobID]int{}
	lent := map[JobID]int{}
	for _, mode := range []gateMode{gateFairShare, gateIdle} {
		fails := failCache{}
		open := append([]*jobState(nil), jobs...)
		for len(open) > 0 {
			next := open[:0]
			for _, j := range open {
				if grown[j.j.ID] >= j.j.Growth.Max {
					continue
				}
				n := grown[j.j.ID]
				p := &Pod{ID: PodID(fmt.Sprintf("%s#grow-%d", j.j.ID, n)), Request: j.j.Growth.Pod}
				ps := &podState{p: p, job: j, idx: len(j.pods)}
				j.pods = append(j.pods, ps)
				if _, ok := s.start(j, []*podState{ps}, mode, fails); !ok {
					j.pods = j.pods[:len(j.pods)-1]
					continue
				}
				grown[j.j.ID] = n + 1
				if mode == gateIdle {
					lent[j.j.ID]++
				}
				next = append(next, j)
			}
			open = next
		}
	}
	s.rollback(cp)
	for i, j := range jobs {
		j.pods = j.pods[:sizes[i]]
	}
	var out map[JobID]GrowBy
	for id, n := range grown {
		if n > 0 {
			if out == nil {
				out = map[JobID]GrowBy{}
			}
			out[id] = GrowBy{Members: n, Lent: lent[id]}
		}
	}
	return out
}

// GrowBy is how many members an elastic workload should be asked for, and how many of
// them fit only on idle GPUs lent over its queue's fair share (taken back first when
// their owners want them).
type GrowBy struct {
	Members, Lent int
}
