package convert

import (
	"strings"
	"testing"

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
