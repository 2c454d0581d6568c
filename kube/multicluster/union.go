package multicluster

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/workload"
)

// candidate is a manager's Job the union plans for: not dispatched yet, or dispatched to
// pinned while its pods are not seen there yet (so the room it will take is not handed
// out twice).
type candidate struct {
	job    *batchv1.Job
	pinned string
	// allowed are the clusters an unpinned candidate may go to (ready, not paused, its
	// queue kept there without conflict).
	allowed []string
}

func (c candidate) id() engine.JobID { return engine.JobID(c.job.Namespace + "/" + c.job.Name) }

// union is one engine snapshot over every worker's nodes and pods, with the manager's
// Queues (the global quotas) and the candidates as pending jobs.
type union struct {
	snap *engine.Snapshot
	// cluster of each node, and the nodes of each cluster.
	clusterOf map[engine.NodeID]string
	nodesOf   map[string][]engine.NodeID
	// podNode is where each pod of the union runs, for the evictions' clusters.
	podNode map[engine.PodID]engine.NodeID
}

// sep joins a cluster's name to a node's or a namespace's within the union; neither a
// node's name nor a namespace can hold it, so no two clusters' objects meet.
const sep = "/"

// buildUnion copies each worker's nodes and pods under its cluster's name (node label
// values of topology levels too, so that a rack of one cluster is never a rack of
// another), adds the candidates' pods, and builds the engine's snapshot as a scheduler
// cycle would.
func buildUnion(now time.Time, workers map[string][]*corev1.Node, pods map[string][]*corev1.Pod, queues []*v1alpha1.Queue,
	topologies map[string]convert.Levels, cands []candidate) *union {
	levelLabels := map[string]bool{}
	for _, l := range topologies {
		for _, k := range l.Labels {
			levelLabels[k] = true
		}
	}
	u := &union{clusterOf: map[engine.NodeID]string{}, nodesOf: map[string][]engine.NodeID{}, podNode: map[engine.PodID]engine.NodeID{}}
	var allNodes []*corev1.Node
	var allPods []*corev1.Pod
	clusters := make([]string, 0, len(workers))
	for c := range workers {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		for _, n := range workers[c] {
			cp := *n
			cp.ObjectMeta = *n.ObjectMeta.DeepCopy()
			cp.Name = c + sep + n.Name
			// The conversion caches by UID: two clusters' objects must never share one.
			cp.UID = types.UID(c + sep + string(n.UID))
			if cp.Labels == nil {
				cp.Labels = map[string]string{}
			}
			for k, v := range cp.Labels {
				if levelLabels[k] {
					cp.Labels[k] = c + sep + v
				}
			}
			cp.Labels[LabelNodeCluster] = c
			allNodes = append(allNodes, &cp)
			u.clusterOf[engine.NodeID(cp.Name)] = c
			u.nodesOf[c] = append(u.nodesOf[c], engine.NodeID(cp.Name))
		}
		for _, p := range pods[c] {
			cp := *p
			cp.Namespace = c + sep + p.Namespace
			cp.UID = types.UID(c + sep + string(p.UID))
			if p.Spec.NodeName != "" {
				cp.Spec.NodeName = c + sep + p.Spec.NodeName
			}
			allPods = append(allPods, &cp)
		}
	}
	groups := map[string]convert.Group{}
	for _, cd := range cands {
		ps, gang := candidatePods(cd.job)
		allPods = append(allPods, ps...)
		groups[string(cd.id())] = convert.Group{MinMember: int(gang), Created: cd.job.CreationTimestamp.Time}
	}
	u.snap = scheduler.Snapshot(now, allNodes, allPods, queues, groups, topologies)
	byID := map[engine.JobID]candidate{}
	for _, cd := range cands {
		byID[cd.id()] = cd
	}
	for i := range u.snap.Jobs {
		j := &u.snap.Jobs[i]
		for _, p := range j.Pods {
			if p.Binding != nil {
				u.podNode[p.ID] = p.Binding.Node
			}
		}
		if cd, ok := byID[j.ID]; ok {
			u.constrainCandidate(j, cd)
			continue
		}
		// A worker's own waiting job may start only in its cluster.
		if c, _, ok := strings.Cut(string(j.ID), sep); ok && u.nodesOf[c] != nil {
			j.Nodes = &engine.NodeFilter{Allowed: u.nodesOf[c], Excluded: "its cluster is " + c}
		}
	}
	return u
}

// constrainCandidate keeps a candidate within one cluster: the cluster is the widest level
// of its topology, required; and within the clusters it may go to.
func (u *union) constrainCandidate(j *engine.Job, cd candidate) {
	t := j.Topology
	if t == nil {
		t = &engine.Topology{Required: -1, Preferred: -1}
	}
	nt := &engine.Topology{Levels: append([]string{LabelNodeCluster}, t.Levels...), Names: append([]string{"cluster"}, t.Names...),
		Required: 0, Preferred: -1}
	if t.Required >= 0 {
		nt.Required = t.Required + 1
	}
	if t.Preferred >= 0 {
		nt.Preferred = t.Preferred + 1
	}
	j.Topology = nt
	allowed := cd.allowed
	if cd.pinned != "" {
		allowed = []string{cd.pinned}
	}
	var ids []engine.NodeID
	for _, c := range allowed {
		ids = append(ids, u.nodesOf[c]...)
	}
	j.Nodes = &engine.NodeFilter{Allowed: ids, Excluded: "their clusters take no work now"}
}

// candidatePods are the pods a Job will make, as its controller would (parallelism of
// them, or its completions where fewer), with the labels the admission webhook would give
// them, and its gang's size.
func candidatePods(j *batchv1.Job) ([]*corev1.Pod, int64) {
	n := int32(1)
	if j.Spec.Parallelism != nil {
		n = *j.Spec.Parallelism
	}
	if j.Spec.Completions != nil && *j.Spec.Completions < n {
		n = *j.Spec.Completions
	}
	gang := workload.JobGang(j)
	out := make([]*corev1.Pod, 0, n)
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", j.Name, i), Namespace: j.Namespace,
			UID: types.UID(string(j.UID) + "-" + strconv.Itoa(int(i))), CreationTimestamp: j.CreationTimestamp, Labels: map[string]string{},
			Annotations: map[string]string{}}, Spec: *j.Spec.Template.Spec.DeepCopy()}
		for k, v := range j.Spec.Template.Labels {
			p.Labels[k] = v
		}
		for k, v := range j.Spec.Template.Annotations {
			p.Annotations[k] = v
		}
		for _, k := range []string{v1alpha1.AnnotationTopologyRequired, v1alpha1.AnnotationTopologyPreferred, v1alpha1.AnnotationTopology,
			v1alpha1.AnnotationGPUTypes} {
			if v, ok := j.Annotations[k]; ok {
				if _, own := p.Annotations[k]; !own {
					p.Annotations[k] = v
				}
			}
		}
		if q := queueOf(j); q != "" {
			p.Labels[v1alpha1.LabelQueue] = q
		}
		p.Labels[v1alpha1.LabelPodGroup] = j.Name
		p.Annotations[v1alpha1.AnnotationMinMember] = strconv.FormatInt(gang, 10)
		p.Spec.SchedulerName = scheduler.SchedulerName
		out = append(out, p)
	}
	return out, gang
}

// queueOf is the Job's queue: its label, else its pod template's.
func queueOf(j *batchv1.Job) string {
	if q := j.Labels[v1alpha1.LabelQueue]; q != "" {
		return q
	}
	return j.Spec.Template.Labels[v1alpha1.LabelQueue]
}

// plan runs the engine twice. First over what is already committed to a cluster: the
// workers' own waiting pods and the Jobs dispatched whose pods are not seen yet, which
// their workers will place before anything dispatched after them; their places are then
// taken as bound, and not reclaimable. Then the waiting Jobs are planned for on what is
// left. In one cycle the
// engine would order both by fair share, and could hand a waiting Job the room a worker's
// queued pods will take: dispatching more to a cluster than it holds.
func (u *union) plan(eng *engine.Engine, cands []candidate) *engine.Plan {
	fresh := map[engine.JobID]bool{}
	for _, cd := range cands {
		if cd.pinned == "" {
			fresh[cd.id()] = true
		}
	}
	all := u.snap.Jobs
	committed := make([]engine.Job, 0, len(all))
	var waiting []engine.Job
	for _, j := range all {
		if fresh[j.ID] {
			waiting = append(waiting, j)
		} else {
			committed = append(committed, j)
		}
	}
	first := *u.snap
	first.Jobs = committed
	placed := map[engine.PodID]engine.Binding{}
	for _, b := range eng.Schedule(&first).Binds {
		placed[b.Pod] = b.Binding
	}
	for i := range committed {
		var pods []engine.Pod
		for k, p := range committed[i].Pods {
			if b, ok := placed[p.ID]; ok && p.Binding == nil {
				if pods == nil {
					pods = append([]engine.Pod(nil), committed[i].Pods...)
				}
				pods[k].Binding = &b
			}
		}
		if pods != nil {
			// Placed here only as its worker will place it: not a victim the waiting Jobs
			// may reclaim (nothing runs there to stop), so no Job is sent where the room it
			// counts on is a queue of pods that are still waiting.
			committed[i].Pods = pods
			committed[i].Preemptible = engine.PreemptibleNo
		}
	}
	u.snap.Jobs = append(committed, waiting...)
	return eng.Schedule(u.snap)
}

// decision is where the union placed a candidate: a cluster, with what it found there;
// or no cluster, with why.
type decision struct {
	cluster, why string
}

// decide reads the plan for every unpinned candidate: the cluster its pods were placed in,
// or where room is being made for it by reclaim (the worker's own scheduler reclaims it
// there, under the quotas the manager keeps), or the engine's reason.
func (u *union) decide(plan *engine.Plan, cands []candidate) map[engine.JobID]decision {
	out := map[engine.JobID]decision{}
	placed := map[engine.JobID][]engine.NodeID{}
	for _, b := range plan.Binds {
		placed[b.Job] = append(placed[b.Job], b.Binding.Node)
	}
	reclaimedIn := map[engine.JobID]string{}
	for _, e := range plan.Evictions {
		if n, ok := u.podNode[e.Pod]; ok && e.For != "" {
			reclaimedIn[e.For] = u.clusterOf[n]
		}
	}
	for _, cd := range cands {
		if cd.pinned != "" {
			continue
		}
		id := cd.id()
		if ns := placed[id]; len(ns) > 0 {
			slices.Sort(ns)
			ns = slices.Compact(ns)
			out[id] = decision{cluster: u.clusterOf[ns[0]], why: "fits now on " + nodeList(ns)}
			continue
		}
		if c := reclaimedIn[id]; c != "" {
			out[id] = decision{cluster: c, why: "room is being made there by reclaiming GPUs lent over other queues' fair shares"}
			continue
		}
		why := "not placed"
		if r, ok := plan.Pending[id]; ok {
			why = r.Message
		}
		out[id] = decision{why: why}
	}
	return out
}

func nodeList(ns []engine.NodeID) string {
	s := make([]string, 0, len(ns))
	for _, n := range ns {
		s = append(s, string(n))
	}
	if len(s) > 4 {
		return strings.Join(s[:4], ", ") + fmt.Sprintf(" and %d more", len(s)-4)
	}
	return strings.Join(s, ", ")
}
