package scheduler

// Watching DRA: ResourceSlices, ResourceClaims and DeviceClasses, where the API server
// serves resource.k8s.io/v1, and the allocator's features it runs with. The claims stage
// (claims.go) and the claim stage of a bind (claimbind.go) read what this holds.

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/allot-dev/allot/kube/dra"
)

// draState is the scheduler's DRA part; zero where resource.k8s.io/v1 is not served.
type draState struct {
	draSlices, draClaims, draClasses cache.SharedIndexInformer
	draFeatures                      structured.Features
	draCEL                           *cel.Cache
	// draVersion counts changes of slices and classes: the fit cache holds while it stays.
	draVersion atomic.Uint64
	draFits    fitCache
	// draCur is the last cycle's view, for the bind workers.
	draCur atomic.Pointer[draCycle]
	// draInv is the inventory, kept while draVersion stays (its CEL evaluation of every
	// device was most of the stage's cost: BenchmarkClaimsStage's ms-inventory).
	draInv        *dra.Inventory
	draInvVersion uint64
	// dmu makes allocations one at a time; claimsAssumed (guarded by camu, so that a cycle
	// does not wait for an allocation's API calls) holds the claims this scheduler wrote
	// that the informer may not show yet.
	dmu, camu     sync.Mutex
	claimsAssumed map[types.UID]assumedClaim
}

// servesDRA tells whether the API server serves the resources the allocator reads.
func servesDRA(s *Scheduler) bool {
	l, err := s.client.Discovery().ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String())
	if err != nil {
		return false
	}
	need := map[string]bool{"resourceslices": true, "resourceclaims": true, "deviceclasses": true}
	for _, r := range l.APIResources {
		delete(need, r.Name)
	}
	return len(need) == 0
}

// startDRA adds the DRA informers to the factory, before it starts.
func (s *Scheduler) startDRA(ctx context.Context, factory informers.SharedInformerFactory) []cache.InformerSynced {
	s.draSlices, s.draClaims, s.draClasses = nil, nil, nil
	if !servesDRA(s) {
		slog.Info("allot scheduler: the API server serves no resource.k8s.io/v1: pods with ResourceClaims wait")
		return nil
	}
	f, err := dra.ReadFeatures(ctx, s.client.Discovery().RESTClient())
	if err != nil {
		slog.Warn("allot scheduler: DRA features", "err", err)
	}
	s.draFeatures = f
	s.draCEL = cel.NewCache(1000, cel.Features{EnableConsumableCapacity: f.ConsumableCapacity})
	if s.claimsAssumed == nil {
		s.claimsAssumed = map[types.UID]assumedClaim{}
	}
	s.draSlices = factory.Resource().V1().ResourceSlices().Informer()
	s.draClaims = factory.Resource().V1().ResourceClaims().Informer()
	s.draClasses = factory.Resource().V1().DeviceClasses().Informer()
	changed := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.draVersion.Add(1); s.poke() },
		UpdateFunc: func(any, any) { s.draVersion.Add(1); s.poke() }, DeleteFunc: func(any) { s.draVersion.Add(1); s.poke() }}
	_, _ = s.draSlices.AddEventHandler(changed)
	_, _ = s.draClasses.AddEventHandler(changed)
	// A claim freed (the resource claim controller clearing its allocation) or made from
	// a template is news for a waiting pod.
	_, _ = s.draClaims.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() }, DeleteFunc: func(any) { s.poke() },
		UpdateFunc: func(o, n any) {
			oc, ok1 := o.(*resourceapi.ResourceClaim)
			nc, ok2 := n.(*resourceapi.ResourceClaim)
			if !ok1 || !ok2 || (oc.Status.Allocation == nil) != (nc.Status.Allocation == nil) || len(oc.Status.ReservedFor) != len(nc.Status.ReservedFor) {
				s.poke()
			}
		}})
	slog.Info("allot scheduler: allocating DRA claims", "features", f.Set().UnsortedList())
	return []cache.InformerSynced{s.draSlices.HasSynced, s.draClaims.HasSynced, s.draClasses.HasSynced}
}

// draForCycle builds the cycle's view of DRA; nil where it is not served.
func (s *Scheduler) draForCycle(nodes []*corev1.Node) *draCycle {
	if s.draSlices == nil {
		return nil
	}
	v := s.draVersion.Load()
	if v != s.draFits.version || s.draFits.m == nil {
		s.draFits = fitCache{version: v, m: map[string]map[string]bool{}}
	}
	s.draFits.newCycle()
	classes := dra.Classes{}
	var classList []*resourceapi.DeviceClass
	for _, o := range s.draClasses.GetStore().List() {
		c := o.(*resourceapi.DeviceClass)
		classes[c.Name] = c
		classList = append(classList, c)
	}
	names := dra.DefaultClassNames
	if len(s.opts.GPUDeviceClasses) > 0 {
		names.GPU = s.opts.GPUDeviceClasses
	}
	if len(s.opts.MIGDeviceClasses) > 0 {
		names.MIG = s.opts.MIGDeviceClasses
	}
	claims := s.claimsNow()
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	if s.draInv == nil || s.draInvVersion != v {
		var slices []*resourceapi.ResourceSlice
		for _, o := range s.draSlices.GetStore().List() {
			slices = append(slices, o.(*resourceapi.ResourceSlice))
		}
		s.draInv, s.draInvVersion = dra.NewInventory(slices, classList, names, s.draCEL), v
	}
	d := &draCycle{inv: s.draInv, classes: classes, features: s.draFeatures,
		claims: claims, nodes: byName, fits: &s.draFits}
	s.draCur.Store(d)
	return d
}

func (s *Scheduler) draNow() *draCycle { return s.draCur.Load() }
