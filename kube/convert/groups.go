package convert

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Group is what a scheduling cycle needs of a PodGroup.
type Group struct {
	// MinMember is the gang's size; 0 when the PodGroup does not say, and then every pod
	// carrying the group's label is the gang.
	MinMember int
	Created   time.Time
	// Problem names the field that could not be read, for a person; the gang then waits
	// with it as its reason instead of starting at a size nobody asked for.
	Problem string
	// Topology holds the group's topology annotations (copied from its owner), and
	// SharedLabel its spec.topology: a node label whose one value all its pods share.
	Topology    map[string]string
	SharedLabel string
	// GangGrace is its spec.staleGracePeriod; nil when unset (its queue's applies).
	GangGrace *time.Duration
}

// PodGroup reads a PodGroup: a typed one (from the clientset, its listers and informers)
// or, for the callers still on the dynamic client, an unstructured one (PodGroupUnstructured).
// The schema checks minMember ≥ 1 but not its upper end, and an old CRD may check nothing.
func PodGroup[T *v1alpha1.PodGroup | *unstructured.Unstructured](obj T) Group {
	switch o := any(obj).(type) {
	case *v1alpha1.PodGroup:
		return podGroup(o)
	case *unstructured.Unstructured:
		return PodGroupUnstructured(o)
	}
	return Group{}
}

func podGroup(pg *v1alpha1.PodGroup) Group {
	g := Group{Created: pg.CreationTimestamp.Time, Topology: topologyAnnotations(pg.Annotations), SharedLabel: pg.Spec.Topology}
	if v := pg.Spec.StaleGracePeriod; v != nil {
		if v.Duration < 0 {
			// The CRD's schema checks this; an old CRD does not. (A value that is no
			// duration at all does not decode into the typed object.)
			g.Problem = fmt.Sprintf("PodGroup %s/%s: spec.staleGracePeriod: %v is not allowed; allowed: a duration such as 30s or 5m", pg.Namespace, pg.Name, v.Duration)
			return g
		}
		d := v.Duration
		g.GangGrace = &d
	}
	// 0 is minMember unset (an old CRD does not require it): every pod carrying the
	// group's label is the gang.
	if n := pg.Spec.MinMember; n < 0 || n > v1alpha1.MaxGang {
		g.Problem = fmt.Sprintf("PodGroup %s/%s: spec.minMember: %d is not allowed; allowed: a whole number from 1 to %d", pg.Namespace, pg.Name, n, v1alpha1.MaxGang)
	} else {
		g.MinMember = int(n)
	}
	return g
}

func topologyAnnotations(ann map[string]string) map[string]string {
	var out map[string]string
	for _, k := range TopologyAnnotations {
		if v, ok := ann[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// PodGroupUnstructured reads a PodGroup as the dynamic client hands it over, field by
// field, so that a field of the wrong type (an old CRD checks nothing) is the gang's
// problem rather than the whole object's.
func PodGroupUnstructured(u *unstructured.Unstructured) Group {
	g := Group{Created: u.GetCreationTimestamp().Time, Topology: topologyAnnotations(u.GetAnnotations())}
	g.SharedLabel, _, _ = unstructured.NestedString(u.Object, "spec", "topology")
	if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "staleGracePeriod"); found && v != nil {
		str, _ := v.(string)
		d, err := time.ParseDuration(str)
		if err != nil || d < 0 {
			// The CRD's schema checks this; an old CRD does not.
			g.Problem = fmt.Sprintf("PodGroup %s/%s: spec.staleGracePeriod: %v is not allowed; allowed: a duration such as 30s or 5m", u.GetNamespace(), u.GetName(), v)
			return g
		}
		g.GangGrace = &d
	}
	where := fmt.Sprintf("PodGroup %s/%s: spec.minMember", u.GetNamespace(), u.GetName())
	v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "minMember")
	if !found || v == nil {
		return g
	}
	var n float64
	switch x := v.(type) {
	case int64:
		n = float64(x)
	case float64:
		n = x
	default:
		g.Problem = fmt.Sprintf("%s: %v is not a number; allowed: a whole number from 1 to %d", where, v, v1alpha1.MaxGang)
		return g
	}
	if n != math.Trunc(n) || n < 1 || n > v1alpha1.MaxGang {
		g.Problem = fmt.Sprintf("%s: %v is not allowed; allowed: a whole number from 1 to %d", where, v, v1alpha1.MaxGang)
		return g
	}
	g.MinMember = int(n)
	return g
}

// MinMemberAnnotation reads a pod's allot.dev/min-member (written by our webhook from its
// workload, or by hand): 0 when absent.
func MinMemberAnnotation(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.Atoi(s)
	if err != nil || m < 1 || m > v1alpha1.MaxGang {
		return 0, fmt.Errorf("annotation %s: %q is not allowed; allowed: a whole number from 1 to %d", v1alpha1.AnnotationMinMember, s, v1alpha1.MaxGang)
	}
	return m, nil
}

// QueueObject reads a Queue as the dynamic client hands it over (the typed clientset's
// Queues are read already). A Queue whose fields do not have their types (an old CRD, a
// hand-edited object) is reported by name; the pods of that queue then wait with the
// error as their reason.
func QueueObject(u *unstructured.Unstructured) (*v1alpha1.Queue, error) {
	var q v1alpha1.Queue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err != nil {
		return nil, fmt.Errorf("Queue %s: %v", u.GetName(), err)
	}
	return &q, nil
}
