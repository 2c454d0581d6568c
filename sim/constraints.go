package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/allot-dev/allot/engine"
)

// TaintSpec is a node taint in a scenario file, as on a Kubernetes Node.
type TaintSpec struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value"`
	Effect string `yaml:"effect"`
}

// TolerationSpec is a job's toleration, as in a pod spec.
type TolerationSpec struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"`
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"`
}

var (
	taintEffects    = []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}
	tolerationOps   = []string{string(corev1.TolerationOpExists), string(corev1.TolerationOpEqual)}
	hostnameLabel   = corev1.LabelHostname
	noLogger        = klog.Background()
	comparisonTaint = false // Gt/Lt toleration operators are alpha in Kubernetes; scenarios use Exists and Equal
)

func (sc *Scenario) compileTaints(path string, ts []TaintSpec) ([]corev1.Taint, error) {
	var out []corev1.Taint
	for i, t := range ts {
		p := fmt.Sprintf("%s.taints[%d]", path, i)
		if t.Key == "" {
			return nil, sc.errorf(p+".key", "a taint needs a key")
		}
		if !slices.Contains(taintEffects, t.Effect) {
			return nil, sc.errorf(p+".effect", "%q is not allowed: effect is one of %s", t.Effect, strings.Join(taintEffects, ", "))
		}
		out = append(out, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return out, nil
}

func (sc *Scenario) compileTolerations(path string, ts []TolerationSpec) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for i, t := range ts {
		p := fmt.Sprintf("%s.tolerations[%d]", path, i)
		op := t.Operator
		if op == "" {
			op = string(corev1.TolerationOpEqual)
		}
		if !slices.Contains(tolerationOps, op) {
			return nil, sc.errorf(p+".operator", "%q is not allowed: operator is %s", t.Operator, strings.Join(tolerationOps, " or "))
		}
		if op == string(corev1.TolerationOpExists) && t.Value != "" {
			return nil, sc.errorf(p+".value", "a toleration with operator Exists takes no value")
		}
		if t.Effect != "" && !slices.Contains(taintEffects, t.Effect) {
			return nil, sc.errorf(p+".effect", "%q is not allowed: effect is empty (any) or one of %s", t.Effect, strings.Join(taintEffects, ", "))
		}
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(op), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return out, nil
}

// noSchedule selects the taints that keep pods off a node (the others only score).
func noSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// simNode is what the simulator's node rules read of a node.
type simNode struct {
	id     engine.NodeID
	labels labels.Set
	taints []corev1.Taint
}

// nodeFilter decides what a job's node selector and tolerations allow, by the rules of
// Kubernetes' own helpers, and words the rest as kube-scheduler does. Jobs with equal
// constraints share one filter (the engine indexes each filter once per cycle).
func nodeFilter(nodes []simNode, selector map[string]string, tols []corev1.Toleration, dynamic bool) *engine.NodeFilter {
	if len(selector) == 0 && len(tols) == 0 && !dynamic && !anyTaint(nodes) {
		return nil
	}
	f := &engine.NodeFilter{Dynamic: dynamic}
	why := map[string]int{}
	sel := labels.SelectorFromSet(selector)
	for _, n := range nodes {
		if !sel.Matches(n.labels) {
			why["node(s) didn't match Pod's node affinity/selector"]++
			continue
		}
		if _, bad := v1helper.FindMatchingUntoleratedTaint(noLogger, n.taints, tols, noSchedule, comparisonTaint); bad {
			// kube-scheduler's words since 1.33: it no longer names the taint.
			why["node(s) had untolerated taint(s)"]++
			continue
		}
		f.Allowed = append(f.Allowed, n.id)
		// PreferNoSchedule: the fewer such taints left untolerated, the better the node.
		var avoid int64
		for i := range n.taints {
			t := &n.taints[i]
			if t.Effect == corev1.TaintEffectPreferNoSchedule && !v1helper.TolerationsTolerateTaint(noLogger, tols, t, comparisonTaint) {
				avoid++
			}
		}
		if avoid > 0 {
			if f.Preference == nil {
				f.Preference = map[engine.NodeID]int64{}
			}
			f.Preference[n.id] = -avoid
		}
	}
	f.Excluded = engine.CountedReasons(why)
	return f
}

func anyTaint(nodes []simNode) bool {
	for _, n := range nodes {
		if len(n.taints) > 0 {
			return true
		}
	}
	return false
}

// filterKey identifies equal node constraints.
func filterKey(selector map[string]string, tols []corev1.Toleration, anti map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		fmt.Fprintf(&b, "%s=%s,", k, selector[k])
	}
	b.WriteByte('|')
	for _, t := range tols {
		fmt.Fprintf(&b, "%s/%s/%s/%s,", t.Key, t.Operator, t.Value, t.Effect)
	}
	b.WriteByte('|')
	for _, k := range slices.Sorted(maps.Keys(anti)) {
		fmt.Fprintf(&b, "%s=%s,", k, anti[k])
	}
	return b.String()
}

// antiRules is the simulator's engine.PlacementRules: required pod anti-affinity with
// the node as topology (kubernetes.io/hostname), the form scenario files express. A pod
// is refused a node that runs a pod its terms select, or a pod whose terms select it.
type antiRules struct {
	pods   map[engine.PodID]*ruledPod
	onNode map[engine.NodeID]map[engine.PodID]bool
}

type ruledPod struct {
	labels labels.Set
	anti   labels.Selector // nil without anti-affinity
}

func newAntiRules() *antiRules {
	return &antiRules{pods: map[engine.PodID]*ruledPod{}, onNode: map[engine.NodeID]map[engine.PodID]bool{}}
}

func (r *antiRules) add(id engine.PodID, lbls map[string]string, anti map[string]string) {
	rp := &ruledPod{labels: labels.Set(lbls)}
	if len(anti) > 0 {
		rp.anti = labels.SelectorFromSet(anti)
	}
	r.pods[id] = rp
}

func (r *antiRules) conflicts(a, b *ruledPod) bool {
	return (a.anti != nil && a.anti.Matches(b.labels)) || (b.anti != nil && b.anti.Matches(a.labels))
}

func (r *antiRules) Fits(pod engine.PodID, node engine.NodeID) bool {
	me := r.pods[pod]
	if me == nil {
		return true
	}
	for other := range r.onNode[node] {
		if other != pod && r.conflicts(me, r.pods[other]) {
			return false
		}
	}
	return true
}

func (r *antiRules) Placed(pod engine.PodID, node engine.NodeID) {
	if r.onNode[node] == nil {
		r.onNode[node] = map[engine.PodID]bool{}
	}
	r.onNode[node][pod] = true
}

func (r *antiRules) Removed(pod engine.PodID, node engine.NodeID) { delete(r.onNode[node], pod) }

func (r *antiRules) Why(pod engine.PodID, nodes []engine.NodeID) string {
	n := 0
	for _, id := range nodes {
		if !r.Fits(pod, id) {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d node(s) didn't match pod anti-affinity rules", n)
}

// rulesFor builds the rules of one snapshot: every pod of the snapshot is known, the
// bound ones on their nodes. Nil when no job has anti-affinity.
func rulesFor(jobs []engine.Job, meta map[engine.JobID]jobMeta) engine.PlacementRules {
	any := false
	for _, m := range meta {
		if len(m.anti) > 0 {
			any = true
			break
		}
	}
	if !any {
		return nil
	}
	r := newAntiRules()
	for i := range jobs {
		j := &jobs[i]
		m := meta[j.ID]
		for _, p := range j.Pods {
			r.add(p.ID, m.labels, m.anti)
			if p.Binding != nil {
				r.Placed(p.ID, p.Binding.Node)
			}
		}
	}
	return r
}

// jobMeta is what the rules need of a job beyond the engine's view.
type jobMeta struct {
	labels map[string]string
	anti   map[string]string
}
