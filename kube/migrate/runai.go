package migrate

import (
	"errors"
	"fmt"
	"math"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// Run:ai keeps its projects and departments in its control plane, not in the cluster: a
// quota per node pool is an entry of the org unit's resources list, as its REST API
// returns it (GET /api/v1/org-unit/projects, /departments). allot import reads such a
// response saved to a file; each department becomes a queue, each project a queue
// under its department.
const (
	runaiProject    = "Project"
	runaiDepartment = "Department"
	// runaiDefaultPool is the node pool Run:ai puts every node in until an admin makes
	// others: Allot's nodes without a pool label.
	runaiDefaultPool = "default"
)

// runaiStatus are the fields Run:ai's API writes of an org unit's state, not its
// configuration: read past, together in one note.
var runaiStatus = []string{"status", "totalResources", "effective", "createdAt", "updatedAt", "createdBy", "updatedBy", "children", "overtimeData"}

// runaiDocument turns a saved API response ({"projects": [...]}, {"departments": [...]})
// into the objects ReadFile passes on, each tagged with RunAI's kind. ok is false for any
// other document (one with an apiVersion is Kubernetes'); what else such a response holds
// (its page token) is not read.
func runaiDocument(o map[string]any) (objs []*unstructured.Unstructured, ok bool, err error) {
	if _, has := o["apiVersion"]; has {
		return nil, false, nil
	}
	var errs []error
	for _, k := range []struct{ field, kind string }{{"departments", runaiDepartment}, {"projects", runaiProject}} {
		v, has := o[k.field]
		if !has {
			continue
		}
		ok = true
		items, isList := v.([]any)
		if !isList {
			errs = append(errs, fmt.Errorf("%s: %s is not allowed: a list of Run:ai's %s as its API returns them", k.field, show(v), k.field))
			continue
		}
		for i, it := range items {
			m, isObj := it.(map[string]any)
			name, _ := m["name"].(string)
			if !isObj || name == "" {
				errs = append(errs, fmt.Errorf("%s[%d]: not a Run:ai %s with a name", k.field, i, strings.ToLower(k.kind)))
				continue
			}
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": RunAI.Resource.GroupVersion().String(), "kind": k.kind,
				"metadata": map[string]any{"name": name}, "spec": m}})
		}
	}
	return objs, ok, errors.Join(errs...)
}

// runaiDepartments names the departments read by their ids, for the projects' parentId.
func runaiDepartments(objs []*unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for _, u := range objs {
		if !RunAI.holds(u) || u.GetKind() != runaiDepartment {
			continue
		}
		m, _ := u.Object["spec"].(map[string]any)
		if id, ok := idOf(m["id"]); ok {
			out[id] = u.GetName()
		}
	}
	return out
}

// idOf reads an id that Run:ai writes as a string, or in older versions as a number.
func idOf(v any) (string, bool) {
	if s, ok := v.(string); ok && s != "" {
		return s, true
	}
	if n, ok := toFloat(v); ok && n == math.Trunc(n) {
		return num(n), true
	}
	return "", false
}

// convertRunAI reads one of Run:ai's projects or departments.
func convertRunAI(c *converter, u *unstructured.Unstructured) *Imported {
	m, _ := u.Object["spec"].(map[string]any)
	f := &fields{c: c, queue: "runai/" + u.GetName(), spec: m, top: true}
	f.take("name")
	q := &v1alpha1.Queue{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Queue"},
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	im := &Imported{Queue: q, From: RunAI, Owns: []string{"parent", "gpu"}}
	kind := strings.ToLower(u.GetKind())

	if v, ok := f.take("id"); ok {
		f.note("id", show(v), "", "Run:ai's id of the "+kind+": Allot names queues; a project's parentId is read by it")
	}
	if v, ok := f.take("parentId"); ok {
		id, _ := idOf(v)
		switch dept, known := c.departments[id]; {
		case known:
			q.Spec.Parent = dept
			f.note("parentId", show(v), "spec.parent: "+dept, "department "+dept)
		case u.GetKind() == runaiProject:
			f.errorf("parentId", "%s is not the id of a department read: save GET /api/v1/org-unit/departments in the same file, beside the projects", show(v))
		default:
			f.note("parentId", show(v), "", "the department hangs from the Run:ai cluster itself: a top-level Allot queue")
		}
	}
	var status []string
	for _, k := range runaiStatus {
		if _, ok := f.take(k); ok {
			status = append(status, k)
		}
	}
	if len(status) > 0 {
		f.note(strings.Join(status, ", "), "…", "", "Run:ai's account of the "+kind+"'s state, not its configuration: not read")
	}
	for _, k := range []struct{ field, why string }{
		{"description", "Allot's queues have no description"},
		{"clusterId", "the Run:ai cluster the " + kind + " belongs to: the queue is written to the cluster allot import talks to"},
		{"requestedNamespace", "the project's namespace: to keep other namespaces out of the queue, list it in spec.namespaces"},
		{"enforceRunaiScheduler", "Allot's webhook sends the pods of a namespace bound to a queue to Allot's scheduler"},
		{"schedulingRules", "Allot's idle rules are per queue class (docs/idle.md): set them by hand"},
		{"nodeTypes", "node types per kind of work: spec.classNodePools takes pools per class of work"},
	} {
		if v, ok := f.take(k.field); ok {
			f.note(k.field, show(v), "", k.why)
		}
	}
	if v, ok := f.take("defaultNodePools"); ok {
		pools := runaiPoolList(f, v)
		if len(pools) > 0 {
			q.Spec.NodePools = pools
			im.Owns = append(im.Owns, "nodePools")
			f.note("defaultNodePools", show(v), "spec.nodePools: ["+strings.Join(pools, ", ")+"]", "tried in this order, as Run:ai does")
		}
	}
	v, ok := f.take("resources")
	entries, isList := v.([]any)
	switch {
	case !ok:
		f.note("resources", "(unset)", "", "no quota in any node pool: read as none (Allot's quota 0, no cap)")
	case !isList:
		f.errorf("resources", "%s is not allowed: a list of node pools' resources", show(v))
	default:
		runaiResources(f, q, entries)
	}
	if len(q.Spec.NodePools) == 0 && len(q.Spec.GPU.Pools) > 0 {
		f.note("defaultNodePools", "(unset)", "", "as in Run:ai, work that names no node pool runs in the default pool; a pod names others with the annotation "+
			v1alpha1.AnnotationNodePools+", or set spec.nodePools to try the pools with quota first")
	}
	f.leftovers("Run:ai's " + kind)
	return im
}

// runaiPoolList reads a list of node pools' names.
func runaiPoolList(f *fields, v any) v1alpha1.PoolList {
	items, ok := v.([]any)
	var names []string
	for _, it := range items {
		s, isStr := it.(string)
		if !isStr {
			ok = false
			break
		}
		names = append(names, s)
	}
	if !ok {
		f.errorf("defaultNodePools", "%s is not allowed: a list of node pools' names", show(v))
		return nil
	}
	if len(names) == 0 {
		return nil
	}
	pools, err := convert.ParsePools(strings.Join(names, ","))
	if err != nil {
		f.errorf("defaultNodePools", "%v", err)
		return nil
	}
	return pools
}

// runaiResources reads the org unit's quota in each node pool: the default pool's is the
// queue's own GPU quota, another pool's is spec.gpu.pools' entry for it. Run:ai's units
// are those of the KAI queues it writes from them: GPUs, -1 for unlimited.
func runaiResources(f *fields, q *v1alpha1.Queue, entries []any) {
	seen := map[string]bool{}
	for i, e := range entries {
		m, isObj := e.(map[string]any)
		where := fmt.Sprintf("resources[%d]", i)
		if !isObj {
			f.errorf(where, "%s is not allowed: an object with nodePool and gpu", show(e))
			continue
		}
		pool, _, _ := unstructured.NestedString(m, "nodePool", "name")
		if pool == "" {
			f.errorf(where+".nodePool.name", "missing: the node pool this entry is for")
			continue
		}
		if _, err := convert.ParsePools(pool); err != nil {
			f.errorf(where+".nodePool.name", "%v", err)
			continue
		}
		if seen[pool] {
			f.errorf(where+".nodePool.name", "node pool %q has two entries", pool)
			continue
		}
		seen[pool] = true
		pf := &fields{c: f.c, queue: f.queue, spec: m, top: true, base: fmt.Sprintf("resources[nodePool=%s].", pool)}
		pf.take("nodePool.name")
		if v, ok := pf.take("nodePool.id"); ok {
			pf.note("nodePool.id", show(v), "", "Run:ai's id of the pool: Allot names pools")
		}
		dst := "spec.gpu."
		if pool != runaiDefaultPool {
			dst += "pools." + pool + "."
		}
		quota, limit, weight, ok := runaiGPU(pf, dst)
		if ok {
			if pool == runaiDefaultPool {
				q.Spec.GPU.Quota, q.Spec.GPU.Limit = quota, limit
				if weight != nil {
					// Written with its siblings' (scaleWeights), as every source's default weight.
					f.c.setWeight(q, float64(*weight), Note{Queue: f.queue, Field: pf.path("gpu.overQuotaWeight"), Value: fmt.Sprint(*weight)})
				}
			} else {
				if weight != nil {
					pf.note("gpu.overQuotaWeight", fmt.Sprint(*weight), fmt.Sprintf("%soverQuotaWeight: %d", dst, *weight), "")
				}
				if q.Spec.GPU.Pools == nil {
					q.Spec.GPU.Pools = map[string]v1alpha1.PoolQuota{}
				}
				q.Spec.GPU.Pools[pool] = v1alpha1.PoolQuota{Quota: quota, Limit: limit, OverQuotaWeight: weight}
				f.c.note(Note{Queue: f.queue, Field: pf.path("nodePool.name"), Value: pool, Allot: "spec.gpu.pools." + pool,
					Why: fmt.Sprintf("Run:ai's node pool %s: label its nodes %s=%s", pool, v1alpha1.LabelNodePool, pool)})
			}
		}
		for _, k := range []string{"cpu", "memory"} {
			if v, ok := pf.take(k); ok {
				pf.note(k, show(v), "", "Allot's CPU and memory quotas are the queue's, not a pool's: set spec."+k+" by hand")
			}
		}
		for _, k := range []string{"rank", "priority"} {
			if v, ok := pf.take(k); ok {
				pf.note(k, show(v), "", "Allot orders queues by spec.priority, one for all pools")
			}
		}
		pf.leftovers("Run:ai's resources of a node pool")
	}
	if n := len(q.Spec.GPU.Pools); n > 8 {
		f.errorf("resources", "quotas in %d node pools are not allowed: at most 8 besides the default pool", n)
	}
}

// runaiGPU reads one pool's gpu: deserved (the quota), limit and overQuotaWeight; dst is
// where the pool's quota goes in Allot's queue ("spec.gpu.", "spec.gpu.pools.h100."). The
// caller notes the weight.
func runaiGPU(f *fields, dst string) (quota int32, limit, weight *int32, ok bool) {
	const allowed = "a number of GPUs (0.5 is half of one), or -1 for unlimited"
	deserved, hasQuota := f.number("gpu.deserved", allowed)
	lim, hasLimit := f.number("gpu.limit", allowed)
	w, hasWeight := f.number("gpu.overQuotaWeight", "a whole number, 0 or more")
	ok = true
	for _, v := range []struct {
		path string
		v    float64
	}{{"gpu.deserved", deserved}, {"gpu.limit", lim}} {
		if (v.v < 0 && v.v != -1) || v.v > math.MaxInt32 {
			f.errorf(v.path, "%s is not allowed: %s", num(v.v), allowed)
			ok = false
		}
	}
	if w < 0 || w > math.MaxInt32 || w != math.Trunc(w) {
		f.errorf("gpu.overQuotaWeight", "%s is not allowed: a whole number from 0 to %d", num(w), math.MaxInt32)
		ok = false
	}
	if !ok {
		return 0, nil, nil, false
	}
	switch {
	case deserved == -1:
		f.note("gpu.deserved", "-1", "", "unlimited quota: Allot's quota is a number of GPUs guaranteed; 0 written")
	case hasQuota:
		quota = int32(math.Floor(deserved))
		why := ""
		if deserved != math.Floor(deserved) {
			why = "rounded down: Allot's quotas are whole GPUs"
		}
		f.note("gpu.deserved", num(deserved), fmt.Sprintf("%squota: %d", dst, quota), why)
	}
	switch {
	case !hasLimit || lim == -1:
		f.note("gpu.limit", map[bool]string{true: "-1", false: "(unset)"}[hasLimit], dst+"limit: (none)", "")
	default:
		l := int32(math.Floor(lim))
		limit = &l
		why := ""
		if lim == 0 {
			why = "a cap of no GPUs, as in Run:ai (-1 there is no cap)"
		}
		if lim != float64(l) {
			why = join(why, "rounded down: Allot's limits are whole GPUs")
		}
		if quota > l {
			why = join(why, fmt.Sprintf("quota %d lowered to %d: Allot refuses a quota above the limit", quota, l))
			quota = l
		}
		f.note("gpu.limit", num(lim), fmt.Sprintf("%slimit: %d", dst, l), why)
	}
	if hasWeight {
		x := int32(w)
		weight = &x
	}
	return quota, limit, weight, true
}
