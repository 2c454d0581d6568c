// Package inspect reads what the CLI shows from a cluster running Allot: workloads with
// their pods, GPUs and state, queues, and who holds each GPU of each node. The reading is
// separate from the printing so that tables, JSON and YAML show the same thing.
package inspect

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/submit"
)

// Workload is one row of allot list.
type Workload struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	Queue     string    `json:"queue"`
	Type      string    `json:"type"`
	Status    string    `json:"status"`
	GPUs      float64   `json:"gpusAllocated"`
	Requested float64   `json:"gpusRequested"`
	Running   int       `json:"running"`
	Pending   int       `json:"pending"`
	Nodes     []string  `json:"nodes"`
	Created   time.Time `json:"created"`
	Reason    string    `json:"reason,omitempty"` // why it waits, from the scheduler
	Pods      []Pod     `json:"pods,omitempty"`
}

// Pod is one pod of a workload.
type Pod struct {
	Name   string  `json:"name"`
	Node   string  `json:"node,omitempty"`
	GPUs   string  `json:"gpus,omitempty"` // device indices, with the share of a shared one
	Asks   float64 `json:"gpusRequested"`
	Phase  string  `json:"phase"`
	Reason string  `json:"reason,omitempty"`
}

// PodGPUs is what a pod asks: whole GPUs, or its fraction of one (a memory request counts
// as its placed share once bound, else 0).
func PodGPUs(p *corev1.Pod) float64 {
	if n := v1alpha1.WholeGPUs(p); n > 0 {
		return float64(n)
	}
	if share, err := strconv.Atoi(p.Annotations[v1alpha1.AnnotationGPUShare]); err == nil && share > 0 {
		return float64(share) / 1000
	}
	if s, err := v1alpha1.ParseGPUShare(p.Annotations); err == nil {
		return s.Fraction
	}
	return 0
}

func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// waitingReason is the scheduler's reason on a pending pod.
func waitingReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// Workloads lists the workloads submit made in a namespace ("" for all), optionally of one
// queue, with their pods.
func Workloads(ctx context.Context, client kubernetes.Interface, namespace, queue string) ([]Workload, error) {
	sel := labels.Set{}
	if queue != "" {
		sel[v1alpha1.LabelQueue] = queue
	}
	opts := metav1.ListOptions{LabelSelector: submit.LabelWorkload}
	if queue != "" {
		opts.LabelSelector += "," + sel.String()
	}
	// Every pod Allot schedules carries its queue (the webhook sees to it): pods not made
	// by allot submit are listed too, by their gang or owner, else alone.
	podOpts := metav1.ListOptions{LabelSelector: v1alpha1.LabelQueue}
	if queue != "" {
		podOpts.LabelSelector = sel.String()
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, podOpts)
	if err != nil {
		return nil, err
	}
	jobs, err := client.BatchV1().Jobs(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	deps, err := client.AppsV1().Deployments(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return BuildWorkloads(ptrs(pods.Items), ptrs(jobs.Items), ptrs(deps.Items)), nil
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// BuildWorkloads groups pods, Jobs and Deployments into workloads. It reads only what it
// is given, so the CLI feeds it from lists and the dashboard from its informers' caches;
// objects that are not Allot's (no workload label, pods without a queue) are left out.
func BuildWorkloads(pods []*corev1.Pod, jobs []*batchv1.Job, deps []*appsv1.Deployment) []Workload {
	byKey := map[string]*Workload{}
	get := func(m metav1.ObjectMeta) *Workload {
		key := m.Namespace + "/" + m.Labels[submit.LabelWorkload]
		w := byKey[key]
		if w == nil {
			w = &Workload{Name: m.Labels[submit.LabelWorkload], Namespace: m.Namespace, Queue: m.Labels[v1alpha1.LabelQueue],
				Type: m.Labels[submit.LabelType], Created: m.CreationTimestamp.Time, Nodes: []string{}}
			byKey[key] = w
		}
		if m.CreationTimestamp.Time.Before(w.Created) {
			w.Created = m.CreationTimestamp.Time
		}
		return w
	}
	jobStatus := map[string]string{}
	for _, j := range jobs {
		if j.Labels[submit.LabelWorkload] == "" {
			continue
		}
		get(j.ObjectMeta)
		jobStatus[j.Namespace+"/"+j.Labels[submit.LabelWorkload]] = jobState(j)
	}
	for _, d := range deps {
		if d.Labels[submit.LabelWorkload] != "" {
			get(d.ObjectMeta)
		}
	}
	for _, p := range pods {
		if p.Labels[v1alpha1.LabelQueue] == "" {
			continue
		}
		if p.Labels[submit.LabelWorkload] == "" {
			m := p.ObjectMeta.DeepCopy()
			m.Labels[submit.LabelWorkload] = workloadName(p)
			if m.Labels[submit.LabelType] == "" {
				m.Labels[submit.LabelType] = p.Labels[v1alpha1.LabelClass]
				if m.Labels[submit.LabelType] == "" {
					m.Labels[submit.LabelType] = submit.TypeTrain
				}
			}
			p = &corev1.Pod{ObjectMeta: *m, Spec: p.Spec, Status: p.Status}
		}
		w := get(p.ObjectMeta)
		pod := Pod{Name: p.Name, Node: p.Spec.NodeName, Asks: PodGPUs(p), Phase: string(p.Status.Phase)}
		if p.DeletionTimestamp != nil {
			pod.Phase = "Terminating"
		}
		if idx := p.Annotations[v1alpha1.AnnotationGPUs]; idx != "" {
			pod.GPUs = idx
			if share := p.Annotations[v1alpha1.AnnotationGPUShare]; share != "" {
				pod.GPUs += fmt.Sprintf(" (%s)", strconv.FormatFloat(PodGPUs(p), 'f', -1, 64))
			}
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
	out := make([]Workload, 0, len(byKey))
	for key, w := range byKey {
		sort.Strings(w.Nodes)
		sort.Slice(w.Pods, func(a, b int) bool { return w.Pods[a].Name < w.Pods[b].Name })
		switch st := jobStatus[key]; {
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
		out = append(out, *w)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Namespace != out[b].Namespace {
			return out[a].Namespace < out[b].Namespace
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// workloadName names a pod's workload when allot submit did not: its gang, else its
// controlling owner, else the pod itself.
func workloadName(p *corev1.Pod) string {
	if g := p.Labels[v1alpha1.LabelPodGroup]; g != "" {
		return g
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.Name
	}
	return p.Name
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
	return "Running"
}

// Find returns one workload by name.
func Find(ctx context.Context, client kubernetes.Interface, namespace, name string) (*Workload, error) {
	all, err := Workloads(ctx, client, namespace, "")
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range all {
		if all[i].Name == name {
			return &all[i], nil
		}
		names = append(names, all[i].Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no workload %q in namespace %s (none there; allot list -A shows every namespace)", name, namespace)
	}
	return nil, fmt.Errorf("no workload %q in namespace %s; there are: %s", name, namespace, strings.Join(names, ", "))
}

// Events returns the events about a workload's objects and pods, oldest first.
func Events(ctx context.Context, client kubernetes.Interface, w *Workload) ([]corev1.Event, error) {
	l, err := client.CoreV1().Events(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return WorkloadEvents(ptrs(l.Items), w), nil
}

// WorkloadEvents picks a workload's events, oldest first: those of its objects and pods,
// and of pods that are gone but were its own (a Job's pod evicted by a reclaim is deleted
// and replaced; its events stay, and the story of the workload needs them). Pods of Jobs
// and Deployments are named after their workload, which is how the gone ones are known.
func WorkloadEvents(events []*corev1.Event, w *Workload) []corev1.Event {
	names := map[string]bool{w.Name: true}
	for _, p := range w.Pods {
		names[p.Name] = true
	}
	var out []corev1.Event
	for _, e := range events {
		o := e.InvolvedObject
		if e.Namespace != w.Namespace {
			continue
		}
		if names[o.Name] || (o.Kind == "Pod" && strings.HasPrefix(o.Name, w.Name+"-")) {
			out = append(out, *e)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return EventTime(out[a]).Before(EventTime(out[b])) })
	return out
}

// EventTime is when an event last happened.
func EventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
