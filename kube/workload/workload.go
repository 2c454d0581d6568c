// Package workload makes gangs of the workloads people already run: it creates a PodGroup
// for every batch Job, JobSet, Kubeflow PyTorchJob, MPIJob or TrainJob, RayCluster, and
// group of a LeaderWorkerSet whose pods Allot schedules, with minMember from the workload's
// shape, so that its pods start together or not at all, and, for a workload that says how
// far it may grow (elastic.go), the range the scheduler changes its count within. The
// admission webhook labels the pods with the group's name (docs/integrations.md).
package workload

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// kind is a custom workload kind Allot groups when its CRD is installed.
type kind struct {
	gvr  schema.GroupVersionResource
	kind string
	// shape returns whether any pod of the workload is scheduled by Allot, and how many
	// pods make up the gang (of a LeaderWorkerSet, one group's).
	shape func(u *unstructured.Unstructured) (ours bool, pods int64)
	// sync keeps the workload's PodGroups; nil is one PodGroup of the workload's name and
	// shape (syncShaped).
	sync func(c *Controller, ctx context.Context, k kind, u *unstructured.Unstructured)
}

// JobSets are sigs.k8s.io/jobset's resource.
var JobSets = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

var customKinds = []kind{
	{JobSets, "JobSet", jobSetShape, (*Controller).syncJobSet},
	{schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}, "PyTorchJob", pytorchShape, nil},
	{schema.GroupVersionResource{Group: "kubeflow.org", Version: "v2beta1", Resource: "mpijobs"}, "MPIJob", replicaSpecsShape("mpiReplicaSpecs"), nil},
	{LeaderWorkerSets, "LeaderWorkerSet", lwsShape, (*Controller).syncLWS},
	{RayClusters, "RayCluster", rayClusterShape, (*Controller).syncRayCluster},
}

// Controller keeps the PodGroups of gang workloads.
type Controller struct {
	client kubernetes.Interface
	dyn    dynamic.Interface   // other projects' workloads (JobSets, PyTorchJobs, MPIJobs)
	allot  versioned.Interface // Allot's PodGroups
	// groups caches the PodGroups, so that a Job's status updates cost no API call.
	groups cache.SharedIndexInformer
	writes *prometheus.CounterVec
	clock  clock.WithTicker // when Run asks again for the kinds not served (Rediscover)
	// foreign is the PodGroups already warned of as another object's (namespace/name and
	// the workload's UID), so that each is logged once, not at every event.
	foreign sync.Map
}

// New returns a controller.
func New(client kubernetes.Interface, dyn dynamic.Interface, allot versioned.Interface) *Controller {
	return &Controller{client: client, dyn: dyn, allot: allot, clock: clock.RealClock{}, writes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_workload_pod_group_writes_total",
		Help: "PodGroups the workload controller created, corrected or deleted, by action (create, update, delete) and result (ok, error).",
	}, []string{"action", "result"})}
}

// Collectors are the controller's Prometheus series, for the process's registry.
func (c *Controller) Collectors() []prometheus.Collector { return []prometheus.Collector{c.writes} }

// wrote counts one write; a conflict or an object that is already there is another
// writer having got there first, not an error.
func (c *Controller) wrote(action string, err error) {
	result := "ok"
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
		result = "error"
	}
	c.writes.WithLabelValues(action, result).Inc()
}

// Rediscover is how often Run asks the API server again for the custom kinds it does not
// serve yet: a CRD installed after the controller started (allot up --with, an operator
// installed later) gets its workloads grouped from then on.
const Rediscover = 5 * time.Second

// Run works until ctx ends. Custom kinds are watched from when their CRDs are served.
func (c *Controller) Run(ctx context.Context) {
	f := informers.NewSharedInformerFactory(c.client, 0)
	jobs := f.Batch().V1().Jobs().Informer()
	onJob := func(o any) {
		if j, ok := o.(*batchv1.Job); ok {
			c.syncJob(ctx, j)
		}
	}
	_, _ = jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onJob, UpdateFunc: func(_, n any) { onJob(n) }})
	df := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, 0)
	af := allotinformers.NewSharedInformerFactory(c.allot, 0)
	c.groups = af.Allot().V1alpha1().PodGroups().Informer()
	pending := c.watchServed(ctx, df, customKinds)
	// The cache of PodGroups first: ensure reads it (and falls back to the API before sync).
	af.Start(ctx.Done())
	df.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.groups.HasSynced) {
		return
	}
	f.Start(ctx.Done())
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	t := c.clock.NewTicker(Rediscover)
	defer t.Stop()
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if now := c.watchServed(ctx, df, pending); len(now) < len(pending) {
				pending = now
				df.Start(ctx.Done()) // starts the informers added since; the others run on
			}
		}
	}
	<-ctx.Done()
}

// watchServed watches the kinds the API server serves, and returns the others.
func (c *Controller) watchServed(ctx context.Context, df dynamicinformer.DynamicSharedInformerFactory, kinds []kind) []kind {
	var pending []kind
	for _, k := range kinds {
		if !c.served(k.gvr) {
			pending = append(pending, k)
			continue
		}
		sync := k.sync
		if sync == nil {
			sync = (*Controller).syncShaped
		}
		on := func(o any) {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() == nil {
				sync(c, ctx, k, u)
			}
		}
		_, _ = df.ForResource(k.gvr).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, n any) { on(n) }})
	}
	return pending
}

// syncShaped keeps the one PodGroup of a workload, named after it, of its shape.
func (c *Controller) syncShaped(ctx context.Context, k kind, u *unstructured.Unstructured) {
	if ours, pods := k.shape(u); ours {
		c.ensure(ctx, u.GetNamespace(), u.GetName(), u.GetLabels(), u.GetAnnotations(), pods, elasticOf(k, u),
			metav1.OwnerReference{APIVersion: k.gvr.GroupVersion().String(), Kind: k.kind, Name: u.GetName(), UID: u.GetUID()})
	}
}

func (c *Controller) served(gvr schema.GroupVersionResource) bool {
	return Served(c.client.Discovery(), gvr)
}

// Served tells whether the API server knows the resource (its CRD is installed).
func Served(d discovery.DiscoveryInterface, gvr schema.GroupVersionResource) bool {
	l, err := d.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range l.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}

// Gang is the gang size of a workload Allot groups (a Job, JobSet, PyTorchJob, MPIJob or
// RayCluster as read from the API; of a LeaderWorkerSet, one group's), and whether its pods
// are scheduled by Allot; ok is false for other kinds. A TrainJob's gang is its JobSet's
// (TrainerShape).
func Gang(u *unstructured.Unstructured) (pods int64, ours, ok bool) {
	if u.GetKind() == "Job" {
		var j batchv1.Job
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &j); err != nil {
			return 0, false, false
		}
		return JobGang(&j), j.Spec.Template.Spec.SchedulerName == v1alpha1.SchedulerName, true
	}
	for _, k := range customKinds {
		if k.kind == u.GetKind() {
			ours, pods := k.shape(u)
			return pods, ours, true
		}
	}
	return 0, false, false
}

// JobGang is a batch Job's gang size: the pods it runs at once.
func JobGang(j *batchv1.Job) int64 {
	// An elastic job (allot submit --min-workers) names its gang size itself.
	if m, err := strconv.ParseInt(j.Annotations[v1alpha1.AnnotationMinMember], 10, 64); err == nil && m > 0 && m <= MaxGang {
		if j.Spec.Parallelism == nil || m <= int64(*j.Spec.Parallelism) {
			return m
		}
	}
	n := int64(1)
	if j.Spec.Parallelism != nil {
		n = int64(*j.Spec.Parallelism)
	}
	if j.Spec.Completions != nil && int64(*j.Spec.Completions) < n {
		n = int64(*j.Spec.Completions)
	}
	return bounded(n)
}

func (c *Controller) syncJob(ctx context.Context, j *batchv1.Job) {
	if j.Spec.Template.Spec.SchedulerName != v1alpha1.SchedulerName {
		return
	}
	if ref := metav1.GetControllerOf(j); ref != nil {
		if _, _, known := KindOf(ref.APIVersion, ref.Kind); known {
			// One of a JobSet's jobs (the JobSet is the gang), a RayJob's submitter (in
			// no gang): the webhook gangs a Job's pods by the Job only when no owner Allot
			// knows controls it, and so does this.
			return
		}
	}
	if JobGang(j) < 1 {
		return // parallelism 0: nothing runs
	}
	c.ensure(ctx, j.Namespace, j.Name, j.Labels, j.Annotations, JobGang(j), JobElastic(j),
		metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID})
}

// ensure creates or corrects the PodGroup named after the workload, owned by it so that
// it goes with it, with the workload's topology annotations (the scheduler reads them there
// for pods whose template does not carry them).
func (c *Controller) ensure(ctx context.Context, ns, name string, labels, annotations map[string]string, minMember int64, elastic *v1alpha1.PodGroupElastic, owner metav1.OwnerReference) {
	topology := map[string]string{}
	for _, k := range convert.TopologyAnnotations {
		if v, ok := annotations[k]; ok {
			topology[k] = v
		}
	}
	sameTopology := func(pg *v1alpha1.PodGroup) bool {
		for _, k := range convert.TopologyAnnotations {
			if pg.Annotations[k] != topology[k] {
				return false
			}
		}
		return true
	}
	queue := c.withQueue(ctx, ns, labels)[v1alpha1.LabelQueue]
	if queue == "" {
		return // no queue: the admission webhook refuses the pods and says why
	}
	if minMember > math.MaxInt32 {
		minMember = math.MaxInt32 // the scheduler says the gang is too large, by its size
	}
	min := int32(minMember)
	asItShouldBe := func(pg *v1alpha1.PodGroup) bool {
		return pg.Spec.MinMember == min && pg.Spec.Queue == queue && sameTopology(pg) && sameElastic(pg.Spec.Elastic, elastic)
	}
	if o, ok, _ := c.groups.GetStore().GetByKey(ns + "/" + name); ok {
		pg := o.(*v1alpha1.PodGroup)
		if c.othersGroup(pg, owner) || asItShouldBe(pg) {
			return // another workload's, or as it should be: no API call
		}
	}
	groups := c.allot.AllotV1alpha1().PodGroups(ns)
	cur, err := groups.Get(ctx, name, metav1.GetOptions{})
	// A conflict (the scheduler wrote the group's status meanwhile) is tried again on a
	// fresh read: the workload may not change again for a long time (a PyTorchJob whose
	// count the scheduler raised), and its group would stay stale until then.
	for attempt := 0; err == nil; attempt++ {
		if c.othersGroup(cur, owner) || asItShouldBe(cur) {
			return
		}
		cur.Spec.MinMember, cur.Spec.Queue, cur.Spec.Elastic = min, queue, elastic
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		for _, k := range convert.TopologyAnnotations {
			if v, ok := topology[k]; ok {
				cur.Annotations[k] = v
			} else {
				delete(cur.Annotations, k)
			}
		}
		_, uerr := groups.Update(ctx, cur, metav1.UpdateOptions{})
		c.wrote("update", uerr)
		if apierrors.IsConflict(uerr) && attempt < 4 {
			if cur, uerr = groups.Get(ctx, name, metav1.GetOptions{}); uerr == nil {
				continue
			}
		}
		if uerr != nil && !apierrors.IsConflict(uerr) {
			slog.Warn("allot workload: pod group", "group", ns+"/"+name, "err", uerr)
		}
		return
	}
	if !apierrors.IsNotFound(err) {
		slog.Warn("allot workload: pod group", "group", ns+"/"+name, "err", err)
		return
	}
	owner.Controller = new(bool)
	*owner.Controller = true
	pg := &v1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1alpha1.LabelQueue: queue},
			OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: v1alpha1.PodGroupSpec{MinMember: min, Queue: queue, Elastic: elastic}}
	if len(topology) > 0 {
		pg.Annotations = topology
	}
	_, err = groups.Create(ctx, pg, metav1.CreateOptions{})
	c.wrote("create", err)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		slog.Warn("allot workload: pod group", "group", ns+"/"+name, "err", err)
	}
}

// othersGroup tells a PodGroup controlled by another object than owner: two workloads
// whose groups have the same name (an LWS llm's group 1 and a Job named llm-1). The first
// keeps it; correcting it for the second would flip it between the two at every event.
// It is logged once per group and workload.
func (c *Controller) othersGroup(pg *v1alpha1.PodGroup, owner metav1.OwnerReference) bool {
	ref := metav1.GetControllerOfNoCopy(pg)
	if ref == nil || ref.UID == owner.UID {
		return false
	}
	key := pg.Namespace + "/" + pg.Name + "/" + string(owner.UID)
	if _, warned := c.foreign.LoadOrStore(key, true); !warned {
		slog.Warn("allot workload: pod group is another workload's; this one gets none",
			"group", pg.Namespace+"/"+pg.Name, "owner", ref.Kind+"/"+ref.Name, "workload", owner.Kind+"/"+owner.Name)
	}
	return true
}

// withQueue is labels with the queue its namespace names by default where they name none
// (a copy then), as the admission webhook gives the workload's pods.
func (c *Controller) withQueue(ctx context.Context, ns string, labels map[string]string) map[string]string {
	if labels[v1alpha1.LabelQueue] != "" {
		return labels
	}
	out := map[string]string{}
	for k, v := range labels {
		out[k] = v
	}
	if n, err := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.Labels[v1alpha1.LabelQueue] != "" {
		out[v1alpha1.LabelQueue] = n.Labels[v1alpha1.LabelQueue]
	}
	return out
}

// jobSetShape: each replicated job runs replicas Jobs of parallelism pods.
func jobSetShape(u *unstructured.Unstructured) (bool, int64) {
	return replicatedJobsShape(u, func(map[string]any) bool { return true })
}

// replicatedJobsShape sums replicas × parallelism over a JobSet's replicated jobs that
// counts says are the gang's, and tells whether any of their pods is Allot's.
func replicatedJobsShape(u *unstructured.Unstructured, counts func(rj map[string]any) bool) (bool, int64) {
	rjs, _, _ := unstructured.NestedSlice(u.Object, "spec", "replicatedJobs")
	var ours bool
	var pods int64
	for _, o := range rjs {
		rj, ok := o.(map[string]any)
		if !ok || !counts(rj) {
			continue
		}
		pods = bounded(pods + bounded(intOr(rj, 1, "replicas")*intOr(rj, 1, "template", "spec", "parallelism")))
		if s, _, _ := unstructured.NestedString(rj, "template", "spec", "template", "spec", "schedulerName"); s == v1alpha1.SchedulerName {
			ours = true
		}
	}
	return ours, pods
}

// replicaSpecsShape: Kubeflow jobs list their roles (master, worker, launcher) with replicas.
func replicaSpecsShape(field string) func(*unstructured.Unstructured) (bool, int64) {
	return func(u *unstructured.Unstructured) (bool, int64) {
		specs, _, _ := unstructured.NestedMap(u.Object, "spec", field)
		var ours bool
		var pods int64
		for _, o := range specs {
			rs, ok := o.(map[string]any)
			if !ok {
				continue
			}
			pods = bounded(pods + intOr(rs, 1, "replicas"))
			if s, _, _ := unstructured.NestedString(rs, "template", "spec", "schedulerName"); s == v1alpha1.SchedulerName {
				ours = true
			}
		}
		return ours, pods
	}
}

// pytorchShape is a PyTorchJob's: its replicas, but with an elasticPolicy (torchrun's
// elastic rendezvous) its workers beyond elasticPolicy.minReplicas are elastic members,
// not part of the gang: the job starts with its other replicas and that many workers, and
// grows as GPUs free (rule 8). A minimum outside 1 to the workers asked is held to it.
func pytorchShape(u *unstructured.Unstructured) (bool, int64) {
	ours, pods := replicaSpecsShape("pytorchReplicaSpecs")(u)
	least, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "elasticPolicy", "minReplicas")
	worker, _, _ := unstructured.NestedMap(u.Object, "spec", "pytorchReplicaSpecs", "Worker")
	if !ok || worker == nil {
		return ours, pods
	}
	workers := intOr(worker, 1, "replicas")
	m := intOr(map[string]any{"m": least}, workers, "m")
	return ours, pods - workers + min(max(m, 1), workers)
}

// MaxGang bounds a gang's size: a spec that says more (a number the CRD's schema did not
// check) must not overflow the sums below.
const MaxGang = v1alpha1.MaxGang

// bounded clamps a count read from a spec to [0, MaxGang].
func bounded(v int64) int64 { return min(max(v, 0), MaxGang) }

func intOr(m map[string]any, def int64, path ...string) int64 {
	v, ok, err := unstructured.NestedFieldNoCopy(m, path...)
	if !ok || err != nil {
		return def
	}
	switch x := v.(type) {
	case int64:
		return bounded(x)
	case float64:
		if x != x { // NaN
			return def
		}
		return bounded(int64(min(max(x, 0), MaxGang)))
	}
	return def
}
