// Package control deletes, suspends and resumes workloads, whoever made them: allot
// submit, kubectl or an operator. It acts on the workload's top object (a Job, JobSet,
// Deployment, PyTorchJob, …, a PodGroup's pods, a bare pod) as inspect found it, by UID, so
// that an object made again under the same name in the meantime is never touched.
package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submit"
)

// Clients are what control acts through.
type Clients struct {
	Client kubernetes.Interface
	// Allot is the client of Allot's own resources (a workload's PodGroup).
	Allot versioned.Interface
	// Dyn reaches the workloads' kinds, which other projects define (Jobs, JobSets,
	// PyTorchJobs, …): whatever the API server serves.
	Dyn dynamic.Interface
	// Mapper turns a workload's kind into its resource (any kind an operator defines).
	Mapper meta.RESTMapper
}

// resource is where a workload's object lives.
func (c Clients) resource(w *inspect.Workload) (dynamic.ResourceInterface, error) {
	gv, err := schema.ParseGroupVersion(w.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("%s %s: apiVersion %q: %w", w.Kind, w.Name, w.APIVersion, err)
	}
	m, err := c.Mapper.RESTMapping(gv.WithKind(w.Kind).GroupKind(), gv.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: the API server does not serve kind %s (%s): %w", w.Kind, w.Name, w.Kind, w.APIVersion, err)
	}
	return c.Dyn.Resource(m.Resource).Namespace(w.Namespace), nil
}

// Delete deletes a workload with its pods and says what went.
func (c Clients) Delete(ctx context.Context, w *inspect.Workload) (string, error) {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	if w.UID != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &w.UID}
	}
	// The pods that go with it: those not already on their way out.
	going := 0
	for _, p := range w.Pods {
		if p.Phase != "Terminating" {
			going++
		}
	}
	pods := plural(going, "pod")
	var err error
	switch w.Kind {
	case "Pod":
		err = c.Client.CoreV1().Pods(w.Namespace).Delete(ctx, w.Name, opts)
		pods = ""
	case "PodGroup":
		// Bare pods grouped by a label: the pods are the workload; the PodGroup goes too.
		for _, p := range w.Pods {
			o := opts
			o.Preconditions = &metav1.Preconditions{UID: &p.UID}
			if e := c.Client.CoreV1().Pods(w.Namespace).Delete(ctx, p.Name, o); e != nil && !apierrors.IsNotFound(e) {
				return "", fmt.Errorf("deleting pod %s of %s: %w", p.Name, w.Ref(), e)
			}
		}
		err = c.Allot.AllotV1alpha1().PodGroups(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) && len(w.Pods) > 0 {
			err = nil
		}
	default:
		var r dynamic.ResourceInterface
		if r, err = c.resource(w); err != nil {
			return "", err
		}
		err = r.Delete(ctx, w.Name, opts)
	}
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%s %s/%s is already gone", w.Kind, w.Namespace, w.Name)
	}
	if err != nil {
		return "", fmt.Errorf("deleting %s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
	}
	what := []string{fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name)}
	if pods != "" {
		what = append(what, pods)
	}
	if w.Submitted {
		// allot submit's Services carry the workload's label and no owner.
		sel := metav1.ListOptions{LabelSelector: submit.LabelWorkload + "=" + w.Name}
		l, err := c.Client.CoreV1().Services(w.Namespace).List(ctx, sel)
		if err != nil {
			return "", err
		}
		for _, s := range l.Items {
			if err := c.Client.CoreV1().Services(w.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return "", err
			}
			what = append(what, "Service "+s.Name)
		}
		// And its ResourceClaimTemplate, where it claimed its GPUs through DRA; where the API
		// server serves no DRA, there is none.
		if tl, err := c.Client.ResourceV1().ResourceClaimTemplates(w.Namespace).List(ctx, sel); err == nil {
			for _, t := range tl.Items {
				if err := c.Client.ResourceV1().ResourceClaimTemplates(w.Namespace).Delete(ctx, t.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return "", err
				}
				what = append(what, "ResourceClaimTemplate "+t.Name)
			}
		}
	}
	return "deleted " + strings.Join(what, ", "), nil
}

func plural(n int, what string) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// suspendField is where each kind that can be suspended keeps the switch. KubeRay deletes
// a suspended RayCluster's pods (and a suspended RayJob's cluster) and makes them again on
// resume; Trainer suspends a TrainJob's JobSet.
var suspendField = map[string][]string{
	"Job":        {"spec", "suspend"},
	"JobSet":     {"spec", "suspend"},
	"PyTorchJob": {"spec", "runPolicy", "suspend"},
	"MPIJob":     {"spec", "runPolicy", "suspend"},
	"RayCluster": {"spec", "suspend"},
	"RayJob":     {"spec", "suspend"},
	"TrainJob":   {"spec", "suspend"},
}

// scaledKinds are suspended by scaling them to zero and back: a LeaderWorkerSet's replicas
// are its groups.
var scaledKinds = map[string]bool{"Deployment": true, "StatefulSet": true, "LeaderWorkerSet": true}

// unsuspendable says why a kind that has no switch and must not be scaled cannot be
// suspended.
var unsuspendable = map[string]string{
	"RayService": "KubeRay has no suspend for a RayService: it keeps a RayCluster serving at all times (an upgrade makes the new one before the old goes); " +
		"scale its worker groups down in spec.rayClusterConfig, or delete it",
	"Service": "Knative scales a Service by its traffic, to zero when idle (autoscaling.knative.dev/min-scale, max-scale); " +
		"stop its traffic or set max-scale, or delete it",
	"InferenceService": "KServe scales an InferenceService by its traffic or spec.predictor.minReplicas and maxReplicas; " +
		"set them, stop its traffic, or delete it",
}

// Suspend stops a workload's pods and keeps the workload (resume false), or starts it again
// (resume true). Jobs and the kinds built on them (JobSets, Kubeflow jobs, TrainJobs,
// RayClusters, RayJobs) are suspended by their own switch; a Deployment, StatefulSet or
// LeaderWorkerSet is scaled to zero and back to what it had. A bare pod or a
// PodGroup of bare pods cannot be suspended: nothing would make their pods again.
func (c Clients) Suspend(ctx context.Context, w *inspect.Workload, resume bool) (string, error) {
	verb, done := "suspend", "suspended"
	if resume {
		verb, done = "resume", "resumed"
	}
	if !resume && (w.Status == "Succeeded" || w.Status == "Failed") {
		return "", fmt.Errorf("%s has finished (%s): there is nothing to suspend", w.Name, strings.ToLower(w.Status))
	}
	field, switched := suspendField[w.Kind]
	scaled := scaledKinds[w.Kind]
	if why, ok := unsuspendable[w.Kind]; ok && !switched && !scaled {
		return "", fmt.Errorf("%s is a %s: it cannot be %s: %s", w.Name, w.Kind, done, why)
	}
	if !switched && !scaled {
		return "", fmt.Errorf("%s is a %s: it cannot be %s, as nothing would make its pods again; delete it and submit again instead", w.Name, w.Kind, done)
	}
	r, err := c.resource(w)
	if err != nil {
		return "", err
	}
	u, err := r.Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", verb, w.Ref(), err)
	}
	if w.UID != "" && u.GetUID() != w.UID {
		return "", fmt.Errorf("%s %s was deleted and made again meanwhile: look again (allot list)", w.Kind, w.Name)
	}
	var patch map[string]any
	if switched {
		now, _, _ := unstructured.NestedBool(u.Object, field...)
		if now != resume {
			return "", fmt.Errorf("%s is not %s: it is %s", w.Name, map[bool]string{false: "running", true: "suspended"}[resume], strings.ToLower(w.Status))
		}
		patch = nest(field, !resume)
	} else {
		replicas, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		kept, held := u.GetAnnotations()[inspect.AnnotationSuspendedReplicas]
		switch {
		case !resume && held:
			return "", fmt.Errorf("%s is already suspended", w.Name)
		case resume && !held && replicas == 0 && c.AtRest(ctx, w.Namespace, w.Kind, w.Name):
			// At rest at zero (an inference service's autoscaler with minReplicas 0 put it
			// there, and cannot bring it back by itself): resuming wakes it to one. One its
			// owner scaled to zero is the owner's to scale again.
			patch = map[string]any{"spec": map[string]any{"replicas": 1}}
		case resume && !held:
			return "", fmt.Errorf("%s is not suspended: it runs %d replicas", w.Name, replicas)
		case !resume:
			patch = map[string]any{"metadata": map[string]any{"annotations": map[string]any{inspect.AnnotationSuspendedReplicas: strconv.FormatInt(replicas, 10)}},
				"spec": map[string]any{"replicas": 0}}
		default:
			n, err := strconv.ParseInt(kept, 10, 32)
			if err != nil || n < 1 {
				n = 1
			}
			// Resumed, it is no longer stopped for being idle (kube/idle's mark goes too).
			patch = map[string]any{"metadata": map[string]any{"annotations": map[string]any{inspect.AnnotationSuspendedReplicas: nil, inspect.AnnotationIdleSuspended: nil}},
				"spec": map[string]any{"replicas": n}}
		}
	}
	b, _ := json.Marshal(patch)
	if _, err := r.Patch(ctx, w.Name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("%s %s: %w", verb, w.Ref(), err)
	}
	return fmt.Sprintf("%s %s/%s %s", w.Kind, w.Namespace, w.Name, done), nil
}

// nest makes {a: {b: {c: v}}} of a path.
func nest(path []string, v any) map[string]any {
	m := map[string]any{path[len(path)-1]: v}
	for i := len(path) - 2; i >= 0; i-- {
		m = map[string]any{path[i]: m}
	}
	return m
}

// AtRest tells whether a HorizontalPodAutoscaler with a minimum of 0 replicas scales the
// workload: then zero replicas is its rest, which only a request (allot open) or allot
// resume ends; without one, zero is what its owner chose.
func (c Clients) AtRest(ctx context.Context, namespace, kind, name string) bool {
	hpas, err := c.Client.AutoscalingV2().HorizontalPodAutoscalers(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, h := range hpas.Items {
		if h.Spec.ScaleTargetRef.Kind == kind && h.Spec.ScaleTargetRef.Name == name && h.Spec.MinReplicas != nil && *h.Spec.MinReplicas == 0 {
			return true
		}
	}
	return false
}
