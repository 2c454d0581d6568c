package inspect

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/submit"
	"github.com/allot-dev/allot/kube/workload"
)

// Workload is one row of allot list: the top owner of pods Allot schedules (a Job, JobSet,
// Deployment, PyTorchJob, MPIJob, StatefulSet, TrainJob, LeaderWorkerSet, RayCluster,
// RayJob, RayService, Knative Service, InferenceService, a PodGroup of bare pods, or a bare
// pod), whoever made it: allot submit, kubectl or an operator.
type Workload struct {
	Name       string    `json:"name"`
	Namespace  string    `json:"namespace"`
	Kind       string    `json:"kind"`
	APIVersion string    `json:"apiVersion"`
	UID        types.UID `json:"uid,omitempty"`
	Queue      string    `json:"queue"`
	Type       string    `json:"type"`
	Status     string    `json:"status"`
	GPUs       float64   `json:"gpusAllocated"`
	Requested  float64   `json:"gpusRequested"`
	Running    int       `json:"running"`
	Pending    int       `json:"pending"`
	Nodes      []string  `json:"nodes"`
	Created    time.Time `json:"created"`
	Reason     string    `json:"reason,omitempty"` // why it waits, from the scheduler
	Pods       []Pod     `json:"pods,omitempty"`
	// Submitted is whether allot submit made it (its Services carry the workload's label).
	Submitted bool `json:"submitted"`
	// Owners are the objects between the workload and its pods (a Deployment's
	// ReplicaSets, a JobSet's Jobs): their events are the workload's too.
	Owners []Ref `json:"owners,omitempty"`
	// Idle is how long its GPUs have been idle, and whether Allot stopped it for that
	// (idle.go).
	Idle
	// URL is where its --port is reached, where allot submit exposed it (urls.go).
	URL string `json:"url,omitempty"`
	// CreatedBy is who created it, as the API server authenticated them
	// (allot.dev/created-by on its top object, which only Allot's webhook writes).
	CreatedBy string `json:"createdBy,omitempty"`
	// RunningSince is when the longest-running of its running pods started (zero while
	// none runs): its runtime, as people ask it.
	RunningSince time.Time `json:"runningSince,omitzero"`
	// Progress is how far it has come, in its owner's words (allot.dev/progress on its top
	// object, else on its pods), cleaned for a terminal (Progress).
	Progress string `json:"progress,omitempty"`
	// Use is the GPU use its nodes' agents last measured (use.go); nil where none is read.
	Use *GPUUse `json:"gpuUse,omitempty"`
	// Cluster is the worker cluster a multi-cluster manager dispatched it to (its
	// allot.dev/cluster, which only the manager writes); its pods are there, and the
	// counts above are its copy's status as the manager mirrors it.
	Cluster string `json:"cluster,omitempty"`
}

// Ref names one object.
type Ref struct {
	Kind string    `json:"kind"`
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// Ref is the workload's own object.
func (w *Workload) Ref() string { return w.Kind + "/" + w.Name }

// Objects are what workloads are built from: lists (the CLI) or informer caches (the
// dashboard). Refusals are the last FailedCreate message per owner UID: a Job whose pods the
// admission webhook refuses has no pod to carry a reason, only that event.
type Objects struct {
	Pods        []*corev1.Pod
	Jobs        []*batchv1.Job
	Deployments []*appsv1.Deployment
	ReplicaSets []*appsv1.ReplicaSet
	// StatefulSets are read so that one scaled to zero (an interactive workload suspended)
	// is still listed.
	StatefulSets []*appsv1.StatefulSet
	Refusals     map[types.UID]Refusal
	// Others are other projects' objects between pods and their workloads (JobSets,
	// RayClusters) and workloads (RayJobs, TrainJobs, LeaderWorkerSets); nil where not read.
	Others []Other
	// NodeUUIDs are each node's device UUIDs by index (its agent's list), to show the
	// devices the kubelet gave a pod rather than those Allot preferred; nil when not read.
	NodeUUIDs map[string][]string
}

// NodeUUIDs reads each node's device UUIDs by index from the agents' lists.
func NodeUUIDs(nodes []*corev1.Node) map[string][]string {
	out := map[string][]string{}
	for _, n := range nodes {
		if v := n.Annotations[v1alpha1.AnnotationGPUUUIDs]; v != "" {
			out[n.Name] = strings.Split(v, ",")
		}
	}
	return out
}

// Refusal is an owner's last pod creation the API server refused.
type Refusal struct {
	Message string
	Time    time.Time
}

// Workloads lists the workloads in a namespace ("" for all), optionally of one queue, with
// their pods.
func Workloads(ctx context.Context, client kubernetes.Interface, namespace, queue string) ([]Workload, error) {
	var o Objects
	// Every pod Allot schedules carries its queue (the webhook sees to it).
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelQueue})
	if err != nil {
		return nil, err
	}
	o.Pods = ptrs(pods.Items)
	jobs, err := client.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	o.Jobs = ptrs(jobs.Items)
	deps, err := client.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	o.Deployments = ptrs(deps.Items)
	rss, err := client.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	o.ReplicaSets = ptrs(rss.Items)
	sts, err := client.AppsV1().StatefulSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	o.StatefulSets = ptrs(sts.Items)
	refused, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "FailedCreate").String()})
	if err != nil {
		return nil, err
	}
	o.Refusals = Refusals(ptrs(refused.Items))
	o.Others = ecosystemObjects(ctx, client, namespace)
	// Which devices pods really hold needs the nodes' device lists: a user who may not
	// read Nodes sees Allot's preference, said as such.
	var nodes []*corev1.Node
	if l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		nodes = ptrs(l.Items)
		o.NodeUUIDs = NodeUUIDs(nodes)
	}
	all := BuildWorkloads(o)
	withURLs(ctx, client, namespace, all)
	withUse(ctx, client, nodes, all)
	if queue == "" {
		return all, nil
	}
	out := all[:0]
	for _, w := range all {
		if w.Queue == queue {
			out = append(out, w)
		}
	}
	return out, nil
}

// Refusals picks the latest FailedCreate message of each object from events. Only an
// Event in the object's own namespace counts: one who may write Events in a namespace may
// name any object in involvedObject, and another team's Job would show a reason its
// controller never gave.
func Refusals(events []*corev1.Event) map[types.UID]Refusal {
	out := map[types.UID]Refusal{}
	for _, e := range events {
		if e.Reason != "FailedCreate" || e.InvolvedObject.UID == "" || e.Namespace != e.InvolvedObject.Namespace {
			continue
		}
		if t := EventTime(*e); !t.Before(out[e.InvolvedObject.UID].Time) {
			out[e.InvolvedObject.UID] = Refusal{Message: e.Message, Time: t}
		}
	}
	return out
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// owner is one object a workload may be: where the owner chain of a pod ends.
type owner struct {
	ref        Ref
	apiVersion string
	meta       *metav1.ObjectMeta // nil when the object itself is not at hand (a JobSet, a PodGroup)
	between    []Ref
}

// BuildWorkloads groups pods with their top owners. It reads only what it is given. A
// workload is found from its pods, or from a Job or Deployment whose pods Allot schedules
// when it has no pod (suspended, scaled to zero, or its pods refused).
func BuildWorkloads(o Objects) []Workload {
	jobs := map[types.UID]*batchv1.Job{}
	for _, j := range o.Jobs {
		jobs[j.UID] = j
	}
	rss := map[types.UID]*appsv1.ReplicaSet{}
	for _, r := range o.ReplicaSets {
		rss[r.UID] = r
	}
	deps := map[types.UID]*appsv1.Deployment{}
	for _, d := range o.Deployments {
		deps[d.UID] = d
	}
	sets := map[types.UID]*appsv1.StatefulSet{}
	for _, st := range o.StatefulSets {
		sets[st.UID] = st
	}
	others := map[types.UID]*Other{}
	lwsUID := map[string]types.UID{}
	for i := range o.Others {
		m := &o.Others[i]
		others[m.UID] = m
		if m.Kind == "LeaderWorkerSet" {
			lwsUID[m.Namespace+"/"+m.Name] = m.UID
		}
	}
	// climb follows controller references up from an owner: a ReplicaSet to its
	// Deployment, a Job to its JobSet, and on (climbsTo). It stops at anything else (a CronJob's Jobs are
	// each a workload of their own, as Kueue counts them).
	climb := func(ref metav1.OwnerReference) owner {
		top := owner{ref: Ref{Kind: ref.Kind, Name: ref.Name, UID: ref.UID}, apiVersion: ref.APIVersion}
		for range 4 {
			var m *metav1.ObjectMeta
			switch top.ref.Kind {
			case "ReplicaSet":
				if r := rss[top.ref.UID]; r != nil {
					m = &r.ObjectMeta
				}
			case "Job":
				if j := jobs[top.ref.UID]; j != nil {
					m = &j.ObjectMeta
				}
			case "Deployment":
				if d := deps[top.ref.UID]; d != nil {
					top.meta = &d.ObjectMeta
				}
			case "StatefulSet":
				if st := sets[top.ref.UID]; st != nil {
					top.meta = &st.ObjectMeta
				}
			default:
				if x := others[top.ref.UID]; x != nil {
					m = &x.ObjectMeta
				}
			}
			if m == nil {
				break
			}
			top.meta = m
			up := metav1.GetControllerOf(m)
			if up == nil || !climbsTo(top.ref.Kind, up.Kind) {
				break
			}
			top.between = append(top.between, top.ref)
			top = owner{ref: Ref{Kind: up.Kind, Name: up.Name, UID: up.UID}, apiVersion: up.APIVersion, between: top.between}
		}
		return top
	}

	byKey := map[string]*Workload{}
	get := func(ns string, top owner) *Workload {
		key := ns + "/" + top.ref.Kind + "/" + top.ref.Name
		w := byKey[key]
		if w == nil {
			w = &Workload{Name: top.ref.Name, Namespace: ns, Kind: top.ref.Kind, APIVersion: top.apiVersion, UID: top.ref.UID, Nodes: []string{}}
			byKey[key] = w
		}
		for _, b := range top.between {
			if !slices.Contains(w.Owners, b) {
				w.Owners = append(w.Owners, b)
			}
		}
		if m := top.meta; m != nil {
			w.Submitted = m.Labels[submit.LabelWorkload] == m.Name
			// The top object's (an owned one's may be copied), of the kinds whose value the
			// allot-created-by policy keeps (not a bare pod's).
			if len(m.OwnerReferences) == 0 && top.ref.Kind != "Pod" {
				w.CreatedBy = m.Annotations[v1alpha1.AnnotationCreatedBy]
			}
			if v, ok := m.Annotations[v1alpha1.AnnotationProgress]; ok {
				w.Progress = Progress(v)
			}
			if w.Queue == "" {
				w.Queue = m.Labels[v1alpha1.LabelQueue]
			}
			if w.Type == "" {
				w.Type = m.Labels[submit.LabelType]
			}
			if w.Created.IsZero() || m.CreationTimestamp.Time.Before(w.Created) {
				w.Created = m.CreationTimestamp.Time
			}
			w.readIdle(m)
		}
		return w
	}
	status := map[*Workload]string{}
	// refused keeps each workload's latest refusal of a pod; it explains the wait unless a
	// pod was made after it.
	refused := map[*Workload]Refusal{}
	refuse := func(w *Workload, r Refusal) {
		if r.Message != "" && (refused[w].Message == "" || r.Time.After(refused[w].Time)) {
			refused[w] = r
		}
	}
	newest := map[*Workload]time.Time{} // each workload's latest pod
	ours := func(t *corev1.PodTemplateSpec, m metav1.ObjectMeta) bool {
		return t.Spec.SchedulerName == v1alpha1.SchedulerName || m.Labels[submit.LabelWorkload] != ""
	}
	// A multi-cluster manager's Job (spec.managedBy) has its pods on a worker: what is
	// known of them is its copy's status, mirrored on it.
	dispatched := func(j *batchv1.Job) bool {
		return j.Spec.ManagedBy != nil && *j.Spec.ManagedBy == v1alpha1.MultiClusterManagedBy
	}
	for _, j := range o.Jobs {
		if !ours(&j.Spec.Template, j.ObjectMeta) && !dispatched(j) {
			continue
		}
		self := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID}
		w := get(j.Namespace, climb(self))
		if dispatched(j) {
			fromCopy(w, j)
		}
		if w.Kind == "Job" {
			status[w] = jobState(j)
			if w.Type == "" {
				w.Type = submit.TypeTrain
				if workload.JobGang(j) > 1 {
					w.Type = submit.TypeDistributed
				}
			}
		}
		refuse(w, o.Refusals[j.UID])
	}
	for _, d := range o.Deployments {
		if !ours(&d.Spec.Template, d.ObjectMeta) {
			continue
		}
		top := climb(metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID})
		if lt, ok := labelledTop(d.Labels); ok {
			top = lt // a Knative Revision's or an InferenceService's
		}
		w := get(d.Namespace, top)
		if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 && d.Annotations[AnnotationSuspendedReplicas] != "" {
			status[w] = "Suspended"
		}
	}
	for _, st := range o.StatefulSets {
		if !ours(&st.Spec.Template, st.ObjectMeta) {
			continue
		}
		w := get(st.Namespace, climb(metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: st.Name, UID: st.UID}))
		if st.Spec.Replicas != nil && *st.Spec.Replicas == 0 && st.Annotations[AnnotationSuspendedReplicas] != "" {
			status[w] = "Suspended"
		}
	}
	for _, r := range o.ReplicaSets {
		if ref := metav1.GetControllerOf(r); ref != nil && ours(&r.Spec.Template, r.ObjectMeta) {
			top := climb(*ref)
			if w := byKey[r.Namespace+"/"+top.ref.Kind+"/"+top.ref.Name]; w != nil {
				refuse(w, o.Refusals[r.UID])
			}
		}
	}
	for _, p := range o.Pods {
		if p.Labels[v1alpha1.LabelQueue] == "" {
			continue
		}
		var top owner
		if lt, ok := labelledTop(p.Labels); ok {
			top = lt
			top.ref.UID = lwsUID[p.Namespace+"/"+lt.ref.Name]
		} else if ref := metav1.GetControllerOf(p); ref != nil {
			top = climb(*ref)
		} else if g := p.Labels[v1alpha1.LabelPodGroup]; g != "" {
			top = owner{ref: Ref{Kind: "PodGroup", Name: g}, apiVersion: v1alpha1.GroupVersion.String()}
		} else {
			top = owner{ref: Ref{Kind: "Pod", Name: p.Name, UID: p.UID}, apiVersion: "v1", meta: &p.ObjectMeta}
		}
		w := get(p.Namespace, top)
		// The pods' queue over the owner's: the webhook admitted it for the namespace,
		// where an owner's label is whatever its namespace's tenant wrote.
		if q := p.Labels[v1alpha1.LabelQueue]; q != "" {
			w.Queue = q
		}
		if w.Created.IsZero() || p.CreationTimestamp.Time.Before(w.Created) {
			w.Created = p.CreationTimestamp.Time
		}
		if p.CreationTimestamp.Time.After(newest[w]) {
			newest[w] = p.CreationTimestamp.Time
		}
		if s := p.Status.StartTime; s != nil && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil &&
			(w.RunningSince.IsZero() || s.Time.Before(w.RunningSince)) {
			w.RunningSince = s.Time
		}
		if w.Type == "" {
			w.Type = podType(top.ref.Kind, p)
		}
		if v, ok := p.Annotations[v1alpha1.AnnotationProgress]; ok && w.Progress == "" {
			w.Progress = Progress(v)
		}
		pod := Pod{Name: p.Name, UID: p.UID, Node: p.Spec.NodeName, HostIP: p.Status.HostIP, Asks: PodGPUs(p), Phase: string(p.Status.Phase),
			Group: p.Labels[v1alpha1.LabelPodGroup], Translated: p.Annotations[v1alpha1.AnnotationTranslated], GPUMemory: podGPUMemory(p)}
		if booked := p.Annotations[v1alpha1.AnnotationMIGInstances]; booked != "" && p.Spec.NodeName != "" {
			pod.GPUs = "MIG " + migInstances(booked)
		}
		if p.DeletionTimestamp != nil {
			pod.Phase = "Terminating"
		}
		if idx := p.Annotations[v1alpha1.AnnotationGPUs]; idx != "" {
			// In numeric order, as the scheduler reads them ("3,1" is devices 1 and 3).
			gpus := convert.Indices(idx)
			_, shared := p.Annotations[v1alpha1.AnnotationGPUShare]
			// Whole GPUs are the device plugin's pick: the devices its agent recorded,
			// once known; until then, Allot's preference, said as such. A shared GPU is
			// the one its reservation holds, already the real one where an agent reports.
			real, known := recordedIndices(p, o.NodeUUIDs[p.Spec.NodeName])
			if known {
				gpus = real
			}
			preferred := !shared && !known
			slices.Sort(gpus)
			parts := make([]string, len(gpus))
			for i, g := range gpus {
				parts[i] = strconv.Itoa(g)
			}
			pod.GPUs = strings.Join(parts, ",")
			if preferred {
				pod.GPUs += " (preferred)"
			}
			if share := p.Annotations[v1alpha1.AnnotationGPUShare]; share != "" {
				pod.GPUs += fmt.Sprintf(" (%s)", strconv.FormatFloat(PodGPUs(p), 'f', -1, 64))
			}
			pod.devices, pod.shared = gpus, shared
			pod.sliceUsedMi = podMemoryUsed(p)
		}
		if live(p) {
			w.Requested += pod.Asks
			if p.Spec.NodeName != "" {
				w.GPUs += pod.Asks
				w.Running++
				if !slices.Contains(w.Nodes, p.Spec.NodeName) {
					w.Nodes = append(w.Nodes, p.Spec.NodeName)
				}
			} else {
				w.Pending++
				pod.Reason = waitingReason(p)
				if w.Reason == "" {
					w.Reason = pod.Reason
				}
			}
		}
		w.Pods = append(w.Pods, pod)
	}
	addOthers(o.Others, get, func(ns string, top owner) bool { return byKey[ns+"/"+top.ref.Kind+"/"+top.ref.Name] != nil }, status)
	for w, r := range refused {
		if !newest[w].After(r.Time) && status[w] != "Suspended" {
			w.Reason = "pods refused: " + r.Message
		}
	}
	out := make([]Workload, 0, len(byKey))
	for _, w := range byKey {
		sort.Strings(w.Nodes)
		sort.Slice(w.Pods, func(a, b int) bool { return w.Pods[a].Name < w.Pods[b].Name })
		switch st := status[w]; {
		case st != "" && st != "Running":
			w.Status = st
		case w.Pending > 0 && w.Running == 0:
			w.Status = "Pending"
		case w.Pending > 0:
			w.Status = "Running (partly)"
		case w.Running > 0:
			w.Status = "Running"
		default:
			w.Status = "Pending"
		}
		if w.Type == "" {
			w.Type = submit.TypeTrain
		}
		if w.Status == "Pending" && w.Reason == "" && len(w.Pods) == 0 && w.Kind != "Pod" {
			w.Reason = "no pods yet: waiting for the " + w.Kind + "'s controller to make them"
		}
		out = append(out, *w)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Namespace != out[b].Namespace {
			return out[a].Namespace < out[b].Namespace
		}
		if out[a].Name != out[b].Name {
			return out[a].Name < out[b].Name
		}
		return out[a].Kind < out[b].Kind
	})
	return out
}

// AnnotationSuspendedReplicas keeps a Deployment's or StatefulSet's replicas while allot suspend holds it
// at zero.
const AnnotationSuspendedReplicas = "allot.dev/suspended-replicas"

// podType is a workload's type when its object does not say (not made by allot submit):
// by its kind, else the pod's class.
func podType(kind string, p *corev1.Pod) string {
	switch kind {
	case "JobSet", "PyTorchJob", "MPIJob", "PodGroup":
		return submit.TypeDistributed
	case "Deployment":
		return submit.TypeInference
	case "StatefulSet":
		// A notebook is a StatefulSet of one (allot submit --interactive, Kubeflow).
		if p.Labels[v1alpha1.LabelClass] == v1alpha1.ClassInteractive {
			return submit.TypeInteractive
		}
		return submit.TypeInference
	}
	if t := ecosystemType(kind); t != "" {
		return t
	}
	switch p.Labels[v1alpha1.LabelClass] {
	case v1alpha1.ClassInteractive:
		return submit.TypeInteractive
	case v1alpha1.ClassInference:
		return submit.TypeInference
	}
	return ""
}

func jobState(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return "Succeeded"
		case batchv1.JobFailed:
			return "Failed"
		case batchv1.JobSuspended:
			return "Suspended"
		}
	}
	if j.Spec.Suspend != nil && *j.Spec.Suspend {
		return "Suspended"
	}
	return "Running"
}

// Events returns the events about a workload's objects and pods, oldest first.
func Events(ctx context.Context, client kubernetes.Interface, w *Workload) ([]corev1.Event, error) {
	l, err := client.CoreV1().Events(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return WorkloadEvents(ptrs(l.Items), w), nil
}

// WorkloadEvents picks a workload's events, oldest first, by the UIDs of its object, the
// objects between it and its pods, and its pods. Pods that are gone (a Job's pod evicted by
// a reclaim is deleted and replaced) are known from their owners' "Created pod" events:
// their events stay part of the workload's story. Another workload whose name starts the
// same is never mixed in.
func WorkloadEvents(events []*corev1.Event, w *Workload) []corev1.Event {
	uids := map[types.UID]bool{}
	if w.UID != "" {
		uids[w.UID] = true
	}
	for _, o := range w.Owners {
		uids[o.UID] = true
	}
	pods := map[string]bool{}
	for _, p := range w.Pods {
		uids[p.UID] = true
		pods[p.Name] = true
	}
	mine := func(e *corev1.Event) bool {
		o := e.InvolvedObject
		switch {
		case e.Namespace != w.Namespace:
			return false
		case o.UID != "":
			return uids[o.UID]
		case o.Kind == "Pod":
			return pods[o.Name]
		}
		return o.Kind == w.Kind && o.Name == w.Name
	}
	for _, e := range events {
		if mine(e) && e.Reason == "SuccessfulCreate" {
			if name, ok := strings.CutPrefix(e.Message, "Created pod: "); ok {
				pods[name] = true
			}
		}
	}
	var out []corev1.Event
	for _, e := range events {
		if mine(e) || e.Namespace == w.Namespace && e.InvolvedObject.Kind == "Pod" && pods[e.InvolvedObject.Name] {
			out = append(out, *e)
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		ta, tb := EventTime(out[a]), EventTime(out[b])
		if !ta.Equal(tb) {
			return ta.Before(tb)
		}
		// Times are in seconds: within one, the order the API server stored them in.
		ra, ea := strconv.ParseUint(out[a].ResourceVersion, 10, 64)
		rb, eb := strconv.ParseUint(out[b].ResourceVersion, 10, 64)
		return ea == nil && eb == nil && ra < rb
	})
	return out
}

// recordedIndices reads the devices the kubelet gave a pod (its agent's record) as indices
// of its node's devices; known is false without a record, or when a device is not listed.
func recordedIndices(p *corev1.Pod, uuids []string) (indices []int, known bool) {
	rec := p.Annotations[v1alpha1.AnnotationGPUDevices]
	if rec == "" || len(uuids) == 0 {
		return nil, false
	}
	for _, u := range strings.Split(rec, ",") {
		i := slices.Index(uuids, strings.TrimSpace(u))
		if i < 0 {
			return nil, false
		}
		indices = append(indices, i)
	}
	return indices, true
}

// migInstances writes where the bind booked a pod's MIG instances ("<GPU>/<profile>@<start>",
// comma-separated) as their profiles at their first memory slices: "3g.40gb@0, 3g.40gb@4".
func migInstances(booked string) string {
	var out []string
	for _, f := range strings.Split(booked, ",") {
		_, in, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok {
			in = strings.TrimSpace(f)
		}
		out = append(out, in)
	}
	return strings.Join(out, ", ")
}

// MaxProgress is the most of a workload's allot.dev/progress shown, in characters.
const MaxProgress = 64

// Progress is a workload's allot.dev/progress as shown: its owner's text on one line, with
// no control characters (nothing of it can move a terminal's cursor or colour a table), at
// most MaxProgress characters.
func Progress(v string) string {
	var b strings.Builder
	n := 0
	for _, r := range strings.TrimSpace(v) {
		if n == MaxProgress {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// fromCopy fills in a manager's dispatched Job from its annotations and mirrored status:
// where it runs, its pods (ready as running, the rest of the active ones waiting), its GPUs,
// and why it waits.
func fromCopy(w *Workload, j *batchv1.Job) {
	w.Cluster = j.Annotations[v1alpha1.AnnotationDispatchCluster]
	per := 0.0
	for _, c := range j.Spec.Template.Spec.Containers {
		per += GPUs(c.Resources.Limits)
	}
	pods := int32(1)
	if j.Spec.Parallelism != nil {
		pods = *j.Spec.Parallelism
	}
	w.Reason = j.Annotations[v1alpha1.AnnotationDispatchWaiting]
	// Its pods there are running unless the manager says why they wait (it mirrors the
	// worker's reason while one does); the Ready count, where pods report readiness.
	running := int32(0)
	switch {
	case j.Status.Ready != nil && *j.Status.Ready > 0:
		running = *j.Status.Ready
	case w.Reason == "":
		running = j.Status.Active
	}
	w.Running, w.Pending = int(running), int(max(j.Status.Active-running, 0))
	if w.Cluster == "" {
		w.Pending = int(pods)
	}
	w.GPUs, w.Requested = per*float64(running), per*float64(pods)
}
