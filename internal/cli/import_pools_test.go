package cli

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/migrate"
)

// TestImportKAIShardsAsPoolQuotas: KAI-Scheduler queues of two node pools' shards
// (testdata/import/kai-shards.yaml) become Allot queues whose quotas are those pools' own,
// held to their pool; on the embedded cluster, with the pools' nodes labelled,
//
//	dgx-1 [8 GPUs]  pool h100   vision-h100 4 (limit 8), nlp-h100 4
//	dgx-2 [8 GPUs]  pool a100   vision-a100 2
//
// nlp-h100 borrows all of h100, vision-h100 takes its 4 back there, and vision-a100's
// work on a100 is untouched by that reclaim.
func TestImportKAIShardsAsPoolQuotas(t *testing.T) {
	e := startEmpty(t)
	for node, pool := range map[string]string{"dgx-1": "h100", "dgx-2": "a100"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelNodePool, pool)
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.create(t, "testdata/import/kai-crd.yaml", crds)
	e.create(t, "testdata/import/kai-shards.yaml", migrate.KAI.Resource)

	out := e.must(t, "import", "--apply")
	for _, want := range []string{"(3/3)", "metadata.labels[kai.scheduler/node-pool]", "spec.gpu.pools.h100, spec.nodePools: [h100]"} {
		if !strings.Contains(out, want) {
			t.Errorf("allot import --apply: output lacks %q:\n%s", want, out)
		}
	}
	qs := e.allotQueues(t)
	for name, want := range map[string]string{
		"vision-h100": "pools=h100 quota=0 h100: quota=4 weight=1 limit=8",
		"nlp-h100":    "pools=h100 quota=0 h100: quota=4 weight=1 limit=-",
		"vision-a100": "pools=a100 quota=0 a100: quota=2 weight=1 limit=-",
	} {
		s := qs[name].Spec
		pool := s.NodePools
		got := fmt.Sprintf("pools=%s quota=%d", strings.Join(pool, ","), s.GPU.Quota)
		for _, p := range pool {
			pq := s.GPU.Pools[p]
			l, w := "-", "-"
			if pq.Limit != nil {
				l = fmt.Sprint(*pq.Limit)
			}
			if pq.OverQuotaWeight != nil {
				w = fmt.Sprint(*pq.OverQuotaWeight)
			}
			got += fmt.Sprintf(" %s: quota=%d weight=%s limit=%s", p, pq.Quota, w, l)
		}
		if got != want {
			t.Errorf("Allot queue %s: %s, want %s", name, got, want)
		}
	}

	// The pods name no pool: each runs in its queue's.
	for i := range 8 {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("nlp-%d", i), Queue: "nlp-h100", GPUs: 1})
	}
	for i := range 2 {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("va-%d", i), Queue: "vision-a100", GPUs: 1})
	}
	onNode := func(prefix, node string) int {
		n := 0
		for name, p := range e.Pods(t, "default") {
			if strings.HasPrefix(name, prefix) && kubetest.Running(p) && p.Spec.NodeName == node && p.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	e.WaitFor(t, "nlp-h100 borrows all of h100, vision-a100 runs on a100", func() (bool, string) {
		why := ""
		if p := e.Pods(t, "default")["nlp-0"]; p != nil {
			why = fmt.Sprintf("%+v", p.Status.Conditions)
		}
		return onNode("nlp-", "dgx-1") == 8 && onNode("va-", "dgx-2") == 2, fmt.Sprintf("nlp on dgx-1: %d, va on dgx-2: %d; %s", onNode("nlp-", "dgx-1"), onNode("va-", "dgx-2"), why)
	})
	va := map[string]types.UID{}
	for name, p := range e.Pods(t, "default") {
		if strings.HasPrefix(name, "va-") {
			va[name] = p.UID
		}
	}
	for i := range 4 {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("vh-%d", i), Queue: "vision-h100", GPUs: 1})
	}
	e.WaitFor(t, "vision-h100 takes its 4 GPUs of h100 back", func() (bool, string) {
		return onNode("vh-", "dgx-1") == 4 && onNode("nlp-", "dgx-1") == 4, fmt.Sprintf("vision on dgx-1: %d, nlp on dgx-1: %d", onNode("vh-", "dgx-1"), onNode("nlp-", "dgx-1"))
	})
	pods := e.Pods(t, "default")
	for name, uid := range va {
		if p := pods[name]; p == nil || p.UID != uid || !kubetest.Running(p) {
			t.Errorf("vision-a100's %s on a100 was touched by the reclaim in h100", name)
		}
	}

	// Run:ai's own quotas per pool live in its control plane: read from what its API returns.
	if _, err := e.run(t, "import", "--from", "runai"); err == nil || !strings.Contains(err.Error(), "read from a file: give it with -f") {
		t.Errorf("allot import --from runai without -f: %v", err)
	}
	out = e.must(t, "import", "--from", "runai", "-f", "../../kube/migrate/testdata/runai-orgunits.json", "--apply")
	if !strings.Contains(out, "queue vision created (3/3)") {
		t.Errorf("allot import --from runai --apply:\n%s", out)
	}
	qs = e.allotQueues(t)
	if s := qs["vision"].Spec; s.Parent != "research" || s.GPU.Quota != 2 || s.GPU.Pools["h100"].Quota != 4 || strings.Join(s.NodePools, ",") != "h100,default" {
		t.Errorf("Run:ai's project vision became %+v", s)
	}
}
