package migrate

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzConvert: whatever an exported file holds, allot import says what is wrong with it,
// naming a queue, a field or a document, or converts it into queues the API server takes:
// no panic, no quota above its limit, no negative number.
func FuzzConvert(f *testing.F) {
	f.Add([]byte("apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: a}\nspec: {parentQueue: b, resources: {gpu: {quota: 2.5, limit: 1, overQuotaWeight: 0.3}}}\n---\napiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: b}\nspec: {priority: 7}\n"))
	f.Add([]byte("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: v}\nspec: {parent: root, weight: 3, deserved: {nvidia.com/gpu: 1e3}, capability: {nvidia.com/gpu: \"2\", cpu: 1e30}}\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [7, {apiVersion: scheduling.run.ai/v2, kind: Queue, metadata: {name: x}, spec: [1]}]\n"))
	f.Add([]byte("apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: a}\nspec: {resources: {gpu: {quota: 1e400, limit: -1, overQuotaWeight: 1e-9}, memory: {quota: 9e15}}}\n"))
	f.Add([]byte(`{"departments": [{"id": 1, "name": "d", "resources": [{"nodePool": {"name": "default"}, "gpu": {"deserved": 3.5, "limit": 2}}]}]}
{"projects": [{"name": "p", "parentId": "1", "defaultNodePools": ["h100"], "resources": [{"nodePool": {"name": "h100"}, "gpu": {"deserved": 9, "limit": 4, "overQuotaWeight": 2}}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _, err := ReadFile(bytes.NewReader(data), "fuzz.yaml", Kinds)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("an error that names no file: %v", err)
			}
			return
		}
		res, err := Convert(objs, nil)
		if err != nil {
			return
		}
		for _, im := range res.Queues {
			g := im.Queue.Spec.GPU
			if g.Quota < 0 || (g.Limit != nil && (*g.Limit < 0 || *g.Limit < g.Quota)) || (g.OverQuotaWeight != nil && *g.OverQuotaWeight < 0) {
				t.Fatalf("queue %s: gpu %+v the API server refuses", im.Queue.Name, g)
			}
			for p, pq := range g.Pools {
				if pq.Quota < 0 || (pq.Limit != nil && (*pq.Limit < 0 || *pq.Limit < pq.Quota)) || (pq.OverQuotaWeight != nil && *pq.OverQuotaWeight < 0) || p == "default" {
					t.Fatalf("queue %s: pool %s %+v the API server refuses", im.Queue.Name, p, pq)
				}
			}
			if c := im.Queue.Spec.CPU; c != nil && ((c.Quota != nil && c.Quota.Sign() < 0) || (c.Limit != nil && c.Limit.Sign() < 0)) {
				t.Fatalf("queue %s: negative cpu %+v", im.Queue.Name, c)
			}
			if m := im.Queue.Spec.Memory; m != nil && ((m.Quota != nil && m.Quota.Sign() < 0) || (m.Limit != nil && m.Limit.Sign() < 0)) {
				t.Fatalf("queue %s: negative memory %+v", im.Queue.Name, m)
			}
		}
	})
}
