package convert

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Levels are one Topology object's levels, widest first: node label keys and the names
// workloads use for them.
type Levels struct {
	Labels, Names []string
}

// TopologyLevels reads a Topology's levels. The CRD's schema checks them; one that does
// not read (an old CRD) gives an error naming the object.
func TopologyLevels(t *v1alpha1.Topology) (Levels, error) {
	var l Levels
	for i, lv := range t.Spec.Levels {
		if lv.NodeLabel == "" {
			return Levels{}, fmt.Errorf("Topology %s: spec.levels[%d].nodeLabel is empty", t.Name, i)
		}
		name := lv.Name
		if name == "" {
			name = lv.NodeLabel
		}
		l.Labels, l.Names = append(l.Labels, lv.NodeLabel), append(l.Names, name)
	}
	if len(l.Labels) == 0 {
		return Levels{}, fmt.Errorf("Topology %s: spec.levels is empty", t.Name)
	}
	return l, nil
}

// Topologies reads Topology objects as a typed informer's store holds them, by name. One
// that does not read is left out and its error returned.
func Topologies(objs []any) (map[string]Levels, []error) {
	out := make(map[string]Levels, len(objs))
	var errs []error
	for _, o := range objs {
		var l Levels
		var name string
		var err error
		t, ok := o.(*v1alpha1.Topology)
		if !ok {
			continue
		}
		name = t.Name
		l, err = TopologyLevels(t)
		if err == nil {
			out[name] = l
		} else {
			errs = append(errs, err)
		}
	}
	return out, errs
}

// ViewTopology is the Topology views group nodes by: the only one, or the one named
// default; ok is false when there is none to pick.
func ViewTopology(objs []any) (Levels, bool) {
	all, _ := Topologies(objs)
	name, err := PickTopology("", all)
	if err != nil {
		return Levels{}, false
	}
	return all[name], true
}

// TopologyAnnotations are the annotations that place a workload in a topology; the workload
// controller copies them from an owner (a Job, a JobSet) to its PodGroup.
var TopologyAnnotations = []string{v1alpha1.AnnotationTopologyRequired, v1alpha1.AnnotationTopologyPreferred, v1alpha1.AnnotationTopology}

// JobTopology resolves a workload's topology annotations against the cluster's Topology
// objects (by name). No annotation gives nil. An annotation that names no level, or a
// topology that does not exist or cannot be told apart from others, is an error that names
// the annotation and what is allowed, for the waiting job's reason. A nil map means the
// Topology objects are not known (the CRD is not served, or its informer has not listed
// them yet): a job with annotations then waits, as it would for a missing level.
func JobTopology(ann map[string]string, topologies map[string]Levels) (*engine.Topology, error) {
	req, pref := ann[v1alpha1.AnnotationTopologyRequired], ann[v1alpha1.AnnotationTopologyPreferred]
	if req == "" && pref == "" {
		return nil, nil
	}
	field := v1alpha1.AnnotationTopologyRequired
	if req == "" {
		field = v1alpha1.AnnotationTopologyPreferred
	}
	if topologies == nil {
		return nil, fmt.Errorf("%s: the cluster's Topology objects are not read: the Topology CRD is not installed (kubectl apply -f deploy/crds) or they are still being listed", field)
	}
	name, err := PickTopology(ann[v1alpha1.AnnotationTopology], topologies)
	if err != nil {
		if ann[v1alpha1.AnnotationTopology] != "" {
			field = v1alpha1.AnnotationTopology
		}
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	lv := topologies[name]
	t := &engine.Topology{Levels: lv.Labels, Names: lv.Names, Required: -1, Preferred: -1}
	for _, a := range [][2]string{{v1alpha1.AnnotationTopologyRequired, req}, {v1alpha1.AnnotationTopologyPreferred, pref}} {
		if a[1] == "" {
			continue
		}
		i := slices.Index(lv.Names, a[1])
		if i < 0 {
			i = slices.Index(lv.Labels, a[1])
		}
		if i < 0 {
			return nil, fmt.Errorf("%s: %q is not a level of Topology %s; levels: %s", a[0], a[1], name, strings.Join(lv.Names, ", "))
		}
		if a[0] == v1alpha1.AnnotationTopologyRequired {
			t.Required = i
		} else {
			t.Preferred = i
		}
	}
	return t, nil
}

// PickTopology is the Topology a workload (or a view of the nodes) uses: the one named,
// else the only one, else the one named default.
func PickTopology(name string, topologies map[string]Levels) (string, error) {
	names := slices.Sorted(maps.Keys(topologies))
	switch {
	case name != "":
		if _, ok := topologies[name]; !ok {
			return "", fmt.Errorf("no Topology %q; topologies: %s", name, orNone(names))
		}
		return name, nil
	case len(topologies) == 1:
		return names[0], nil
	case topologies["default"].Labels != nil:
		return "default", nil
	case len(topologies) == 0:
		return "", fmt.Errorf("the cluster has no Topology object: an admin creates one listing the levels of node labels, widest first")
	}
	return "", fmt.Errorf("the cluster has several Topologies (%s) and none is named default: name one with %s", strings.Join(names, ", "), v1alpha1.AnnotationTopology)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
