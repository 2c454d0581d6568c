package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// The listing stage: what the informers hold, as one cycle sees it. Binds made and not yet
// seen by the informer count as made (assumed), as do evictions the API server accepted
// (the pod terminating), and the books of pods gone are dropped.

// cycleInput is everything a cycle reads from the informers.
type cycleInput struct {
	nodes      []*corev1.Node
	pods       []*corev1.Pod
	queues     []*v1alpha1.Queue
	groups     map[string]convert.Group // by namespace/name
	podGroups  []*v1alpha1.PodGroup
	topologies map[string]convert.Levels // nil: not known (convert.JobTopology)
}

// list reads the informers' stores for a cycle; false when a store the cycle needs has
// not listed yet (the cycle then waits for it: wakeWhenListed).
func (s *Scheduler) list(ctx context.Context) (in cycleInput, ok bool) {
	var nodes []*corev1.Node
	for _, o := range s.nodes.GetStore().List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	var pods []*corev1.Pod
	live := map[types.UID]bool{}
	s.amu.Lock()
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		live[p.UID] = p.DeletionTimestamp == nil
		if at, ok := s.evicted[p.UID]; ok && p.DeletionTimestamp == nil {
			if s.opts.Now().Sub(at) < evictionAssumeFor {
				p = asEvicted(p, at)
			} else {
				delete(s.evicted, p.UID) // the eviction never showed: the pod runs on
			}
		}
		if until, ok := s.unknownUntil[p.UID]; ok && (p.Spec.NodeName != "" || time.Now().After(until)) {
			delete(s.unknownUntil, p.UID)
			if p.Spec.NodeName == "" {
				// The bind did not land after all: the pod is placed again.
				delete(s.assumed, p.UID)
				s.backoff[p.UID] = time.Now().Add(bindBackoff)
			}
		}
		if b, ok := s.assumed[p.UID]; ok {
			if p.Spec.NodeName != "" {
				delete(s.assumed, p.UID) // the informer caught up
			} else {
				p = p.DeepCopy()
				p.Spec.NodeName = string(b.Node)
				if p.Annotations == nil {
					p.Annotations = map[string]string{}
				}
				p.Annotations[AnnotationGPUs] = formatIndices(b.GPUs)
				if b.MIG != "" {
					// Held where it was placed (for its instance to be made, or its bind
					// in flight): booked there by index.
					p.Annotations[v1alpha1.AnnotationMIGInstances] = convert.MIGInstancesByIndex(b)
				} else if b.Share > 0 {
					// As the bind wrote them: the share and what it books of each device.
					p.Annotations[v1alpha1.AnnotationGPUShare] = strconv.Itoa(int(b.Share))
					if b.Memory > 0 {
						p.Annotations[v1alpha1.AnnotationGPUShareMemory] = strconv.FormatInt(b.Memory, 10)
					}
					if b.Compute > 0 {
						p.Annotations[v1alpha1.AnnotationGPUShareCompute] = strconv.Itoa(int(b.Compute))
					}
				}
			}
		}
		pods = append(pods, p)
	}
	for uid := range s.assumed {
		if !live[uid] {
			delete(s.assumed, uid)
		}
	}
	for uid := range s.backoff {
		if !live[uid] {
			delete(s.backoff, uid)
		}
	}
	for uid := range s.unknownUntil {
		if !live[uid] {
			delete(s.unknownUntil, uid)
		}
	}
	for uid := range s.reasons {
		if _, here := live[uid]; !here {
			delete(s.reasons, uid) // deleted while it waited: its reason was kept for ever
		}
	}
	for uid := range s.evicting {
		if !live[uid] {
			delete(s.evicting, uid) // seen leaving or gone
		}
	}
	for uid := range s.evicted {
		if !live[uid] {
			delete(s.evicted, uid) // the informer caught up
		}
	}
	s.amu.Unlock()
	// The API server checks every field's type against the CRD's schema, and its rules
	// parse every duration as Go does, so a Queue or PodGroup always decodes; the values the schema cannot check (a gang of two billion,
	// a queue that is its own ancestor) make their pods wait, saying which field.
	var queues []*v1alpha1.Queue
	for _, o := range s.queues.GetStore().List() {
		queues = append(queues, o.(*v1alpha1.Queue))
	}
	var topologies map[string]convert.Levels // nil: not known (convert.JobTopology)
	if s.topologies != nil && s.topologies.HasSynced() {
		var problems []error
		topologies, problems = convert.Topologies(s.topologies.GetStore().List())
		// Said once, not every cycle: the CRD's schema makes such an object rare.
		msg := fmt.Sprint(problems)
		if len(problems) > 0 && msg != s.topologyProblems {
			slog.Warn("allot scheduler: topologies not read", "err", msg)
		}
		s.topologyProblems = msg
	}
	if !s.groups.HasSynced() && inGangs(pods) {
		// The PodGroups have not listed yet and some pod belongs to one: without its
		// minimum, the gang could start short. Wait for the list.
		s.wakeWhenListed(ctx, s.groups)
		return in, false
	}
	groups := map[string]convert.Group{}
	var podGroups []*v1alpha1.PodGroup
	for _, o := range s.groups.GetStore().List() {
		pg := o.(*v1alpha1.PodGroup)
		groups[pg.Namespace+"/"+pg.Name] = convert.PodGroup(pg)
		podGroups = append(podGroups, pg)
	}
	if topologies == nil && s.topologies != nil && namesTopology(pods, groups) {
		// The Topology informer has not listed yet and some workload names a level: such a
		// job cannot be placed rightly, and counted as invalid its running pods would leave
		// its queue's use for that moment. Wait for the list.
		s.wakeWhenListed(ctx, s.topologies)
		return in, false
	}
	return cycleInput{nodes: nodes, pods: pods, queues: queues, groups: groups, podGroups: podGroups, topologies: topologies}, true
}

// inGangs reports whether any of Allot's pods belongs to a PodGroup.
func inGangs(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p.Spec.SchedulerName == SchedulerName && p.Labels[LabelPodGroup] != "" {
			return true
		}
	}
	return false
}

// namesTopology reports whether any of Allot's pods, or the PodGroup of one, names a
// topology level: a job that topologyOf would resolve against the Topology objects.
func namesTopology(pods []*corev1.Pod, groups map[string]convert.Group) bool {
	for _, p := range pods {
		if p.Spec.SchedulerName != SchedulerName {
			continue
		}
		if ann, _ := topologyAnnotations(p, groups); ann[v1alpha1.AnnotationTopologyRequired] != "" || ann[v1alpha1.AnnotationTopologyPreferred] != "" {
			return true
		}
	}
	return false
}
