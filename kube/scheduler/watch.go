package scheduler

// Watch and wake: the informers that hold what the cycle reads, and which of their news
// wake a cycle. A cycle comes at least every Interval after the last; a change that can
// alter a plan brings it sooner.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/podfit"
	"github.com/allot-dev/allot/kube/stores"
	"github.com/allot-dev/allot/kube/workload"
)

// start builds and syncs the informers and kube-scheduler's plugins.
func (s *Scheduler) start(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	s.stopInformers = cancel
	s.listWaited = map[cache.SharedIndexInformer]bool{}
	// Other schedulers' pods are cached trimmed to what the scheduler reads of them (trim.go):
	// on a busy cluster they are most of its memory.
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTransform(trimObject))
	s.pods = factory.Core().V1().Pods().Informer()
	s.nodes = factory.Core().V1().Nodes().Informer()
	afactory := allotinformers.NewSharedInformerFactoryWithOptions(s.allot, 0, allotinformers.WithTransform(stores.DropManagedFields))
	s.queues = afactory.Allot().V1alpha1().Queues().Informer()
	s.groups = afactory.Allot().V1alpha1().PodGroups().Informer()
	// The scheduler writes the status of Queues and PodGroups itself; a status alone is no
	// news for a cycle (the next one reads a Queue's usage from it all the same).
	poke := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() }, DeleteFunc: func(any) { s.poke() },
		UpdateFunc: func(o, n any) {
			ou, err1 := meta.Accessor(o)
			nu, err2 := meta.Accessor(n)
			if err1 != nil || err2 != nil || !statusOnly(ou, nu) {
				s.poke()
			}
		}}
	informers := []cache.SharedIndexInformer{s.queues}
	// PodGroups are watched but not waited for, as Topologies below: only a cycle with a
	// pod of a gang (labelled with its group from admission on) needs them, and it waits
	// until they have listed (Cycle).
	_, _ = s.groups.AddEventHandler(poke)
	s.topologies = nil
	if workload.Served(s.client.Discovery(), v1alpha1.Topologies) {
		s.topologies = afactory.Allot().V1alpha1().Topologies().Informer()
		// Watched, but not waited for: only cycles with a workload that names a level
		// need it, and they wait until it has listed (Cycle). On a fresh API server the
		// first watch of a custom resource nobody has read yet can wait a second for its
		// cache; other workloads need not.
		_, _ = s.topologies.AddEventHandler(poke)
	} else {
		slog.Warn("allot scheduler: the Topology CRD is not installed (kubectl apply -f deploy/crds): workloads that name a topology level wait")
	}
	synced := []cache.InformerSynced{s.pods.HasSynced, s.nodes.HasSynced}
	for _, inf := range informers {
		_, _ = inf.AddEventHandler(poke)
		synced = append(synced, inf.HasSynced)
	}
	_, _ = s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() }, DeleteFunc: func(any) { s.poke() },
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || !reportOnly(on, nn) {
				s.poke()
			}
		}})
	_, _ = s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				s.gone.note(p)
			}
			s.poke()
		},
		UpdateFunc: func(o, n any) {
			op, ok1 := o.(*corev1.Pod)
			np, ok2 := n.(*corev1.Pod)
			if ok2 && (np.DeletionTimestamp != nil || np.Status.Phase == corev1.PodFailed) {
				s.gone.note(np)
			}
			if !ok1 || !ok2 || s.podNews(op, np) {
				s.poke()
			}
		}})
	if err := s.ensureSystemNamespace(ctx); err != nil {
		return fmt.Errorf("namespace %s: %w", v1alpha1.SystemNamespace, err)
	}
	s.reservationClass = s.ensureReservationClass(ctx)
	// kube-scheduler's plugins add the informers they read (volumes, namespaces, services…)
	// to the factory, so they are built before it starts.
	fit, err := podfit.New(ctx, s.client, factory)
	if err != nil {
		return err
	}
	fit.CountedByEngine(s.opts.Accelerators.Resources())
	s.fit = fit
	synced = append(synced, s.startDRA(ctx, factory)...)
	factory.Start(ctx.Done())
	afactory.Start(ctx.Done())
	s.startAgentLeases(ctx)
	// Checked every 10 ms, not every 100 ms as client-go's WaitForCacheSync does: on a
	// fresh start with a backlog waiting, the lists are most of the time to the first bind.
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, ok := range synced {
			if !ok() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync: %w", typ, ctx.Err())
		}
	}
	st := stores.Of(s.pods, s.nodes, s.agentLeases, s.queues)
	s.stores.Store(&st)
	return nil
}

// wakeWhenListed wakes a cycle once inf has listed, for a cycle that waited for it: its
// objects' arrival wakes one too, but it may have come before the cycle took the wake-up
// (Cycle), and an empty list brings none. Checked every 10 ms, for a minute at most (a
// relist replaces the informers).
func (s *Scheduler) wakeWhenListed(ctx context.Context, inf cache.SharedIndexInformer) {
	if s.listWaited[inf] {
		return
	}
	s.listWaited[inf] = true
	go func() {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) { return inf.HasSynced(), nil }) == nil {
			s.poke()
		}
	}()
}

// loop runs cycles until ctx ends.
func (s *Scheduler) loop(ctx context.Context) error {
	s.binds = make(chan bindJob, 1024)
	var workers sync.WaitGroup
	for w := 0; w < BindWorkers; w++ {
		workers.Add(1)
		go func() { defer workers.Done(); s.bindLoop(ctx) }()
	}
	defer workers.Wait()
	defer close(s.binds)
	// A cycle at least every Interval after the last one, for what time alone changes
	// (backoffs, grace periods, usage): counted from the last cycle, not on a fixed beat,
	// so that one does not come while a backlog's binds still flow from a cycle just done.
	timer := time.NewTimer(s.opts.Interval)
	defer timer.Stop()
	for {
		if err := s.Cycle(ctx); err != nil {
			slog.Warn("allot scheduler: cycle", "err", err)
		}
		timer.Reset(s.opts.Interval)
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			// Let a burst of events land before the next cycle: one cycle then places many.
			time.Sleep(50 * time.Millisecond)
		case <-timer.C:
		}
	}
}

// reportOnly tells whether a node update changed nothing but the annotations written for
// people: the scheduler's own occupancy and the agent's utilisation. The engine reads
// neither, so they need no cycle (with an agent on every node they come every few seconds).
func reportOnly(o, n *corev1.Node) bool {
	if !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equality.Semantic.DeepEqual(o.Status, n.Status) || !maps.Equal(o.Labels, n.Labels) {
		return false
	}
	reports := func(k string) bool {
		return k == v1alpha1.AnnotationOccupancy || k == v1alpha1.AnnotationGPUUtilization || k == v1alpha1.AnnotationGPUMemoryUsed
	}
	for k, v := range n.Annotations {
		if ov, ok := o.Annotations[k]; (!ok || ov != v) && !reports(k) {
			return false
		}
	}
	for k := range o.Annotations {
		if _, ok := n.Annotations[k]; !ok && !reports(k) {
			return false
		}
	}
	return true
}

// podNews tells whether a pod's update can change a plan. Waking for the rest would
// rebuild the snapshot for nothing: a running pod's status (the kubelet reporting it
// started), the arrival of our own binds, and a waiting pod's status, which holds the
// reason the scheduler wrote itself or another scheduler's (the reasons of 1,500
// unplaceable pods landing woke 59 cycles).
func (s *Scheduler) podNews(o, n *corev1.Pod) bool {
	switch {
	case (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || terminal(o) != terminal(n):
		return true
	case n.Spec.NodeName == "":
		// Still waiting: a scheduling gate lifted, a label or owner set, resources resized.
		return !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !maps.Equal(o.Labels, n.Labels) ||
			!maps.Equal(o.Annotations, n.Annotations) || !equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences)
	case o.Spec.NodeName != n.Spec.NodeName:
		return !s.confirms(n)
	}
	return o.Annotations[v1alpha1.AnnotationGPUDevices] != n.Annotations[v1alpha1.AnnotationGPUDevices]
}

// statusOnly tells whether an update of a custom resource changed at most its status: the
// API server raises metadata.generation for every change but of metadata (and of status,
// where the resource has a status subresource); the parts of metadata the engine reads
// are compared here.
func statusOnly(o, n metav1.Object) bool {
	return o.GetGeneration() == n.GetGeneration() && (o.GetDeletionTimestamp() == nil) == (n.GetDeletionTimestamp() == nil) &&
		maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
