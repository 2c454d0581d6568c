package convert

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestJobTopologyBeforeTheTopologiesAreRead: the scheduler starts before its Topology
// informer has listed (or where the CRD is not installed) and passes no topologies; a job
// that names a level then waits with that said, rather than being placed without its level
// or told that the cluster has no Topology. A job without the annotations is unaffected.
func TestJobTopologyBeforeTheTopologiesAreRead(t *testing.T) {
	rack := map[string]string{v1alpha1.AnnotationTopologyRequired: "rack"}
	if _, err := JobTopology(rack, nil); err == nil || !strings.Contains(err.Error(), "not read") ||
		!strings.HasPrefix(err.Error(), v1alpha1.AnnotationTopologyRequired) {
		t.Errorf("unknown topologies: %v", err)
	}
	if topo, err := JobTopology(map[string]string{}, nil); topo != nil || err != nil {
		t.Errorf("no annotations: %v, %v", topo, err)
	}
	read := map[string]Levels{"default": {Labels: []string{"example.com/rack"}, Names: []string{"rack"}}}
	if topo, err := JobTopology(rack, read); err != nil || topo.Required != 0 {
		t.Errorf("once read: %+v, %v", topo, err)
	}
	if _, err := JobTopology(rack, map[string]Levels{}); err == nil || !strings.Contains(err.Error(), "no Topology object") {
		t.Errorf("read, none: %v", err)
	}
}

// TestTopologies: an informer's store of Topologies read by name, a bad one left out with
// its name in the error, and what is not a Topology skipped.
func TestTopologies(t *testing.T) {
	topo := func(name string, levels ...v1alpha1.TopologyLevel) *v1alpha1.Topology {
		return &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.TopologySpec{Levels: levels}}
	}
	objs := []any{
		topo("default", v1alpha1.TopologyLevel{NodeLabel: "topology.kubernetes.io/zone"}, v1alpha1.TopologyLevel{Name: "rack", NodeLabel: "example.com/rack"}),
		topo("empty"),
		topo("unlabelled", v1alpha1.TopologyLevel{Name: "rack"}),
	}
	want := Levels{Labels: []string{"topology.kubernetes.io/zone", "example.com/rack"}, Names: []string{"topology.kubernetes.io/zone", "rack"}}
	got, errs := Topologies(append(objs, "not a topology"))
	if len(got) != 1 || !reflect.DeepEqual(got["default"], want) {
		t.Errorf("%+v", got)
	}
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), "Topology empty:") || !strings.HasPrefix(errs[1].Error(), "Topology unlabelled:") {
		t.Fatalf("errors %v", errs)
	}
	if lv, ok := ViewTopology(objs); !ok || !reflect.DeepEqual(lv, want) {
		t.Errorf("view %+v %v", lv, ok)
	}
}

// TestPodGroup: a PodGroup's size, grace, shared label and topology annotations; a size
// or a grace the schema of an old CRD let through is the gang's problem, naming the field.
func TestPodGroup(t *testing.T) {
	created := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	grace := 30 * time.Second
	for _, c := range []struct {
		pg      *v1alpha1.PodGroup
		want    Group
		problem string
	}{
		{pg: &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: "ml", CreationTimestamp: created},
			Spec: v1alpha1.PodGroupSpec{MinMember: 4, Queue: "team-a"}},
			want: Group{MinMember: 4, Created: created.Time}},
		{pg: &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "racked", Namespace: "ml", CreationTimestamp: created,
			Annotations: map[string]string{v1alpha1.AnnotationTopologyRequired: "rack", "other": "x"}},
			Spec: v1alpha1.PodGroupSpec{MinMember: 2, Queue: "q", Topology: "example.com/rack", StaleGracePeriod: &metav1.Duration{Duration: grace}}},
			want: Group{MinMember: 2, Created: created.Time, Topology: map[string]string{v1alpha1.AnnotationTopologyRequired: "rack"},
				SharedLabel: "example.com/rack", GangGrace: &grace}},
		{pg: &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "unset", Namespace: "ml"}, Spec: v1alpha1.PodGroupSpec{Queue: "q"}},
			want: Group{}},
		{pg: &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "ml"}, Spec: v1alpha1.PodGroupSpec{MinMember: v1alpha1.MaxGang + 1, Queue: "q"}},
			problem: "PodGroup ml/huge: spec.minMember: 100001 is not allowed; allowed: a whole number from 1 to 100000"},
		{pg: &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "back", Namespace: "ml"},
			Spec: v1alpha1.PodGroupSpec{MinMember: 1, Queue: "q", StaleGracePeriod: &metav1.Duration{Duration: -time.Second}}},
			problem: "PodGroup ml/back: spec.staleGracePeriod: -1s is not allowed; allowed: a duration such as 30s or 5m"},
	} {
		c.want.Problem = c.problem
		if got := PodGroup(c.pg); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.pg.Name, got, c.want)
		}
	}
}
