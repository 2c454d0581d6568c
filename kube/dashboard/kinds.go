package dashboard

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/inspect"
)

// poolRows are a queue's node pools divided apart: those its spec gives a quota of and
// those its status counts (pool.allot.dev/<pool>), as allot queues shows them.
func poolRows(q *v1alpha1.Queue) []KindRow {
	var out []KindRow
	for _, p := range inspect.QueuePools(*q) {
		r := KindRow{Kind: p.Name, Resource: v1alpha1.PoolStatusPrefix + p.Name, Quota: float64(p.Quota),
			FairShare: p.FairShare, Allocated: p.Allocated, Requested: p.Requested}
		if p.Limit != nil {
			l := float64(*p.Limit)
			r.Limit = &l
		}
		out = append(out, r)
	}
	return out
}

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
			if res == v1alpha1.GPUResource || res == corev1.ResourceCPU || res == corev1.ResourceMemory ||
				strings.HasPrefix(string(res), v1alpha1.PoolStatusPrefix) {
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
