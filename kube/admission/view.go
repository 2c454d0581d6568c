// Package admission holds Allot's admission webhooks: the mutating one that fills in a
// pod's queue, class and gang from its workload and points a GPU-sharing pod's containers
// at the ConfigMap the scheduler fills, and the validating one that refuses what could
// never run, with a message naming the annotation or label and the allowed values
// (validate.go); and the rule that a pod of any other scheduler asking for GPUs in a
// tenant's namespace is Allot's (foreign.go).
package admission

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"
	allotv1alpha1 "github.com/allot-dev/allot/kube/client/informers/externalversions/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/workload"
)

// View is what validation reads of the cluster.
type View interface {
	Queue(name string) (*v1alpha1.Queue, bool)
	QueueNames() []string
	PodGroup(namespace, name string) (*v1alpha1.PodGroup, bool)
	NamespaceLabels(name string) map[string]string
	// GPUs is the cluster's whole-GPU capacity and the largest memory of one GPU in bytes.
	GPUs() (total int64, maxMemory int64)
	// Topologies are the cluster's Topology objects by name.
	Topologies() map[string]convert.Levels
}

// informerView answers from informer caches, so that admission costs no API call, but for
// a Queue the cache does not hold yet (liveQueue).
type informerView struct {
	nodes, namespaces cache.SharedIndexInformer
	queues            allotv1alpha1.QueueInformer
	groups            allotv1alpha1.PodGroupInformer
	topologies        cache.SharedIndexInformer // nil where the CRD is not installed
	allot             versioned.Interface
}

// NewView starts informers for what validation reads and waits for them to sync.
func NewView(ctx context.Context, client kubernetes.Interface, allot versioned.Interface) (View, error) {
	f := informers.NewSharedInformerFactory(client, 0)
	af := allotinformers.NewSharedInformerFactory(allot, 0)
	v := &informerView{nodes: f.Core().V1().Nodes().Informer(), namespaces: f.Core().V1().Namespaces().Informer(),
		queues: af.Allot().V1alpha1().Queues(), groups: af.Allot().V1alpha1().PodGroups(), allot: allot}
	synced := []cache.InformerSynced{v.nodes.HasSynced, v.namespaces.HasSynced, v.queues.Informer().HasSynced, v.groups.Informer().HasSynced}
	if workload.Served(client.Discovery(), v1alpha1.Topologies) {
		v.topologies = af.Allot().V1alpha1().Topologies().Informer()
		synced = append(synced, v.topologies.HasSynced)
	}
	f.Start(ctx.Done())
	af.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("admission: informers did not sync")
	}
	return v, nil
}

// Queue is the Queue from the cache, or from the API server when the cache does not hold
// it: a Queue created a moment before its first pod (a script, `kubectl apply` of both)
// may not have reached the informer when the pod is admitted, and refusing the pod for a
// queue that exists would be wrong. Only the refusal path pays the request. The Queue is
// the cache's: not to be changed.
func (v *informerView) Queue(name string) (*v1alpha1.Queue, bool) {
	if q, err := v.queues.Lister().Get(name); err == nil {
		return q, true
	}
	if v.allot == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveReadTimeout)
	defer cancel()
	q, err := v.allot.AllotV1alpha1().Queues().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	return q, true
}

// liveReadTimeout bounds the read of a Queue the cache does not hold, well inside the
// webhook's own timeout (10 s in the chart).
const liveReadTimeout = 2 * time.Second

func (v *informerView) QueueNames() []string {
	names := v.queues.Informer().GetStore().ListKeys()
	sort.Strings(names)
	return names
}

func (v *informerView) PodGroup(namespace, name string) (*v1alpha1.PodGroup, bool) {
	g, err := v.groups.Lister().PodGroups(namespace).Get(name)
	if err != nil {
		return nil, false
	}
	return g, true
}

func (v *informerView) NamespaceLabels(name string) map[string]string {
	o, ok, _ := v.namespaces.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	return o.(*corev1.Namespace).Labels
}

func (v *informerView) Topologies() map[string]convert.Levels {
	if v.topologies == nil {
		return map[string]convert.Levels{}
	}
	out, _ := convert.Topologies(v.topologies.GetStore().List())
	return out
}

func (v *informerView) GPUs() (total, maxMemory int64) {
	for _, o := range v.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		q := n.Status.Allocatable[corev1.ResourceName(v1alpha1.GPUResource)]
		total += q.Value()
		if mi, err := strconv.ParseInt(n.Labels[v1alpha1.LabelGPUMemory], 10, 64); err == nil && q.Value() > 0 {
			maxMemory = max(maxMemory, mi<<20)
		}
	}
	return total, maxMemory
}
