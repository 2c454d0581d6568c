package podfit

import (
	"context"
	"encoding/json"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Cycle is one scheduling cycle's view: the cluster as the snapshot was taken, and the
// binds and unbinds the engine has made since. It implements engine.PlacementRules.
type Cycle struct {
	ctx    context.Context
	c      *Checker
	nodes  []fwk.NodeInfo
	byName map[string]fwk.NodeInfo
	// cur holds copies of the nodes the engine changed, with its binds and unbinds.
	cur  map[string]*framework.NodeInfo
	pods map[engine.PodID]*corev1.Pod
	// log lists the engine's changes in order; a pod's state replays what it has not seen.
	log     []change
	dyn     map[engine.PodID]*dynPod
	filters map[string]*engine.NodeFilter
	// repels: some pod of the cluster has required anti-affinity, so every placement is
	// checked against it.
	repels bool
	// nodeObjs and bound build the view with pods when one is needed (full).
	nodeObjs []*corev1.Node
	bound    []*corev1.Pod
	full     bool
	scores   bool // some node has a PreferNoSchedule taint
}

type change struct {
	info fwk.PodInfo
	node string
	add  bool
}

// dynPod is one pod's PreFilter state for the dynamic plugins.
type dynPod struct {
	pod     *corev1.Pod // what the plugins see: without the resources the engine counts
	state   fwk.CycleState
	failed  *fwk.Status // PreFilter refused every node
	applied int         // log entries replayed into state
}

// Begin starts a cycle. pods are every pod the informer holds (any scheduler's, bound or
// not); ours maps the engine's pod IDs to the pods the cycle schedules.
func (c *Checker) Begin(ctx context.Context, nodes []*corev1.Node, pods []*corev1.Pod, ours map[engine.PodID]*corev1.Pod) *Cycle {
	var bound []*corev1.Pod
	cy := &Cycle{ctx: ctx, c: c, pods: ours, cur: map[string]*framework.NodeInfo{}, dyn: map[engine.PodID]*dynPod{},
		filters: map[string]*engine.NodeFilter{}}
	for _, p := range pods {
		if hasRequiredAntiAffinity(p) {
			cy.repels = true
		}
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			bound = append(bound, p)
		}
	}
	for _, n := range nodes {
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectPreferNoSchedule {
				cy.scores = true
			}
		}
	}
	cy.nodeObjs, cy.bound = nodes, bound
	cy.use(cache.NewSnapshot(nil, nodes))
	return cy
}

// use makes snap the cycle's view of the cluster (as the cycle began), for the plugins'
// PreFilter and for Fits.
func (cy *Cycle) use(snap *cache.Snapshot) {
	cy.c.lister.snap = snap
	cy.nodes, _ = snap.NodeInfos().List()
	sort.Slice(cy.nodes, func(a, b int) bool { return cy.nodes[a].Node().Name < cy.nodes[b].Node().Name })
	cy.byName = make(map[string]fwk.NodeInfo, len(cy.nodes))
	for _, ni := range cy.nodes {
		cy.byName[ni.Node().Name] = ni
	}
}

// withPods puts every bound pod into the cycle's view. Most static plugins read only the
// node, so a cycle builds the pods' part (the costliest, at a PodInfo per pod) only once a
// pod needs it: one with volumes, or the in-cycle rules.
func (cy *Cycle) withPods() {
	if !cy.full {
		cy.full = true
		cy.use(cache.NewSnapshot(cy.bound, cy.nodeObjs))
	}
}

// shape is what the static plugins read of a pod; pods of one shape share a filter. A
// pod's nodeName is left out: a pod the user bound by name never waits for a scheduler,
// and a running pod's says where it is, not where it may go (consolidation asks).
type shape struct {
	Namespace    string
	NodeSelector map[string]string
	NodeAffinity *corev1.NodeAffinity
	Tolerations  []corev1.Toleration
	Volumes      []corev1.VolumeSource // placementVolumes
	Dynamic      bool
}

func (c *Checker) shapeOf(p *corev1.Pod, repels bool) shape {
	sh := shape{Namespace: p.Namespace, NodeSelector: p.Spec.NodeSelector,
		Tolerations: p.Spec.Tolerations, Volumes: placementVolumes(p), Dynamic: repels || c.needsRules(p)}
	if a := p.Spec.Affinity; a != nil {
		sh.NodeAffinity = a.NodeAffinity
	}
	return sh
}

// key tells shapes apart: equal keys, equal filters.
func (sh shape) key() string {
	raw, _ := json.Marshal(sh)
	return string(raw)
}

// placementVolumes are the sources of the pod's volumes that a static plugin reads: claims,
// ephemeral claims and disks attached from outside. The service account's token volume
// that the API server adds to nearly every pod (kube-api-access-XXXXX, named apart per
// pod), ConfigMaps, Secrets, emptyDirs, downward API and host paths bear on no node's
// fitness: keyed by them, every pod was a shape of its own and ran the filters on every
// node, a third of the scheduler's time draining a backlog of 2,000 pods.
func placementVolumes(p *corev1.Pod) []corev1.VolumeSource {
	var out []corev1.VolumeSource
	for _, v := range p.Spec.Volumes {
		s := v.VolumeSource
		if s.Projected != nil || s.ConfigMap != nil || s.Secret != nil || s.EmptyDir != nil || s.DownwardAPI != nil || s.HostPath != nil {
			continue
		}
		out = append(out, s)
	}
	return out
}

// NodeFilter is the engine's filter for a job whose pods look like p.
func (cy *Cycle) NodeFilter(p *corev1.Pod) *engine.NodeFilter {
	sh := cy.c.shapeOf(p, cy.repels)
	key := sh.key()
	if f, ok := cy.filters[key]; ok {
		return f
	}
	f := cy.staticFilter(p, sh)
	cy.filters[key] = f
	return f
}

func (cy *Cycle) staticFilter(p *corev1.Pod, sh shape) *engine.NodeFilter {
	if len(sh.Volumes) > 0 {
		cy.withPods() // VolumeRestrictions looks for other pods using the same claims
	}
	// The plugins only read the pod: a shallow copy without the node name will do.
	q := *p
	q.Spec.NodeName = ""
	f := &engine.NodeFilter{Dynamic: sh.Dynamic}
	state := framework.NewCycleState()
	_, st, _ := cy.c.static.RunPreFilterPlugins(cy.ctx, state, &q)
	if !st.IsSuccess() {
		f.Excluded = st.Message() // every node: kube-scheduler says it once, without a count
		return f
	}
	why := map[string]int{}
	var allowed []fwk.NodeInfo
	for _, ni := range cy.nodes {
		if st := cy.c.static.RunFilterPlugins(cy.ctx, state, &q, ni); !st.IsSuccess() {
			for _, r := range st.Reasons() {
				why[r]++
			}
			continue
		}
		f.Allowed = append(f.Allowed, engine.NodeID(ni.Node().Name))
		allowed = append(allowed, ni)
	}
	f.Excluded = engine.CountedReasons(why)
	if len(allowed) > 1 && (cy.scores || preferredNodes(&q)) {
		f.Preference = cy.preference(state, &q, allowed)
	}
	return f
}

// preference scores the allowed nodes with kube-scheduler's NodeAffinity and
// TaintToleration scores (preferred node affinity, PreferNoSchedule taints).
func (cy *Cycle) preference(state fwk.CycleState, p *corev1.Pod, nodes []fwk.NodeInfo) map[engine.NodeID]int64 {
	if st := cy.c.static.RunPreScorePlugins(cy.ctx, state, p, nodes); !st.IsSuccess() && !st.IsSkip() {
		return nil
	}
	scores, st := cy.c.static.RunScorePlugins(cy.ctx, state, p, nodes)
	if !st.IsSuccess() {
		return nil
	}
	out := make(map[engine.NodeID]int64, len(scores))
	differ := false
	for _, s := range scores {
		out[engine.NodeID(s.Name)] = s.TotalScore
		differ = differ || s.TotalScore != scores[0].TotalScore
	}
	if !differ {
		return nil
	}
	return out
}

func preferredNodes(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0
}

// needsRules reports whether a pod's placement depends on other pods' places or on
// resources the engine does not count: then the dynamic plugins judge each placement.
func (c *Checker) needsRules(p *corev1.Pod) bool {
	if a := p.Spec.Affinity; a != nil {
		if (a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) ||
			(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) {
			return true
		}
	}
	for _, t := range p.Spec.TopologySpreadConstraints {
		if t.WhenUnsatisfiable == corev1.DoNotSchedule {
			return true
		}
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, ctr := range cs {
			for _, port := range ctr.Ports {
				if port.HostPort > 0 {
					return true
				}
			}
			for _, rl := range []corev1.ResourceList{ctr.Resources.Requests, ctr.Resources.Limits} {
				for name := range rl {
					if !c.engineCounts(name) {
						return true
					}
				}
			}
		}
	}
	for name := range p.Spec.Overhead {
		if !c.engineCounts(name) {
			return true
		}
	}
	return false
}

// engineCounts names the resources the engine accounts for itself: CPU, memory, NVIDIA's
// GPUs and the devices of the accelerator kinds the scheduler has on (CountedByEngine).
func (c *Checker) engineCounts(name corev1.ResourceName) bool {
	return name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == v1alpha1.GPUResource || c.counted[name]
}

// stripped is the pod as the dynamic plugins judge it: without CPU, memory and GPUs,
// which the engine places itself (so that a victim the engine evicts frees them).
func (c *Checker) stripped(p *corev1.Pod) *corev1.Pod {
	q := p.DeepCopy()
	strip := func(rl corev1.ResourceList) {
		for name := range rl {
			if c.engineCounts(name) {
				delete(rl, name)
			}
		}
	}
	for _, cs := range [][]corev1.Container{q.Spec.InitContainers, q.Spec.Containers} {
		for i := range cs {
			strip(cs[i].Resources.Requests)
			strip(cs[i].Resources.Limits)
		}
	}
	strip(q.Spec.Overhead)
	return q
}

// Fits implements engine.PlacementRules with kube-scheduler's filters: resources the
// engine does not count, host ports, pod affinity and anti-affinity, topology spread.
func (cy *Cycle) Fits(pod engine.PodID, node engine.NodeID) bool {
	return cy.filter(pod, node).IsSuccess()
}

func (cy *Cycle) filter(pod engine.PodID, node engine.NodeID) *fwk.Status {
	d := cy.dynOf(pod)
	if d == nil {
		return nil // not ours: nothing to judge
	}
	if d.failed != nil {
		return d.failed
	}
	cy.replay(d)
	ni := cy.nodeInfo(string(node))
	if ni == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) not found")
	}
	return cy.c.dynamic.RunFilterPlugins(cy.ctx, d.state, d.pod, ni)
}

func (cy *Cycle) dynOf(id engine.PodID) *dynPod {
	if d, ok := cy.dyn[id]; ok {
		return d
	}
	p := cy.pods[id]
	if p == nil {
		return nil
	}
	cy.withPods()
	d := &dynPod{pod: cy.c.stripped(p), state: framework.NewCycleState()}
	d.pod.Spec.NodeName = ""
	if _, st, _ := cy.c.dynamic.RunPreFilterPlugins(cy.ctx, d.state, d.pod); !st.IsSuccess() {
		d.failed = st
	}
	cy.dyn[id] = d
	return d
}

// replay brings a pod's PreFilter state up to the engine's latest changes, through the
// plugins' own AddPod/RemovePod extensions (as kube-scheduler's preemption does).
func (cy *Cycle) replay(d *dynPod) {
	for ; d.applied < len(cy.log); d.applied++ {
		ch := cy.log[d.applied]
		ni := cy.nodeInfo(ch.node)
		if ch.add {
			cy.c.dynamic.RunPreFilterExtensionAddPod(cy.ctx, d.state, d.pod, ch.info, ni)
		} else {
			cy.c.dynamic.RunPreFilterExtensionRemovePod(cy.ctx, d.state, d.pod, ch.info, ni)
		}
	}
}

func (cy *Cycle) nodeInfo(name string) fwk.NodeInfo {
	if ni, ok := cy.cur[name]; ok {
		return ni
	}
	return cy.byName[name]
}

// current is the node's copy that the engine's changes go to.
func (cy *Cycle) current(name string) *framework.NodeInfo {
	if ni, ok := cy.cur[name]; ok {
		return ni
	}
	cy.withPods() // before the first copy: copies are taken of the view with pods
	orig, ok := cy.byName[name].(*framework.NodeInfo)
	if !ok {
		return nil
	}
	ni := orig.SnapshotConcrete()
	cy.cur[name] = ni
	return ni
}

// Placed implements engine.PlacementRules.
func (cy *Cycle) Placed(pod engine.PodID, node engine.NodeID) {
	if info, ni := cy.onNode(pod, node); info != nil {
		ni.AddPodInfo(info)
		cy.log = append(cy.log, change{info: info, node: string(node), add: true})
	}
}

// Removed implements engine.PlacementRules.
func (cy *Cycle) Removed(pod engine.PodID, node engine.NodeID) {
	if info, ni := cy.onNode(pod, node); info != nil && ni.RemovePod(klog.FromContext(cy.ctx), info.Pod) == nil {
		cy.log = append(cy.log, change{info: info, node: string(node), add: false})
	}
}

// onNode is one of ours as a pod on the node, and the node's copy for the engine's changes.
func (cy *Cycle) onNode(pod engine.PodID, node engine.NodeID) (*framework.PodInfo, *framework.NodeInfo) {
	p := cy.pods[pod]
	ni := cy.current(string(node))
	if p == nil || ni == nil {
		return nil, nil
	}
	// A shallow copy placed on the node: the plugins and NodeInfo only read it.
	q := *p
	q.Spec.NodeName = string(node)
	info, err := framework.NewPodInfo(&q)
	if err != nil {
		return nil, nil
	}
	return info, ni
}

// Why implements engine.PlacementRules: kube-scheduler's reasons, counted over nodes.
func (cy *Cycle) Why(pod engine.PodID, nodes []engine.NodeID) string {
	why := map[string]int{}
	for _, n := range nodes {
		st := cy.filter(pod, n)
		if st.IsSuccess() {
			continue
		}
		for _, r := range st.Reasons() {
			why[r]++
		}
	}
	return engine.CountedReasons(why)
}

var _ engine.PlacementRules = (*Cycle)(nil)
