package migrate

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// kaiDefaultPriority is the priority KAI-Scheduler gives a queue that sets none.
const kaiDefaultPriority = 100

// convertKAI reads a scheduling.run.ai/v2 Queue. KAI's units: GPUs (fractions allowed),
// CPU in millicores, memory in megabytes of 10^6 bytes; -1 is unlimited, and an unset
// limit is 0, which KAI reads as a cap of nothing (its documentation's table of special
// values), as it does an unset over-quota weight: nothing over quota.
func convertKAI(c *converter, u *unstructured.Unstructured) *Imported {
	spec, _, _ := unstructured.NestedFieldCopy(u.Object, "spec")
	m, ok := spec.(map[string]any)
	if spec != nil && !ok {
		c.errs = append(c.errs, fmt.Errorf("kai/%s: spec: %s is not allowed: an object", u.GetName(), show(spec)))
		return nil
	}
	if m == nil {
		m = map[string]any{}
	}
	f := &fields{c: c, queue: "kai/" + u.GetName(), spec: m}
	q := &v1alpha1.Queue{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Queue"},
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}

	if p, ok := f.str("parentQueue"); ok {
		q.Spec.Parent = p
		f.note("parentQueue", p, "spec.parent: "+p, "")
	}
	if d, ok := f.str("displayName"); ok {
		f.note("displayName", d, "", "Allot shows a queue by its name; it has no display name")
	}
	if p, ok := f.integer("priority", "a whole number", math.MinInt32); ok {
		q.Spec.Priority = p
		f.note("priority", fmt.Sprint(p), fmt.Sprintf("spec.priority: %d", p), "")
	} else {
		q.Spec.Priority = kaiDefaultPriority
		f.note("priority", "(unset)", fmt.Sprintf("spec.priority: %d", kaiDefaultPriority), "KAI's default, written out: Allot's is 0")
	}
	for _, d := range []struct {
		field string
		dst   **metav1.Duration
	}{{"reclaimMinRuntime", &q.Spec.ReclaimMinRuntime}, {"preemptMinRuntime", &q.Spec.PreemptMinRuntime}} {
		s, ok := f.str(d.field)
		if !ok {
			continue
		}
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			f.errorf(d.field, "%q is not allowed: a duration such as 10m or 1h30m", s)
			continue
		}
		*d.dst = &metav1.Duration{Duration: v}
		f.note(d.field, s, fmt.Sprintf("spec.%s: %s", d.field, v), "")
	}

	if _, ok := f.object("resources"); !ok {
		f.note("resources", "(unset)", "", "KAI refuses a queue without resources; read as all zero: no quota and a limit of 0")
	}
	kaiGPU(f, q)
	q.Spec.CPU = kaiOther(f, "cpu", func(v float64) *resource.Quantity {
		return resource.NewMilliQuantity(int64(math.Round(v)), resource.DecimalSI)
	})
	q.Spec.Memory = kaiOther(f, "memory", func(v float64) *resource.Quantity {
		return resource.NewQuantity(int64(math.Round(v*1e6)), resource.DecimalSI)
	})
	f.leftovers("KAI-Scheduler's Queue")
	im := &Imported{Queue: q, From: KAI,
		Owns: []string{"parent", "gpu", "cpu", "memory", "priority", "reclaimMinRuntime", "preemptMinRuntime"}}
	if pool := u.GetLabels()[kaiNodePoolLabel]; pool != "" {
		if _, err := convert.ParsePools(pool); err != nil || pool == v1alpha1.DefaultPool {
			c.errs = append(c.errs, fmt.Errorf("kai/%s: metadata.labels[%s]: %q is not allowed: a node pool's name, the value of its nodes' label %s (not %q)",
				u.GetName(), kaiNodePoolLabel, pool, v1alpha1.LabelNodePool, v1alpha1.DefaultPool))
			return nil
		}
		im.Pool = pool
		im.Owns = append(im.Owns, "nodePools")
		c.note(Note{Queue: f.queue, Field: "metadata.labels[" + kaiNodePoolLabel + "]", Value: pool,
			Allot: fmt.Sprintf("spec.gpu.pools.%s, spec.nodePools: [%s]", pool, pool),
			Why:   fmt.Sprintf("a queue of KAI's shard for node pool %s: its GPU quota, limit and weight are the pool's (label the pool's nodes %s=%s)", pool, v1alpha1.LabelNodePool, pool)})
	}
	return im
}

// kaiNodePoolLabel is the label by which KAI-Scheduler's shards take their nodes and
// queues (its default nodePoolLabelKey): a queue labelled so schedules in that pool alone.
const kaiNodePoolLabel = "kai.scheduler/node-pool"

// intoPools moves the GPU quotas of queues from a node pool's shard (Imported.Pool) under
// spec.gpu.pools, once their weights are written, and holds them to that pool.
func intoPools(qs []*Imported) {
	for _, im := range qs {
		if im.Pool == "" {
			continue
		}
		g := im.Queue.Spec.GPU
		im.Queue.Spec.GPU = v1alpha1.GPUQuota{Pools: map[string]v1alpha1.PoolQuota{
			im.Pool: {Quota: g.Quota, Limit: g.Limit, OverQuotaWeight: g.OverQuotaWeight}}}
		im.Queue.Spec.NodePools = v1alpha1.PoolList{im.Pool}
	}
}

// kaiGPU reads spec.resources.gpu into spec.gpu.
func kaiGPU(f *fields, q *v1alpha1.Queue) {
	const allowed = "a number of GPUs (0.5 is half of one), or -1 for unlimited"
	quota, hasQuota := f.number("resources.gpu.quota", allowed)
	limit, hasLimit := f.number("resources.gpu.limit", allowed)
	weight, hasWeight := f.number("resources.gpu.overQuotaWeight", "a number, 0 or more")
	bad := false
	for _, v := range []struct {
		path string
		v    float64
	}{{"resources.gpu.quota", quota}, {"resources.gpu.limit", limit}} {
		if v.v < 0 && v.v != -1 {
			f.errorf(v.path, "%s is not allowed: %s", num(v.v), allowed)
			bad = true
		}
		if v.v > math.MaxInt32 {
			f.errorf(v.path, "%s is not allowed: at most %d GPUs", num(v.v), math.MaxInt32)
			bad = true
		}
	}
	if weight < 0 || weight > math.MaxInt32 {
		f.errorf("resources.gpu.overQuotaWeight", "%s is not allowed: a number from 0 to %d", num(weight), math.MaxInt32)
		bad = true
	}
	if bad {
		return
	}

	if quota == -1 {
		f.note("resources.gpu.quota", "-1", "", "unlimited quota: Allot's quota is a number of GPUs guaranteed; 0 written, set it with allot queue edit "+q.Name+" --quota N")
	} else {
		q.Spec.GPU.Quota = int32(math.Floor(quota))
		why := ""
		if quota != math.Floor(quota) {
			why = "rounded down: Allot's quotas are whole GPUs"
		}
		if hasQuota || why != "" {
			f.note("resources.gpu.quota", num(quota), fmt.Sprintf("spec.gpu.quota: %d", q.Spec.GPU.Quota), why)
		}
	}

	value := func(v float64, set bool) string {
		if !set {
			return "(unset)"
		}
		return num(v)
	}
	switch {
	case limit == -1:
		f.note("resources.gpu.limit", "-1", "spec.gpu.limit: (none)", "")
	default:
		l := int32(math.Floor(limit))
		q.Spec.GPU.Limit = &l
		var why string
		if !hasLimit {
			why = "KAI reads an unset limit as 0, a cap of no GPUs: kept (-1 in KAI is no cap)"
		} else if limit == 0 {
			why = "a cap of no GPUs, as in KAI (-1 there is no cap)"
		}
		if limit != float64(l) {
			why = join(why, "rounded down: Allot's limits are whole GPUs")
		}
		if q.Spec.GPU.Quota > l {
			why = join(why, fmt.Sprintf("quota %d lowered to %d: KAI caps a queue's quota at its limit, Allot refuses a quota above the limit", q.Spec.GPU.Quota, l))
			q.Spec.GPU.Quota = l
		}
		f.note("resources.gpu.limit", value(limit, hasLimit), fmt.Sprintf("spec.gpu.limit: %d", l), why)
	}

	why := ""
	if !hasWeight {
		why = "KAI's default (0) written out: Allot's default is the quota"
	}
	if weight == 0 {
		why = join(why, "KAI gives a queue of weight 0 nothing over its quota; Allot gives it what its siblings of weight above 0 leave idle")
	}
	f.c.setWeight(q, weight, Note{Queue: f.queue, Field: "spec.resources.gpu.overQuotaWeight", Value: value(weight, hasWeight), Why: why})
}

// kaiOther reads spec.resources.cpu or .memory into Allot's ResourceQuota; nil where it
// leaves the queue as Allot's default (no guarantee, no cap).
func kaiOther(f *fields, res string, qty func(float64) *resource.Quantity) *v1alpha1.ResourceQuota {
	unit := map[string]string{"cpu": "millicores", "memory": "megabytes (10^6 bytes)"}[res]
	allowed := "a number of " + unit + ", or -1 for unlimited"
	quota, hasQuota := f.number("resources."+res+".quota", allowed)
	limit, hasLimit := f.number("resources."+res+".limit", allowed)
	weight, hasWeight := f.number("resources."+res+".overQuotaWeight", "a number, 0 or more")
	bad := false
	for _, v := range []struct {
		path string
		v    float64
	}{{"resources." + res + ".quota", quota}, {"resources." + res + ".limit", limit}} {
		if (v.v < 0 && v.v != -1) || v.v > 1e15 {
			f.errorf(v.path, "%s is not allowed: %s", num(v.v), allowed)
			bad = true
		}
	}
	if weight < 0 {
		f.errorf("resources."+res+".overQuotaWeight", "%s is not allowed: a number, 0 or more", num(weight))
		bad = true
	}
	if bad {
		return nil
	}
	out := &v1alpha1.ResourceQuota{}
	switch {
	case quota == -1:
		f.note("resources."+res+".quota", "-1", "", "unlimited quota: Allot has no unlimited guarantee; no "+res+" quota written")
	case quota > 0:
		out.Quota = qty(quota)
		f.note("resources."+res+".quota", num(quota), fmt.Sprintf("spec.%s.quota: %s", res, out.Quota), "")
	case hasQuota:
		f.note("resources."+res+".quota", "0", "spec."+res+".quota: (none)", "")
	}
	switch {
	case limit == -1:
		f.note("resources."+res+".limit", "-1", "spec."+res+".limit: (none)", "")
	default:
		out.Limit = qty(limit)
		var why string
		switch {
		case !hasLimit:
			why = "KAI reads an unset limit as 0, a cap of none that refuses the queue every pod asking for " + res + ": kept (-1 in KAI is no cap)"
		case limit == 0:
			why = "a cap of none, as in KAI: the queue runs no pod asking for " + res + " (-1 there is no cap)"
		}
		if out.Quota != nil && out.Quota.Cmp(*out.Limit) > 0 {
			why = join(why, "quota lowered to the limit, as KAI caps it")
			out.Quota = out.Limit
		}
		val := num(limit)
		if !hasLimit {
			val = "(unset)"
		}
		f.note("resources."+res+".limit", val, fmt.Sprintf("spec.%s.limit: %s", res, out.Limit), why)
	}
	if hasWeight {
		f.note("resources."+res+".overQuotaWeight", num(weight), "", "Allot divides "+res+" over quota in proportion to quota: its scheduler reads no "+res+" over-quota weight")
	}
	if out.Quota == nil && out.Limit == nil {
		return nil
	}
	return out
}
