package dashboard

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// kindRows are a queue's other kinds of accelerator: those its spec gives a quota of and
// those its status counts (keyed there by each kind's first resource), by the default table
// of kinds; a resource of no kind the table knows is shown under its own name.
func kindRows(q *v1alpha1.Queue) []KindRow {
	table := convert.DefaultTable()
	rows := map[string]*KindRow{}
	row := func(kind, res string) *KindRow {
		if r := rows[kind]; r != nil {
			return r
		}
		r := &KindRow{Kind: kind, Resource: res}
		rows[kind] = r
		return r
	}
	for kind, quota := range q.Spec.Accelerators {
		res := ""
		if k, ok := table.Kind(kind); ok && len(k.Resources) > 0 {
			res = string(k.Resources[0])
		}
		r := row(kind, res)
		r.Quota = float64(quota.Quota)
		if quota.Limit != nil {
			l := float64(*quota.Limit)
			r.Limit = &l
		}
	}
	kindOf := func(res corev1.ResourceName) string {
		for _, k := range table.On() {
			for _, kr := range k.Resources {
				if kr == res {
					return k.Name
				}
			}
		}
		return string(res)
	}
	for _, list := range []struct {
		l   corev1.ResourceList
		set func(*KindRow, float64)
	}{
		{q.Status.FairShare, func(r *KindRow, v float64) { r.FairShare = v }},
		{q.Status.Allocated, func(r *KindRow, v float64) { r.Allocated = v }},
		{q.Status.Requested, func(r *KindRow, v float64) { r.Requested = v }},
	} {
		for res, v := range list.l {
			if res == v1alpha1.GPUResource || res == corev1.ResourceCPU || res == corev1.ResourceMemory {
				continue
			}
			list.set(row(kindOf(res), string(res)), v.AsApproximateFloat64())
		}
	}
	if len(rows) == 0 {
		return nil
	}
	out := make([]KindRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Kind < out[b].Kind })
	return out
}
