package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Topology is where a job's pods must and would rather land in a hierarchy of node labels
// (a cluster's Topology object: zone ⊃ block ⊃ rack ⊃ host, say).
type Topology struct {
	// Levels are node label keys from the widest to the narrowest; Names are what people
	// call them (rack), for reasons.
	Levels, Names []string
	// Required is the index in Levels of the level one of whose domains must hold every
	// pod of the job; -1 for none. Nodes without that label are not in any domain of it.
	Required int
	// Preferred asks for the same without the obligation; -1 for none. Either one makes the
	// gang pack as tightly as the levels allow: into one domain of the narrowest level that
	// can hold it, choosing the fullest such domain so that large ones stay free for large
	// gangs.
	Preferred int
}

// levelName is what a reason calls level i.
func (t *Topology) levelName(i int) string {
	if i < len(t.Names) && t.Names[i] != "" {
		return t.Names[i]
	}
	return t.Levels[i]
}

// domainOf is node n's domain at level i: the values of the levels down to i, so that a
// rack named r1 in two blocks is two domains. ok is false if n lacks the label of level i.
func (t *Topology) domainOf(n *Node, i int) (string, bool) {
	v, ok := n.Labels[t.Levels[i]]
	if !ok {
		return "", false
	}
	if i == 0 {
		return v, true
	}
	var b strings.Builder
	for k := 0; k < i; k++ {
		b.WriteString(n.Labels[t.Levels[k]])
		b.WriteByte('/')
	}
	b.WriteString(v)
	return b.String(), true
}

// domain is one domain of a level: its key, the nodes of it a job may use (in the order
// given), and their free GPU capacity.
type domain struct {
	key   string
	nodes []*nodeState
	room  MilliGPU
	// parentRoom is the free capacity of the domain it belongs to one level up.
	parentRoom MilliGPU
}

// levelDomains holds, per level, every node's domain key by node index ("" for a node
// without the level's label, or with it empty: it is in no domain of it).
type levelDomains struct {
	keys [][]string
}

// domainKeys returns the session's cached domain keys for t's levels.
func (s *session) domainKeys(t *Topology) *levelDomains {
	id := strings.Join(t.Levels, "\x00")
	if d, ok := s.domains[id]; ok {
		return d
	}
	d := &levelDomains{keys: make([][]string, len(t.Levels))}
	for i := range t.Levels {
		d.keys[i] = make([]string, len(s.nodes))
		for _, n := range s.nodes {
			d.keys[i][n.idx], _ = t.domainOf(n.n, i)
		}
	}
	if s.domains == nil {
		s.domains = map[string]*levelDomains{}
	}
	s.domains[id] = d
	return d
}

// domainsAt groups nodes by their domain at level i, ordered fullest first (the least
// room), then by the room of their parent domain (a fuller block first), then by key.
func (s *session) domainsAt(t *Topology, nodes []*nodeState, i int) []*domain {
	keys := s.domainKeys(t).keys
	byKey := make(map[string]*domain, 64)
	out := make([]*domain, 0, 64)
	var parentRoom map[string]MilliGPU
	if i > 0 {
		parentRoom = make(map[string]MilliGPU, 16)
	}
	for _, n := range nodes {
		key := keys[i][n.idx]
		if key == "" {
			continue
		}
		d := byKey[key]
		if d == nil {
			d = &domain{key: key}
			byKey[key] = d
			out = append(out, d)
		}
		d.nodes = append(d.nodes, n)
		d.room += freeMilli(n)
		if i > 0 {
			parentRoom[keys[i-1][n.idx]] += freeMilli(n)
		}
	}
	for _, d := range out {
		if i > 0 {
			d.parentRoom = parentRoom[keys[i-1][d.nodes[0].idx]]
		}
	}
	sort.Slice(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if x.room != y.room {
			return x.room < y.room
		}
		if x.parentRoom != y.parentRoom {
			return x.parentRoom < y.parentRoom
		}
		return x.key < y.key
	})
	return out
}

// topologyNodes narrows nodes to those a job with a required level may use: nodes that
// have the level's label and, once some of its pods run, the domain they run in (an elastic
// job grows, and a gang gets a lost member back, inside its domain).
func (s *session) topologyNodes(j *jobState, nodes []*nodeState) []*nodeState {
	t := j.j.Topology
	if t == nil || t.Required < 0 {
		return nodes
	}
	keys := s.domainKeys(t).keys[t.Required]
	home := ""
	for _, p := range j.pods {
		if p.node != nil {
			home = keys[p.node.idx]
			break
		}
	}
	out := make([]*nodeState, 0, len(nodes))
	for _, n := range nodes {
		if d := keys[n.idx]; d != "" && (home == "" || d == home) {
			out = append(out, n)
		}
	}
	return out
}

// placeNearHome places the missing pods of a job already running (a gang getting a lost
// member back, an elastic job growing) as close to its running pods as the levels allow:
// within the first running pod's host, then its block, then its rack, no wider than
// widest; false, placing nothing, when none of those domains has room. Only the nodes of
// each such domain are ordered (emptiest first), not the cluster's.
func (s *session) placeNearHome(j *jobState, pods []*podState, nodes []*nodeState, widest int) bool {
	var home *nodeState
	for _, p := range j.pods {
		if p.node != nil {
			home = p.node
			break
		}
	}
	if home == nil {
		return false
	}
	keys := s.domainKeys(j.j.Topology).keys
	for i := len(keys) - 1; i >= widest; i-- {
		k := keys[i][home.idx]
		if k == "" {
			continue
		}
		var near []*nodeState
		for _, n := range nodes {
			if keys[i][n.idx] == k {
				near = append(near, n)
			}
		}
		if s.fillNodes(pods, s.emptiestFirst(j, near)) {
			return true
		}
	}
	return false
}

// placeInLevels places a gang into one domain of the narrowest level that can hold it,
// trying levels outwards; with a required level it never goes wider than that, otherwise
// it falls back to any nodes. order is the eligible nodes, emptiest first.
func (s *session) placeInLevels(j *jobState, pods []*podState, order []*nodeState) bool {
	t := j.j.Topology
	need := MilliGPU(s.need(pods)[j.res])
	widest := 0
	if t.Required >= 0 {
		widest = t.Required
	}
	for i := len(t.Levels) - 1; i >= widest; i-- {
		for _, d := range s.domainsAt(t, order, i) {
			if d.room >= need && s.fillNodes(pods, d.nodes) {
				return true
			}
		}
	}
	if t.Required >= 0 {
		return false
	}
	return s.fillNodes(pods, order)
}

// topologyReason says why a gang with a required level waits: no domain of that level is
// large enough at all, or none has enough free now, naming the one with the most.
func (s *session) topologyReason(j *jobState, pods []*podState, eligible []*nodeState) (Reason, bool) {
	t := j.j.Topology
	if t == nil || t.Required < 0 || len(pods) < 2 {
		return Reason{}, false
	}
	name := t.levelName(t.Required)
	nodes := s.topologyNodes(j, eligible)
	need := MilliGPU(s.need(pods)[j.res])
	if len(nodes) == 0 {
		return reasonf(ReasonConstraint, "needs one %s (allot.dev/topology-required): none of the nodes it may use has the label %s", name, t.Levels[t.Required]), true
	}
	var largest, freest *domain
	capOf := map[*domain]MilliGPU{}
	for _, d := range s.domainsAt(t, nodes, t.Required) {
		for _, n := range d.nodes {
			capOf[d] += MilliGPU(len(n.n.GPUs)) * OneGPU
		}
		if largest == nil || capOf[d] > capOf[largest] {
			largest = d
		}
		if freest == nil || d.room > freest.room {
			freest = d
		}
	}
	label := func(d *domain) string { return d.key[strings.LastIndexByte(d.key, '/')+1:] }
	if capOf[largest] < need {
		return reasonf(ReasonTooLarge, "needs %s GPUs within one %s (allot.dev/topology-required); the largest %s it may use has %s (%s)",
			need, name, name, capOf[largest], label(largest)), true
	}
	return reasonf(ReasonGangPartial, "gang of %d pods × %s must start together within one %s (allot.dev/topology-required); the most free in one %s is %s GPUs (%s)",
		len(pods), s.describe(j, pods[0].p.Request), name, name, freest.room, label(freest)), true
}

// topologyKey is what a job's topology adds to its shape: jobs that must fit one domain
// fit alike only with the same levels, and one already running is bound to its own domain.
func topologyKey(j *jobState) string {
	t := j.j.Topology
	if t == nil || t.Required < 0 {
		return ""
	}
	key := fmt.Sprintf("|t%s@%d", strings.Join(t.Levels, ","), t.Required)
	if slices.ContainsFunc(j.pods, func(p *podState) bool { return p.node != nil }) {
		key += "|" + string(j.j.ID)
	}
	return key
}
