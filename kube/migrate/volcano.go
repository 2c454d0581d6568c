package migrate

import (
	"fmt"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// volcanoRoot is the queue Volcano's hierarchy hangs from: the cluster itself.
const volcanoRoot = "root"

// convertVolcano reads a scheduling.volcano.sh/v1beta1 Queue: weight divides what is
// shared (Volcano's proportion plugin), deserved is what the queue gets back when it asks
// (the capacity plugin), guarantee is held for it, capability caps it.
func convertVolcano(c *converter, u *unstructured.Unstructured) *Imported {
	src := "volcano/" + u.GetName()
	spec, _, _ := unstructured.NestedFieldCopy(u.Object, "spec")
	m, ok := spec.(map[string]any)
	if spec != nil && !ok {
		c.errs = append(c.errs, fmt.Errorf("%s: spec: %s is not allowed: an object", src, show(spec)))
		return nil
	}
	if m == nil {
		m = map[string]any{}
	}
	f := &fields{c: c, queue: src, spec: m}
	if u.GetName() == volcanoRoot {
		c.note(Note{Queue: src, Field: "metadata.name", Value: volcanoRoot, Why: "Volcano's root queue stands for the whole cluster: not imported; its children become Allot's top-level queues"})
		for _, k := range sortedKeys(m) {
			f.note(k, show(m[k]), "", "on Volcano's root queue, which is not imported")
		}
		return nil
	}
	q := &v1alpha1.Queue{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Queue"},
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}

	if p, ok := f.str("parent"); ok {
		if p == volcanoRoot {
			f.note("parent", p, "spec.parent: (none)", "Volcano's root is the cluster: a top-level queue in Allot")
		} else {
			q.Spec.Parent = p
			f.note("parent", p, "spec.parent: "+p, "")
		}
	}
	if p, ok := f.integer("priority", "a whole number, 0 or more", 0); ok {
		q.Spec.Priority = p
		f.note("priority", fmt.Sprint(p), fmt.Sprintf("spec.priority: %d", p), "")
	}
	weight, hasWeight := f.integer("weight", "a whole number, 1 or more (Volcano's CRD allows up to 65535)", 1)
	if !hasWeight {
		weight = 1 // Volcano's default
	}
	why := "Volcano divides every resource by weight; Allot divides idle GPUs by it, CPU and memory by quota"
	if !hasWeight {
		why = "Volcano's default (1) written out; " + why
	}
	c.setWeight(q, float64(weight), Note{Queue: src, Field: "spec.weight", Value: map[bool]string{true: fmt.Sprint(weight), false: "(unset)"}[hasWeight], Why: why})

	deserved := volcanoResources(f, "deserved")
	guarantee := volcanoResources(f, "guarantee.resource")
	capability := volcanoResources(f, "capability")
	volcanoQuota(f, q, deserved, guarantee, capability)

	if r, ok := f.boolean("reclaimable"); ok {
		if r {
			f.note("reclaimable", "true", "(Allot's behaviour)", "")
		} else {
			f.note("reclaimable", "false", "", "Allot has no queue whose loans are never taken back: what a queue holds over its fair share is reclaimed; spec.reclaimMinRuntime delays it, and non-preemptible work (interactive, inference, allot.dev/preemptible: \"false\") is never reclaimed")
		}
	}
	if s, ok := f.str("dequeueStrategy"); ok {
		f.note("dequeueStrategy", s, "", "Allot has no per-queue dequeue strategy: a job that cannot be placed does not hold back the queue's others")
	}
	if s, ok := f.str("type"); ok {
		f.note("type", s, "", "Allot's queues have no type")
	}
	for _, k := range []string{"affinity", "extendClusters"} {
		if v, ok := f.take(k); ok {
			why := "Allot's queues name node pools instead (spec.nodePools, nodes labelled allot.dev/node-pool): set them by hand"
			if k == "extendClusters" {
				why = "Allot schedules one cluster"
			}
			f.note(k, show(v), "", why)
		}
	}
	if state, _, _ := unstructured.NestedString(u.Object, "status", "state"); state == "Closed" || state == "Closing" {
		c.note(Note{Queue: src, Field: "status.state", Value: state, Why: "Allot has no closed queue: limit who may use it with spec.namespaces, or delete it"})
	}
	f.leftovers("Volcano's Queue")
	return &Imported{Queue: q, From: Volcano, Owns: []string{"parent", "gpu", "cpu", "memory", "priority"}}
}

// volcanoResources reads a ResourceList (deserved, guarantee.resource, capability); the
// resources Allot does not count are listed as not carried here.
func volcanoResources(f *fields, path string) corev1.ResourceList {
	v, ok := f.take(path)
	if !ok {
		return nil
	}
	m, good := v.(map[string]any)
	if !good {
		f.errorf(path, "%s is not allowed: resources and their quantities, such as {nvidia.com/gpu: 4, cpu: 32}", show(v))
		return nil
	}
	out := corev1.ResourceList{}
	for _, name := range sortedKeys(m) {
		var q resource.Quantity
		var err error
		switch x := m[name].(type) {
		case string:
			q, err = resource.ParseQuantity(x)
		default:
			n, good := toFloat(x)
			if !good {
				err = fmt.Errorf("not a quantity")
				break
			}
			q = *resource.NewMilliQuantity(int64(math.Round(n*1000)), resource.DecimalSI)
		}
		if err != nil || q.Sign() < 0 {
			f.errorf(path+"."+name, "%s is not allowed: a quantity, 0 or more, such as 4, 500m or 16Gi", show(m[name]))
			continue
		}
		switch corev1.ResourceName(name) {
		case v1alpha1.GPUResource, corev1.ResourceCPU, corev1.ResourceMemory:
			out[corev1.ResourceName(name)] = q
		default:
			f.note(path+"."+name, q.String(), "", "Allot's queues count nvidia.com/gpu, cpu and memory")
		}
	}
	return out
}

// volcanoQuota writes a queue's quotas and limits from deserved, guarantee and capability.
func volcanoQuota(f *fields, q *v1alpha1.Queue, deserved, guarantee, capability corev1.ResourceList) {
	gpu := corev1.ResourceName(v1alpha1.GPUResource)
	whole := func(v resource.Quantity) int32 {
		n := v.MilliValue() / 1000
		return int32(min(n, math.MaxInt32))
	}
	// GPUs: the quota is what the queue gets back when it asks (deserved), or its guarantee
	// where that is larger; the cap is its capability.
	var quota int32
	if d, ok := deserved[gpu]; ok {
		quota = whole(d)
		why := ""
		if d.MilliValue()%1000 != 0 {
			why = "rounded down: Allot's quotas are whole GPUs"
		}
		f.note("deserved."+string(gpu), d.String(), fmt.Sprintf("spec.gpu.quota: %d", quota), why)
	}
	if g, ok := guarantee[gpu]; ok {
		n := whole(g)
		why := "Allot lends a queue's idle quota to others and takes it back when the queue asks: nothing is held idle for it"
		allot := ""
		if n > quota {
			quota = n
			allot = fmt.Sprintf("spec.gpu.quota: %d", n)
		} else {
			why = "below deserved, which is the quota; " + why
		}
		f.note("guarantee.resource."+string(gpu), g.String(), allot, why)
	}
	q.Spec.GPU.Quota = quota
	if c, ok := capability[gpu]; ok {
		l := whole(c)
		q.Spec.GPU.Limit = &l
		why := ""
		if c.MilliValue()%1000 != 0 {
			why = "rounded down: Allot's limits are whole GPUs"
		}
		if quota > l {
			why = join(why, fmt.Sprintf("quota %d lowered to %d: Allot refuses a quota above the limit", quota, l))
			q.Spec.GPU.Quota = l
		}
		f.note("capability."+string(gpu), c.String(), fmt.Sprintf("spec.gpu.limit: %d", l), why)
	}
	// CPU and memory alike, as quantities.
	for _, r := range []struct {
		name corev1.ResourceName
		dst  **v1alpha1.ResourceQuota
	}{{corev1.ResourceCPU, &q.Spec.CPU}, {corev1.ResourceMemory, &q.Spec.Memory}} {
		out := &v1alpha1.ResourceQuota{}
		if d, ok := deserved[r.name]; ok {
			out.Quota = &d
			f.note("deserved."+string(r.name), d.String(), fmt.Sprintf("spec.%s.quota: %s", r.name, d.String()), "")
		}
		if g, ok := guarantee[r.name]; ok {
			why := "Allot lends a queue's idle quota to others and takes it back when the queue asks: nothing is held idle for it"
			allot := ""
			if out.Quota == nil || g.Cmp(*out.Quota) > 0 {
				out.Quota = &g
				allot = fmt.Sprintf("spec.%s.quota: %s", r.name, g.String())
			} else {
				why = "below deserved, which is the quota; " + why
			}
			f.note("guarantee.resource."+string(r.name), g.String(), allot, why)
		}
		if c, ok := capability[r.name]; ok {
			out.Limit = &c
			why := ""
			if out.Quota != nil && out.Quota.Cmp(c) > 0 {
				out.Quota = &c
				why = "quota lowered to the limit"
			}
			f.note("capability."+string(r.name), c.String(), fmt.Sprintf("spec.%s.limit: %s", r.name, c.String()), why)
		}
		if out.Quota != nil || out.Limit != nil {
			*r.dst = out
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
