package migrate

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/api/v1alpha1"
)

func read(t *testing.T, path string, kinds ...*Kind) *Result {
	t.Helper()
	if len(kinds) == 0 {
		kinds = Kinds
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, _, err := ReadFile(f, path, kinds)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Convert(objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func queue(t *testing.T, res *Result, name string) *v1alpha1.Queue {
	t.Helper()
	for _, im := range res.Queues {
		if im.Queue.Name == name {
			return im.Queue
		}
	}
	t.Fatalf("no Allot queue %s", name)
	return nil
}

func note(t *testing.T, res *Result, src, field string) Note {
	t.Helper()
	for _, n := range res.Notes {
		if n.Queue == src && n.Field == field {
			return n
		}
	}
	t.Fatalf("no note for %s %s", src, field)
	return Note{}
}

// gpu prints a queue's GPU fields as the YAML of its spec would.
func gpu(q *v1alpha1.Queue) string {
	b, _ := yaml.Marshal(q.Spec.GPU)
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\n", " "))
}

func qty(q *resource.Quantity) string {
	if q == nil {
		return "-"
	}
	return q.String()
}

// TestConvertExported: an exported file of KAI's and Volcano's queues becomes Allot's, each
// field as its scheduler reads it, and what cannot be carried listed with the reason.
func TestConvertExported(t *testing.T) {
	res := read(t, "testdata/exported.yaml")
	// Parents before children, as Apply writes them.
	var order []string
	for _, im := range res.Queues {
		order = append(order, im.From.Short+"/"+im.Queue.Name)
	}
	if got, want := strings.Join(order, " "), "kai/ai kai/infer kai/legacy volcano/research volcano/student kai/train"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}

	ai := queue(t, res, "ai")
	if got := gpu(ai); got != "limit: 12 overQuotaWeight: 1 quota: 8" || ai.Spec.Priority != 100 || ai.Spec.Parent != "" {
		t.Errorf("ai: gpu %s, priority %d (KAI's default 100), parent %q", got, ai.Spec.Priority, ai.Spec.Parent)
	}
	if ai.Spec.CPU != nil || qty(ai.Spec.Memory.Quota) != "65536M" || ai.Spec.Memory.Limit != nil {
		t.Errorf("ai: cpu %+v (unlimited quota, no limit: none), memory %+v (65536 MB)", ai.Spec.CPU, ai.Spec.Memory)
	}
	for _, f := range []string{"spec.displayName", "spec.resources.cpu.quota", "spec.resources.cpu.overQuotaWeight", "spec.resources.memory.overQuotaWeight"} {
		if n := note(t, res, "kai/ai", f); n.Carried() || n.Why == "" {
			t.Errorf("kai/ai %s: %+v, want not carried with a reason", f, n)
		}
	}
	for _, n := range res.Notes {
		if strings.HasPrefix(n.Field, "status") && n.Queue == "kai/ai" {
			t.Errorf("KAI's status is the scheduler's, not a setting: %+v", n)
		}
	}

	train := queue(t, res, "train")
	// 6.5 GPUs of quota round down; weights 1.5 and infer's unset 0 are scaled ×10 together.
	if got := gpu(train); got != "overQuotaWeight: 15 quota: 6" || train.Spec.Parent != "ai" || train.Spec.Priority != 50 {
		t.Errorf("train: gpu %s parent %q priority %d", got, train.Spec.Parent, train.Spec.Priority)
	}
	if train.Spec.PreemptMinRuntime == nil || train.Spec.PreemptMinRuntime.Duration.String() != "5m0s" {
		t.Errorf("train: preemptMinRuntime %v, want 5m", train.Spec.PreemptMinRuntime)
	}
	if qty(train.Spec.CPU.Quota) != "16" || qty(train.Spec.CPU.Limit) != "32" {
		t.Errorf("train: cpu %s/%s, want 16 (16000 millicores) and 32", qty(train.Spec.CPU.Quota), qty(train.Spec.CPU.Limit))
	}
	// No memory section: KAI reads its limit as 0, and so the queue may hold none.
	if qty(train.Spec.Memory.Limit) != "0" || !strings.Contains(note(t, res, "kai/train", "spec.resources.memory.limit").Why, "unset limit as 0") {
		t.Errorf("train: memory limit %s, want 0 with the reason", qty(train.Spec.Memory.Limit))
	}
	if n := note(t, res, "kai/train", "spec.resources.gpu.quota"); n.Allot != "spec.gpu.quota: 6" || !strings.Contains(n.Why, "rounded down") {
		t.Errorf("train quota note %+v", n)
	}

	infer := queue(t, res, "infer")
	if got := gpu(infer); got != "limit: 2 overQuotaWeight: 0 quota: 0" {
		t.Errorf("infer: gpu %s, want no quota (unlimited is not carried), limit 2, weight 0", got)
	}
	if n := note(t, res, "kai/infer", "spec.resources.gpu.quota"); n.Carried() || !strings.Contains(n.Why, "unlimited") {
		t.Errorf("infer: quota -1: %+v", n)
	}
	if n := note(t, res, "kai/legacy", "spec.colour"); n.Carried() || !strings.Contains(n.Why, "not a field") {
		t.Errorf("legacy: an unknown field must be listed: %+v", n)
	}

	research := queue(t, res, "research")
	// Parent root is the cluster; the guarantee (6) is above deserved (4), so it is the
	// quota; capability caps.
	if got := gpu(research); got != "limit: 10 overQuotaWeight: 3 quota: 6" || research.Spec.Parent != "" || research.Spec.Priority != 10 {
		t.Errorf("research: gpu %s parent %q priority %d", got, research.Spec.Parent, research.Spec.Priority)
	}
	if qty(research.Spec.CPU.Quota) != "32" || qty(research.Spec.Memory.Quota) != "256Gi" {
		t.Errorf("research: cpu quota %s (deserved 32 over guarantee 8), memory %s", qty(research.Spec.CPU.Quota), qty(research.Spec.Memory.Quota))
	}
	for _, f := range []string{"spec.capability.volcano.sh/vgpu-number", "spec.dequeueStrategy", "spec.affinity", "status.state", "spec.guarantee.resource.cpu"} {
		if n := note(t, res, "volcano/research", f); n.Carried() || n.Why == "" {
			t.Errorf("volcano/research %s: %+v, want not carried with a reason", f, n)
		}
	}
	student := queue(t, res, "student")
	if got := gpu(student); got != "limit: 2 overQuotaWeight: 1 quota: 0" || student.Spec.Parent != "research" {
		t.Errorf("student: gpu %s parent %q (Volcano's default weight 1)", got, student.Spec.Parent)
	}
	if n := note(t, res, "volcano/root", "metadata.name"); n.Carried() || !strings.Contains(n.Why, "whole cluster") {
		t.Errorf("Volcano's root: %+v", n)
	}
	if n := note(t, res, "volcano/root", "spec.capability"); n.Carried() {
		t.Errorf("root's capability: %+v", n)
	}
	if res.NotCarried() < 12 {
		t.Errorf("%d notes not carried", res.NotCarried())
	}
}

// TestFromKindsOnly: --from volcano reads Volcano's queues alone.
func TestFromKindsOnly(t *testing.T) {
	res := read(t, "testdata/exported.yaml", Volcano)
	if len(res.Queues) != 2 {
		t.Errorf("%d queues, want Volcano's research and student", len(res.Queues))
	}
}

func kai(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}}
	u.SetGroupVersionKind(KAI.GroupVersionKind())
	return u
}

func volcano(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}}
	u.SetGroupVersionKind(Volcano.GroupVersionKind())
	return u
}

func gpuSpec(kv ...any) map[string]any {
	g := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		g[kv[i].(string)] = kv[i+1]
	}
	return map[string]any{"resources": map[string]any{"gpu": g}}
}

// TestBadInputNamesTheField: what no scheduler would accept is refused, naming the queue,
// the field and what is allowed, and nothing is converted.
func TestBadInputNamesTheField(t *testing.T) {
	for _, c := range []struct {
		name string
		objs []*unstructured.Unstructured
		want []string
	}{
		{"quota not a number", []*unstructured.Unstructured{kai("a", gpuSpec("quota", "two"))},
			[]string{`kai/a: spec.resources.gpu.quota: "two" is not allowed: a number of GPUs`, "-1 for unlimited"}},
		{"negative limit", []*unstructured.Unstructured{kai("a", gpuSpec("limit", int64(-3)))},
			[]string{"kai/a: spec.resources.gpu.limit: -3 is not allowed"}},
		{"negative weight", []*unstructured.Unstructured{kai("a", gpuSpec("overQuotaWeight", -1.5))},
			[]string{"spec.resources.gpu.overQuotaWeight: -1.5 is not allowed: a number from 0"}},
		{"priority a word", []*unstructured.Unstructured{kai("a", map[string]any{"priority": "high"})},
			[]string{`spec.priority: "high" is not allowed: a whole number`}},
		{"bad duration", []*unstructured.Unstructured{kai("a", map[string]any{"reclaimMinRuntime": "soon"})},
			[]string{`spec.reclaimMinRuntime: "soon" is not allowed: a duration such as 10m`}},
		{"resources not an object", []*unstructured.Unstructured{kai("a", map[string]any{"resources": "lots"})},
			[]string{`spec.resources: "lots" is not allowed: an object`}},
		{"volcano weight 0", []*unstructured.Unstructured{volcano("v", map[string]any{"weight": int64(0)})},
			[]string{"volcano/v: spec.weight: 0 is not allowed: a whole number, 1 or more"}},
		{"volcano capability", []*unstructured.Unstructured{volcano("v", map[string]any{"capability": map[string]any{"nvidia.com/gpu": "many"}})},
			[]string{`spec.capability.nvidia.com/gpu: "many" is not allowed: a quantity`}},
		{"two kinds, one name", []*unstructured.Unstructured{kai("x", nil), volcano("x", nil)},
			[]string{"kai/x and volcano/x would both be Allot queue x", "--from"}},
		{"unknown parent", nil, nil}, // below, with existing queues
		{"cycle", []*unstructured.Unstructured{kai("p", map[string]any{"parentQueue": "q"}), kai("q", map[string]any{"parentQueue": "p"})},
			[]string{"cycle"}},
		{"several at once", []*unstructured.Unstructured{kai("a", gpuSpec("quota", "two")), kai("b", map[string]any{"priority": 1.5})},
			[]string{"kai/a: spec.resources.gpu.quota", "kai/b: spec.priority: 1.5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.objs == nil {
				_, err := Convert([]*unstructured.Unstructured{kai("a", map[string]any{"parentQueue": "nowhere"})}, map[string]bool{"team-a": true})
				if err == nil || !strings.Contains(err.Error(), `its parent "nowhere" is not among the queues read nor an Allot queue`) {
					t.Errorf("error %v", err)
				}
				// Where the parent is an Allot queue already, the import hangs under it.
				if _, err := Convert([]*unstructured.Unstructured{kai("a", map[string]any{"parentQueue": "team-a"})}, map[string]bool{"team-a": true}); err != nil {
					t.Error(err)
				}
				return
			}
			res, err := Convert(c.objs, nil)
			if err == nil {
				t.Fatalf("no error; converted %d queues", len(res.Queues))
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to say %q", err, w)
				}
			}
		})
	}
}

// TestReadFileRefusesOtherKinds: a file with something that is no queue is refused,
// naming it and the kinds read.
func TestReadFileRefusesOtherKinds(t *testing.T) {
	in := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\napiVersion: scheduling.run.ai/v1\nkind: Queue\nmetadata: {name: old}\n"
	_, _, err := ReadFile(strings.NewReader(in), "x.yaml", Kinds)
	for _, w := range []string{`x.yaml: apps/v1 Deployment "web" is not a queue allot import reads`, `scheduling.run.ai/v1 Queue "old"`, "scheduling.run.ai/v2 Queue, scheduling.volcano.sh/v1beta1 Queue and Run:ai's projects and departments"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\nwant %q", err, w)
		}
	}
	if _, _, err := ReadFile(strings.NewReader("{not yaml: ["), "y.yaml", Kinds); err == nil || !strings.Contains(err.Error(), "y.yaml: document 1") {
		t.Errorf("error %v", err)
	}
}

// TestOwnsKnownFields: every field an import owns is one Apply can write.
func TestOwnsKnownFields(t *testing.T) {
	res := read(t, "testdata/exported.yaml")
	for _, im := range res.Queues {
		for _, f := range im.Owns {
			var dst v1alpha1.QueueSpec
			if err := own(&dst, &im.Queue.Spec, f); err != nil {
				t.Error(err)
			}
		}
	}
}

// A KAI queue of a node pool's shard (labelled kai.scheduler/node-pool) becomes a queue
// whose GPU quota, weight and limit are that pool's, held to the pool; a shard label that
// names no pool is refused, naming the field.
func TestKAIShardQueueBecomesPoolQuota(t *testing.T) {
	q := kai("vision", gpuSpec("quota", int64(4), "limit", int64(6), "overQuotaWeight", 0.5))
	q.SetLabels(map[string]string{"kai.scheduler/node-pool": "h100"})
	other := kai("nlp", gpuSpec("quota", int64(2), "limit", int64(-1), "overQuotaWeight", 1.5))
	res, err := Convert([]*unstructured.Unstructured{q, other}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range res.Queues {
		s := im.Queue.Spec
		switch im.Queue.Name {
		case "vision":
			p, ok := s.GPU.Pools["h100"]
			if !ok || p.Quota != 4 || p.Limit == nil || *p.Limit != 6 || p.OverQuotaWeight == nil || *p.OverQuotaWeight != 5 ||
				s.GPU.Quota != 0 || s.GPU.Limit != nil || len(s.NodePools) != 1 || s.NodePools[0] != "h100" {
				t.Errorf("vision: gpu %+v, nodePools %v; want the pool h100's quota 4, limit 6, weight 5 (0.5 ×10 with its sibling's 1.5)", s.GPU, s.NodePools)
			}
		case "nlp":
			if s.GPU.Quota != 2 || len(s.GPU.Pools) != 0 || len(s.NodePools) != 0 {
				t.Errorf("nlp (no shard): gpu %+v, nodePools %v", s.GPU, s.NodePools)
			}
		}
	}
	bad := kai("x", gpuSpec("quota", int64(1)))
	bad.SetLabels(map[string]string{"kai.scheduler/node-pool": "default"})
	if _, err := Convert([]*unstructured.Unstructured{bad}, nil); err == nil ||
		!strings.Contains(err.Error(), `kai/x: metadata.labels[kai.scheduler/node-pool]: "default" is not allowed`) {
		t.Errorf("a shard label naming the default pool: %v", err)
	}
}

// Run:ai's projects and departments, as its REST API returns them: each pool's quota.
func TestRunAIQuotasPerNodePool(t *testing.T) {
	res := read(t, "testdata/runai-orgunits.json", RunAI)
	var order []string
	for _, im := range res.Queues {
		order = append(order, im.Queue.Name)
	}
	if strings.Join(order, ",") != "research,nlp,vision" {
		t.Fatalf("queues %v, want the department before its projects", order)
	}
	for name, want := range map[string]string{
		"research": "parent= gpu=4 limit=- weight=2 pools=h100:8/16/3 nodePools=",
		"vision":   "parent=research gpu=2 limit=6 weight=1 pools=h100:4/-/2 nodePools=h100,default",
		"nlp":      "parent=research gpu=0 limit=- weight=- pools=h100:4/8/1 nodePools=",
	} {
		q := queue(t, res, name)
		s := q.Spec
		opt := func(p *int32) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprint(*p)
		}
		got := fmt.Sprintf("parent=%s gpu=%d limit=%s weight=%s pools=", s.Parent, s.GPU.Quota, opt(s.GPU.Limit), opt(s.GPU.OverQuotaWeight))
		var pools []string
		for p, pq := range s.GPU.Pools {
			pools = append(pools, fmt.Sprintf("%s:%d/%s/%s", p, pq.Quota, opt(pq.Limit), opt(pq.OverQuotaWeight)))
		}
		sort.Strings(pools)
		got += strings.Join(pools, ",") + " nodePools=" + strings.Join(s.NodePools, ",")
		if got != want {
			t.Errorf("%s: %s\nwant %s", name, got, want)
		}
	}
	for _, c := range []struct{ src, field, allot, why string }{
		{"runai/vision", "resources[nodePool=default].gpu.deserved", "spec.gpu.quota: 2", "rounded down"},
		{"runai/vision", "parentId", "spec.parent: research", ""},
		{"runai/vision", "resources[nodePool=h100].nodePool.name", "spec.gpu.pools.h100", "label its nodes allot.dev/node-pool=h100"},
		{"runai/vision", "resources[nodePool=h100].memory", "", "not a pool's"},
		{"runai/research", "resources[nodePool=h100].rank", "", "spec.priority"},
		{"runai/research", "resources[nodePool=h100].gpu.limit", "spec.gpu.pools.h100.limit: 16", ""},
		{"runai/nlp", "schedulingRules", "", "idle rules"},
		{"runai/research", "status, totalResources, createdAt", "", "not its configuration"},
	} {
		n := note(t, res, c.src, c.field)
		if n.Allot != c.allot || !strings.Contains(n.Why, c.why) {
			t.Errorf("%s %s: became %q (%s), want %q (…%s…)", c.src, c.field, n.Allot, n.Why, c.allot, c.why)
		}
	}
}

// Bad Run:ai input is refused as a whole, each problem named.
func TestRunAIRefusals(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"projects": [{"name": "p", "parentId": "9", "resources": []}]}`, `runai/p: parentId: "9" is not the id of a department read`},
		{`{"projects": {"name": "p"}}`, `projects: map[name:p] is not allowed: a list of Run:ai's projects`},
		{`{"departments": [{"name": "d", "resources": [{"gpu": {"deserved": 1}}]}]}`, `runai/d: resources[0].nodePool.name: missing`},
		{`{"departments": [{"name": "d", "resources": [{"nodePool": {"name": "a b"}, "gpu": {"deserved": 1}}]}]}`, `"a b" is not a node pool`},
		{`{"departments": [{"name": "d", "resources": [{"nodePool": {"name": "x"}, "gpu": {"deserved": -2}}]}]}`, `resources[nodePool=x].gpu.deserved: -2 is not allowed`},
		{`{"departments": [{"name": "d", "resources": [{"nodePool": {"name": "x"}, "gpu": {"overQuotaWeight": 1.5}}]}]}`, `gpu.overQuotaWeight: 1.5 is not allowed: a whole number`},
		{`{"departments": [{"name": "d", "defaultNodePools": "x"}]}`, `runai/d: defaultNodePools: "x" is not allowed: a list of node pools' names`},
	} {
		objs, _, err := ReadFile(strings.NewReader(c.in), "in", []*Kind{RunAI})
		if err == nil {
			_, err = Convert(objs, nil)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.in, err, c.want)
		}
	}
}
