package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"pgregory.net/rapid"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// The snapshot kept between cycles is the conversion cache (convCache): each node's and
// pod's engine form, kept until the object changes, so that a cycle converts only what the
// informers brought since the last one. These tests hold it to a full rebuild.

// informerEvent is one change an informer delivers: an object added, updated or deleted.
type informerEvent struct {
	op  string // add, update, delete
	obj any
}

// eventWorld is a cluster as the informers' stores hold it, changed by events as the API
// server makes them: a pod's generation rises with its spec, a node's resourceVersion with
// every write.
type eventWorld struct {
	nodes, pods cache.Store
	rv          int
}

func newEventWorld() *eventWorld {
	return &eventWorld{nodes: cache.NewStore(cache.MetaNamespaceKeyFunc), pods: cache.NewStore(cache.MetaNamespaceKeyFunc)}
}

// apply puts an event into the stores through the informers' transform.
func (w *eventWorld) apply(e informerEvent) error {
	obj, err := trimObject(e.obj)
	if err != nil {
		return err
	}
	store := w.pods
	if _, ok := obj.(*corev1.Node); ok {
		store = w.nodes
	}
	switch e.op {
	case "add":
		return store.Add(obj)
	case "update":
		return store.Update(obj)
	default:
		return store.Delete(obj)
	}
}

func (w *eventWorld) lists() ([]*corev1.Node, []*corev1.Pod) {
	var nodes []*corev1.Node
	for _, o := range w.nodes.List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	var pods []*corev1.Pod
	for _, o := range w.pods.List() {
		pods = append(pods, o.(*corev1.Pod))
	}
	return nodes, pods
}

// cycleView is what a cycle hands the engine, and what it keeps of the pods for applying
// the plan: the part of a snapshot compared between an incremental and a full build.
type cycleView struct {
	Snap      *engine.Snapshot
	Releasing map[engine.NodeID]map[int]string
	Evicted   map[engine.JobID]bool
	Pods      []engine.PodID
}

var incrementalQueue = &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 1000}}}

// viewOf builds a cycle's view of the stores with conv (a fresh cache: a full rebuild).
func (w *eventWorld) viewOf(now time.Time, conv *convCache) cycleView {
	nodes, pods := w.lists()
	snap, idx := buildSnapshot(now, nodes, pods, []*v1alpha1.Queue{incrementalQueue}, nil, nil, conv)
	constrain(context.Background(), nil, snap, idx, nodes, pods, conv)
	v := cycleView{Snap: snap, Releasing: idx.releasing, Evicted: idx.evicted}
	for id := range idx.pods {
		v.Pods = append(v.Pods, id)
	}
	return v
}

// sameAsRebuilt applies events one at a time; after each, the view built with the cache
// carried from the previous cycles must equal one built from scratch. It names the first
// step where they differ.
func sameAsRebuilt(events []informerEvent, now time.Time) error {
	w := newEventWorld()
	kept := &convCache{}
	for i, e := range events {
		if err := w.apply(e); err != nil {
			return err
		}
		inc, full := w.viewOf(now, kept), w.viewOf(now, &convCache{})
		slices.Sort(inc.Pods)
		slices.Sort(full.Pods)
		if !reflect.DeepEqual(inc, full) {
			return fmt.Errorf("after event %d (%s %s): the snapshot kept between cycles differs from a full rebuild:\nkept  %+v\nfull  %+v",
				i, e.op, objName(e.obj), inc.Snap, full.Snap)
		}
	}
	return nil
}

func objName(o any) string {
	switch o := o.(type) {
	case *corev1.Node:
		return "node " + o.Name
	case *corev1.Pod:
		return "pod " + o.Name
	}
	return "?"
}

// genEvents draws a sequence of informer events on a few nodes and pods: nodes added,
// resized, cordoned, relabelled and deleted; pods of Allot's and of another scheduler,
// CPU-only and with GPUs, added waiting or bound, bound, resized in place, given devices,
// terminating (evicted or not), finished and deleted, some recreated under the same name.
func genEvents(t *rapid.T, now time.Time) []informerEvent {
	var events []informerEvent
	nodes := map[string]*corev1.Node{}
	pods := map[string]*corev1.Pod{}
	rv, uid := 0, 0
	nextRV := func() string { rv++; return fmt.Sprint(rv) }
	nodeNames := []string{"n1", "n2", "n3"}
	podNames := []string{"a", "b", "c", "d", "e", "f"}
	pick := func(m map[string]*corev1.Pod, label string) *corev1.Pod {
		var names []string
		for _, n := range podNames {
			if m[n] != nil {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			return nil
		}
		return m[rapid.SampledFrom(names).Draw(t, label)]
	}
	for step := rapid.IntRange(1, 30).Draw(t, "events"); step > 0; step-- {
		switch rapid.IntRange(0, 9).Draw(t, "kind") {
		case 0, 1: // a node added, or changed
			name := rapid.SampledFrom(nodeNames).Draw(t, "node")
			n, op := nodes[name], "update"
			if n == nil {
				uid++
				n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("node-%d", uid)),
					Labels: map[string]string{corev1.LabelHostname: name}}}
				op = "add"
			} else {
				n = n.DeepCopy()
			}
			alloc := corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(int64(rapid.IntRange(1, 16).Draw(t, "cpu")), resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(int64(rapid.IntRange(1, 64).Draw(t, "mem"))<<30, resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(int64(rapid.IntRange(1, 10).Draw(t, "pod room")), resource.DecimalSI),
				v1alpha1.GPUResource:  *resource.NewQuantity(int64(rapid.SampledFrom([]int{0, 2, 8}).Draw(t, "gpus")), resource.DecimalSI),
			}
			n.Status.Allocatable, n.Status.Capacity = alloc, alloc
			n.Spec.Unschedulable = rapid.IntRange(0, 4).Draw(t, "cordoned") == 0
			n.Labels[LabelNodePool] = rapid.SampledFrom([]string{"a", "b"}).Draw(t, "pool")
			n.ResourceVersion = nextRV()
			nodes[name] = n
			events = append(events, informerEvent{op, n})
		case 2: // a node deleted
			name := rapid.SampledFrom(nodeNames).Draw(t, "node")
			if n := nodes[name]; n != nil {
				delete(nodes, name)
				events = append(events, informerEvent{"delete", n})
			}
		case 3, 4: // a pod made (again, under a name that may have been used)
			name := rapid.SampledFrom(podNames).Draw(t, "pod")
			if pods[name] != nil {
				continue
			}
			uid++
			sched := rapid.SampledFrom([]string{v1alpha1.SchedulerName, "default-scheduler"}).Draw(t, "scheduler")
			p := basePod(name, sched)
			p.UID, p.Generation, p.ResourceVersion = types.UID(fmt.Sprintf("pod-%d", uid)), 1, nextRV()
			p.CreationTimestamp = metav1.NewTime(now.Add(-time.Duration(uid) * time.Second))
			if sched == v1alpha1.SchedulerName {
				p.Labels[LabelQueue] = "q"
			}
			c := &p.Spec.Containers[0]
			c.Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(rapid.IntRange(0, 4000).Draw(t, "pod cpu")), resource.DecimalSI)
			if g := rapid.IntRange(0, 2).Draw(t, "pod gpus"); g > 0 {
				c.Resources.Limits = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(int64(g), resource.DecimalSI)}
			}
			if rapid.Bool().Draw(t, "made bound") {
				p.Spec.NodeName = rapid.SampledFrom(nodeNames).Draw(t, "on node")
				p.Status.Phase = corev1.PodRunning
			}
			pods[name] = p
			events = append(events, informerEvent{"add", p})
		case 5: // a waiting pod bound, with its devices
			p := pick(pods, "bind")
			if p == nil || p.Spec.NodeName != "" {
				continue
			}
			p = p.DeepCopy()
			p.Spec.NodeName = rapid.SampledFrom(nodeNames).Draw(t, "bound to")
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[AnnotationGPUs] = "0"
			p.Status.Phase = corev1.PodRunning
			p.ResourceVersion = nextRV()
			pods[p.Name] = p
			events = append(events, informerEvent{"update", p})
		case 6: // resized in place: its spec, so its generation, changes
			p := pick(pods, "resize")
			if p == nil {
				continue
			}
			p = p.DeepCopy()
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(rapid.IntRange(0, 4000).Draw(t, "new cpu")), resource.DecimalSI)
			p.Generation++
			p.ResourceVersion = nextRV()
			pods[p.Name] = p
			events = append(events, informerEvent{"update", p})
		case 7: // terminating (evicted or deleted with a grace period), or finished
			p := pick(pods, "end")
			if p == nil {
				continue
			}
			p = p.DeepCopy()
			if rapid.Bool().Draw(t, "finished") {
				p.Status.Phase = rapid.SampledFrom([]corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}).Draw(t, "phase")
			} else if p.DeletionTimestamp == nil {
				at := metav1.NewTime(now.Add(-time.Duration(rapid.IntRange(0, 60).Draw(t, "deleted ago")) * time.Second))
				p.DeletionTimestamp = &at
				if rapid.Bool().Draw(t, "evicted") {
					p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue})
				}
			}
			p.ResourceVersion = nextRV()
			pods[p.Name] = p
			events = append(events, informerEvent{"update", p})
		case 8: // the kubelet's news: a status change alone
			p := pick(pods, "status")
			if p == nil {
				continue
			}
			p = p.DeepCopy()
			p.Status.Message = fmt.Sprint("news ", rv)
			p.ResourceVersion = nextRV()
			pods[p.Name] = p
			events = append(events, informerEvent{"update", p})
		case 9: // deleted
			p := pick(pods, "delete")
			if p == nil {
				continue
			}
			delete(pods, p.Name)
			events = append(events, informerEvent{"delete", p})
		}
	}
	return events
}

// TestIncrementalSnapshotEqualsRebuild: over random sequences of informer events, the
// snapshot built with the conversions kept from earlier cycles equals one built from
// nothing after every event.
func TestIncrementalSnapshotEqualsRebuild(t *testing.T) {
	now := time.Unix(1e9, 0)
	var jobs int
	rapid.Check(t, func(rt *rapid.T) {
		events := genEvents(rt, now)
		if err := sameAsRebuilt(events, now); err != nil {
			rt.Fatal(err)
		}
		w := newEventWorld()
		for _, e := range events {
			_ = w.apply(e)
		}
		jobs += len(w.viewOf(now, nil).Snap.Jobs)
	})
	// Not vacuous: the sequences leave jobs in the snapshots (44 to 78 over 100 sequences in
	// 40 runs; 50 here failed one run in twenty).
	if jobs < 20 {
		t.Fatalf("the generator leaves too few jobs in the snapshots: %d", jobs)
	}
}

// TestIncrementalSnapshotCatchesStaleEntry: the comparison fails when the kept snapshot
// misses a change, here a pod resized in place whose new request the cache does not see
// (an update delivered with its generation unchanged, which the cache takes for no change
// of spec).
func TestIncrementalSnapshotCatchesStaleEntry(t *testing.T) {
	now := time.Unix(1e9, 0)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-1", ResourceVersion: "1"}}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods: resource.MustParse("10")}
	node.Status.Allocatable, node.Status.Capacity = alloc, alloc
	p := basePod("web", "default-scheduler")
	p.Spec.NodeName, p.Generation, p.ResourceVersion = "n1", 1, "2"
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	resized := p.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
	resized.ResourceVersion = "3"
	events := []informerEvent{{"add", node}, {"add", p}, {"update", resized}}
	err := sameAsRebuilt(events, now)
	if err == nil || !strings.Contains(err.Error(), "after event 2") {
		t.Fatalf("a stale cache entry went unnoticed: %v", err)
	}
	// With the generation raised, as the API server raises it, the cache follows.
	resized.Generation = 2
	if err := sameAsRebuilt(events, now); err != nil {
		t.Fatal(err)
	}
}
