package convert

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	// Interruptions is how often spot capacity was taken from under it (its status,
	// which the scheduler counts).
	Interruptions int
	// Elastic is set for a workload that grows and shrinks through its own replica count
	// (the PodGroup's spec.elastic, and its owner, whose count is changed).
	Elastic *Elastic
}

// Elastic is how far a workload may be grown, and which object holds its count.
type Elastic struct {
	// Members is how many pods the workload asks now; MaxMembers how many it may grow to.
	Members, MaxMembers int
	// Owner is the PodGroup's controller: the workload whose count is changed.
	Owner metav1.OwnerReference
}

// PodGroup reads a PodGroup as the typed clientset, its listers and informers hand it
// over. The API server has checked each field's type, and minMember ≥ 1, but not its upper
// end; an old CRD may check less: a minMember of 0 is taken as unset (every pod carrying the
// group's label is the gang), a negative staleGracePeriod is a problem.
func PodGroup(pg *v1alpha1.PodGroup) Group {
	g := Group{Created: pg.CreationTimestamp.Time, Topology: topologyAnnotations(pg.Annotations), SharedLabel: pg.Spec.Topology,
		Interruptions: int(max(pg.Status.Interruptions, 0))}
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
	g.Elastic = elastic(pg)
	// 0 is minMember unset (an old CRD does not require it).
	if n := pg.Spec.MinMember; n < 0 || n > v1alpha1.MaxGang {
		g.Problem = fmt.Sprintf("PodGroup %s/%s: spec.minMember: %d is not allowed; allowed: a whole number from 1 to %d", pg.Namespace, pg.Name, n, v1alpha1.MaxGang)
	} else {
		g.MinMember = int(n)
	}
	return g
}

// elastic reads spec.elastic where its owner is a workload whose count Allot can change; a
// spec the CRD would refuse (an old CRD checks less) is no elasticity, not a problem that
// stops the gang: its pods run at the count the workload asks.
func elastic(pg *v1alpha1.PodGroup) *Elastic {
	e := pg.Spec.Elastic
	owner := metav1.GetControllerOfNoCopy(pg)
	if e == nil || owner == nil || e.Members < 1 || e.MaxMembers < e.Members || e.MaxMembers > v1alpha1.MaxGang {
		return nil
	}
	return &Elastic{Members: int(e.Members), MaxMembers: int(e.MaxMembers), Owner: *owner}
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
