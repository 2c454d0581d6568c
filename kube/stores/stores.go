// Package stores is how the controllers that run beside the scheduler in its process (the
// idle controller, the custom metrics API) read pods, nodes, the agents' Leases and Queues:
// from the scheduler's own informers, so that the process holds one copy of each object. On
// a busy cluster the pods are most of the process's memory, and a second informer of them
// (or a list of them every tick) doubles it.
package stores

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"
	allotlisters "github.com/allot-dev/allot/kube/client/listers/api/v1alpha1"
)

// Stores are listers over informers that have synced. Another scheduler's pods in Pods
// may carry only what a scheduler reads of them (the scheduler's informer trims them):
// names, labels, owners, node, phase, start time, Allot's annotations and the resources
// asked for; nothing that reads a pod here needs more.
type Stores struct {
	Pods   corelisters.PodLister
	Nodes  corelisters.NodeLister
	Leases coordinationlisters.LeaseNamespaceLister // the agents', in Allot's namespace
	Queues allotlisters.QueueLister
}

// Source gives the stores as they are now, and false while none has synced yet (a
// scheduler starting, or listing again after an outage, hands over the new stores once
// they have synced).
type Source func() (Stores, bool)

// Get is the stores of src, or an error saying they are not listed yet.
func (src Source) Get() (Stores, error) {
	if src == nil {
		return Stores{}, fmt.Errorf("no stores to read")
	}
	s, ok := src()
	if !ok {
		return Stores{}, fmt.Errorf("the scheduler's caches are not listed yet")
	}
	return s, nil
}

// Of makes stores of these informers' indexers: the agents' Leases' informer must be of
// Allot's namespace.
func Of(pods, nodes, leases, queues cache.SharedIndexInformer) Stores {
	return Stores{Pods: corelisters.NewPodLister(pods.GetIndexer()), Nodes: corelisters.NewNodeLister(nodes.GetIndexer()),
		Leases: coordinationlisters.NewLeaseLister(leases.GetIndexer()).Leases(v1alpha1.SystemNamespace),
		Queues: allotlisters.NewQueueLister(queues.GetIndexer())}
}

// Start starts informers of their own for a controller that runs without the scheduler
// (a test of it alone) and returns once they have synced; they stop with ctx. Without an
// Allot client (nil) there are no Queues.
func Start(ctx context.Context, client kubernetes.Interface, allot versioned.Interface) (Source, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(DropManagedFields))
	agents := AgentLeases(client)
	s := Stores{Pods: f.Core().V1().Pods().Lister(), Nodes: f.Core().V1().Nodes().Lister(),
		Leases: agents.Coordination().V1().Leases().Lister().Leases(v1alpha1.SystemNamespace)}
	synced := []func(<-chan struct{}) map[reflect.Type]bool{f.WaitForCacheSync, agents.WaitForCacheSync}
	f.Start(ctx.Done())
	agents.Start(ctx.Done())
	if allot != nil {
		af := allotinformers.NewSharedInformerFactoryWithOptions(allot, 0, allotinformers.WithTransform(DropManagedFields))
		s.Queues = af.Allot().V1alpha1().Queues().Lister()
		af.Start(ctx.Done())
		synced = append(synced, af.WaitForCacheSync)
	}
	for _, wait := range synced {
		for typ, ok := range wait(ctx.Done()) {
			if !ok {
				return nil, fmt.Errorf("%v informer did not sync: %w", typ, ctx.Err())
			}
		}
	}
	return func() (Stores, bool) { return s, true }, nil
}

// AgentLeases is an informer factory over the nodes' agents' Leases alone (Allot's
// namespace, the agents' label), as every reader of them in Allot watches them.
func AgentLeases(client kubernetes.Interface) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(v1alpha1.SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.LabelAgentLease }))
}

// DropManagedFields leaves out the API server's record of who set which field (as
// kube-scheduler does for its pods), an informer's transform: nothing in Allot reads it,
// and on a production cluster it is a large part of every pod and node a cache holds
// (kube/scheduler's BenchmarkAdapterCycleProduction measures both). An update sent from a
// cached copy without it keeps the server's record.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
