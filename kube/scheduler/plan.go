package scheduler

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
)

// Snapshot is the engine's input as a cycle builds it from these objects, without the
// node filters of kube-scheduler's plugins (constrain) and without DRA claims: for a
// reader that plans over objects it gathered itself, the multi-cluster manager's union of
// its workers (kube/multicluster). Nothing is written.
func Snapshot(now time.Time, nodes []*corev1.Node, pods []*corev1.Pod, queues []*v1alpha1.Queue, groups map[string]convert.Group,
	topologies map[string]convert.Levels) *engine.Snapshot {
	snap, _ := buildSnapshot(now, nodes, pods, queues, groups, topologies, nil)
	return snap
}
