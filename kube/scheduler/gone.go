package scheduler

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/engine"
)

// goneMembers notes, as the pod watch sees them, the gang members that left a node:
// deleted (by a person, or by the taint-eviction controller after their node died),
// terminating, or failed (their GPU died). When such a gang is stopped for running short,
// its reason names them and their nodes, so that the owner sees what broke the gang.
type goneMembers struct {
	mu sync.Mutex
	by map[engine.JobID][]goneMember
}

type goneMember struct {
	name, node string
	at         time.Time // when the watch showed it leaving
}

// goneCap bounds what is kept per gang: a gang of thousands losing a rack names the first.
const goneCap = 8

func (g *goneMembers) note(p *corev1.Pod) {
	group := p.Labels[LabelPodGroup]
	if group == "" || p.Spec.NodeName == "" || p.Spec.SchedulerName != SchedulerName {
		return
	}
	id := engine.JobID(p.Namespace + "/" + group)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.by == nil {
		g.by = map[engine.JobID][]goneMember{}
	}
	known := slices.ContainsFunc(g.by[id], func(m goneMember) bool { return m.name == p.Name })
	if !known && len(g.by[id]) < goneCap {
		g.by[id] = append(g.by[id], goneMember{name: p.Name, node: p.Spec.NodeName, at: time.Now()})
	}
}

// of names the members job lost that are not among those bound now, "name on node".
func (g *goneMembers) of(job engine.JobID, bound map[string]bool) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, m := range g.by[job] {
		if !bound[m.name] {
			out = append(out, m.name+" on "+m.node)
		}
	}
	slices.Sort(out)
	return out
}

// keep forgets what it noted before the snapshot taken at now of the gangs that
// snapshot does not show running partly: one whole again, or gone, starts afresh. A member
// noted since is kept for the next cycle, whose snapshot shows it gone.
func (g *goneMembers) keep(partly map[engine.JobID]bool, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, ms := range g.by {
		if partly[id] {
			continue
		}
		if ms = slices.DeleteFunc(ms, func(m goneMember) bool { return m.at.Before(now) }); len(ms) == 0 {
			delete(g.by, id)
		} else {
			g.by[id] = ms
		}
	}
}
