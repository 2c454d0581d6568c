package multicluster

import (
	"testing"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestLocalQueueFollowsTheWork: a queue's quota of 8 over two clusters; each cluster's
// part is what the other's use beyond its own part leaves, never above the local limit.
func TestLocalQueueFollowsTheWork(t *testing.T) {
	ptr := func(v int32) *int32 { return &v }
	cases := []struct {
		name       string
		spec       v1alpha1.QueueSpec
		useA, useB int64
		quotaA     int32
		limitA     *int32
		weightA    int32
	}{
		{name: "no use: the whole quota may follow work to either", spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8}},
			quotaA: 8, weightA: 8},
		{name: "6 used on B: 2 left for A", spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8}}, useB: 6, quotaA: 2, weightA: 8},
		{name: "12 used on B, over quota: none left for A", spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8}}, useB: 12, quotaA: 0, weightA: 8},
		{name: "a part of 4 kept on A stays A's", spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8},
			Clusters: map[string]v1alpha1.ClusterPart{"a": {Quota: 4}}}, useB: 12, quotaA: 4, weightA: 8},
		{name: "a limit of 8 held on B: A's limit and quota 0", spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8, Limit: ptr(8)},
			Clusters: map[string]v1alpha1.ClusterPart{"a": {Quota: 4}}}, useB: 8, quotaA: 0, limitA: ptr(0), weightA: 8},
		{name: "its own weight kept", spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 8, OverQuotaWeight: ptr(3)}}, useA: 2, quotaA: 8, weightA: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := &v1alpha1.Queue{Spec: c.spec}
			q.Name = "team"
			got := localQueue(q, "a", map[string]map[string]int64{"team": {"a": c.useA, "b": c.useB}}, []string{"a", "b"})
			if got.GPU.Quota != c.quotaA {
				t.Errorf("quota on a: %d, want %d", got.GPU.Quota, c.quotaA)
			}
			if (got.GPU.Limit == nil) != (c.limitA == nil) || (c.limitA != nil && *got.GPU.Limit != *c.limitA) {
				t.Errorf("limit on a: %v, want %v", got.GPU.Limit, c.limitA)
			}
			if got.GPU.OverQuotaWeight == nil || *got.GPU.OverQuotaWeight != c.weightA {
				t.Errorf("over-quota weight on a: %v, want %d", got.GPU.OverQuotaWeight, c.weightA)
			}
			if got.Clusters != nil {
				t.Errorf("spec.clusters kept on the worker: %v", got.Clusters)
			}
		})
	}
}
