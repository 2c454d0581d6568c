package convert

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// Node pools: which a pod tries, in which order, and which its queue allows. The
// scheduler reads it into the engine's job (NodePool, then MorePools) and the webhook
// refuses a pod whose pools its queue does not allow, both with this one reading.
//
// Who writes what: the pod's node selector and its annotation allot.dev/node-pools are
// the tenant's (a pod's author chooses among the pools the queue allows); the queue's
// nodePools and classNodePools are the admin's, and decide what is allowed.

// Pools is the order in which a pod of queue q (nil: unknown) tries the node pools, by
// their label allot.dev/node-pool ("" for the nodes without one): the pool its node
// selector pins, else its annotation's list, else its queue's list for its class, else
// the queue's nodePools, else the default pool. It fails, naming the field, where the pod
// names a pool its queue does not list or writes the list wrong.
func Pools(p *corev1.Pod, q *v1alpha1.Queue) ([]string, error) {
	sel, pinned := p.Spec.NodeSelector[v1alpha1.LabelNodePool]
	list, listed := p.Annotations[v1alpha1.AnnotationNodePools]
	field := "spec.nodeSelector[" + v1alpha1.LabelNodePool + "]"
	var named []string
	switch {
	case pinned && listed:
		return nil, fmt.Errorf("metadata.annotations[%s]: set it or %s, not both: the selector pins one pool, the list tries several in order",
			v1alpha1.AnnotationNodePools, field)
	case pinned:
		named = []string{sel}
	case listed:
		field = "metadata.annotations[" + v1alpha1.AnnotationNodePools + "]"
		var err error
		if named, err = ParsePools(list); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	if q == nil {
		return poolIDs(named), nil
	}
	if len(named) == 0 {
		if cl := p.Labels[v1alpha1.LabelClass]; len(q.Spec.ClassNodePools[cl]) > 0 {
			return poolIDs(q.Spec.ClassNodePools[cl]), nil
		}
		return poolIDs(q.Spec.NodePools), nil
	}
	if allowed := q.Spec.NodePools; len(allowed) > 0 {
		for _, n := range named {
			if !slices.Contains(allowed, n) {
				return nil, fmt.Errorf("%s: node pool %q is not one queue %s may use: its nodePools are %s",
					field, n, q.Name, strings.Join(allowed, ", "))
			}
		}
	}
	return poolIDs(named), nil
}

// ParsePools reads a comma-separated list of pools ("h100, a100"), each a label value
// or "default", none twice.
func ParsePools(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if errs := validation.IsValidLabelValue(f); f == "" || len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a node pool: pools are the values of the nodes' label %s (letters, digits, '-', '_' and '.'; %q for the nodes without one), comma-separated",
				f, v1alpha1.LabelNodePool, v1alpha1.DefaultPool)
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("node pool %q is listed twice", f)
		}
		out = append(out, f)
	}
	return out, nil
}

// poolIDs maps the pools people name to the engine's: "default" is the nodes without a
// label (""); an empty list is the default pool alone.
func poolIDs(names []string) []string {
	if len(names) == 0 {
		return []string{""}
	}
	out := make([]string, len(names))
	for i, n := range names {
		if n != v1alpha1.DefaultPool {
			out[i] = n
		}
	}
	return out
}

// DividedPools are the node pools some queue gives a quota of its own (spec.gpu.pools),
// sorted: those whose GPUs the engine divides apart (engine.Snapshot.Pools), in its order.
func DividedPools(queues []*v1alpha1.Queue) []string {
	var out []string
	for _, q := range queues {
		for p := range q.Spec.GPU.Pools {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// SetPoolQuotas writes the queue's quotas of the pools divided apart (divided, in the
// engine's order) into out; beyond, where more pools than the engine divides are named,
// it says which count for nothing.
func SetPoolQuotas(q *v1alpha1.Queue, out *engine.Queue, divided []string) (problem string) {
	var over []string
	for name, d := range q.Spec.GPU.Pools {
		k := slices.Index(divided, name)
		if k < 0 || k >= engine.MaxPools {
			over = append(over, name)
			continue
		}
		out.Resources[engine.PoolResource(k)] = devices(v1alpha1.GPUQuota{Quota: d.Quota, OverQuotaWeight: d.OverQuotaWeight, Limit: d.Limit})
	}
	if len(over) == 0 {
		return ""
	}
	slices.Sort(over)
	return fmt.Sprintf("spec.gpu.pools: %s: the queues name %d pools, and the scheduler divides at most %d apart (%s); these count as the other pools' GPUs",
		strings.Join(over, ", "), len(divided), engine.MaxPools, strings.Join(divided[:engine.MaxPools], ", "))
}

// nodePool is the node's pool as the engine names it: "" for the default pool, whether
// the node has no label or says "default".
func nodePool(n *corev1.Node) string {
	if p := n.Labels[v1alpha1.LabelNodePool]; p != v1alpha1.DefaultPool {
		return p
	}
	return ""
}
