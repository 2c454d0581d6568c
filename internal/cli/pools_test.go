package cli

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// Quotas per node pool through the CLI, as an admin sets them and a researcher submits:
//
//	dgx-1 [8 GPUs]  pool h100      gpu-team: h100 4, a100 2 (limit 4); nodePools h100, a100;
//	dgx-2 [8 GPUs]  pool a100                interactive work on a100
//
// allot queues shows each pool's row; a training job that lists no pool runs in the
// queue's first, a notebook in its class's pool; a pool its queue does not list is refused
// before anything is made; allot queue edit takes a pool's quota away.
func TestQueuesPerNodePool(t *testing.T) {
	e := startCLI(t)
	for node, pool := range map[string]string{"dgx-1": "h100", "dgx-2": "a100"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelNodePool, pool)
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.must(t, "queue", "create", "gpu-team", "--quota", "0", "--pool-quota", "h100=4,a100=2", "--pool-limit", "a100=4",
		"--node-pools", "h100,a100", "--class-node-pools", "interactive=a100")

	e.must(t, "submit", "train", "-p", "gpu-team", "-i", "pytorch", "-g", "2")
	e.must(t, "submit", "notebook", "-p", "gpu-team", "-i", "jupyter", "-g", "1", "--interactive")
	podOn := func(workload string) string {
		var node string
		e.WaitFor(t, workload+" runs", func() (bool, string) {
			pods, err := e.Client.CoreV1().Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "allot.dev/workload=" + workload})
			if err != nil || len(pods.Items) == 0 {
				return false, fmt.Sprint(err)
			}
			p := pods.Items[0]
			node = p.Spec.NodeName
			return node != "" && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s on %q", p.Name, node)
		})
		return node
	}
	if n := podOn("train"); n != "dgx-1" {
		t.Errorf("the training job runs on %s, not in the queue's first pool h100 (dgx-1)", n)
	}
	if n := podOn("notebook"); n != "dgx-2" {
		t.Errorf("the notebook runs on %s, not in its class's pool a100 (dgx-2)", n)
	}

	var out string
	e.WaitFor(t, "allot queues shows each pool's quota and allocation", func() (bool, string) {
		out = e.must(t, "queues")
		return strings.Contains(out, "NODE POOLS DIVIDED APART") && rowOf(out, "gpu-team", "a100") == "gpu-team a100 2 4 1 1 0" &&
			rowOf(out, "gpu-team", "h100") == "gpu-team h100 4 - 2 2 0", out
	})

	desc := e.must(t, "queue", "describe", "gpu-team")
	for _, re := range []string{`(?m)^Node pools:\s+h100, a100 \(tried in this order`, `(?m)^  for interactive:\s+a100$`,
		`(?m)^the others\s+0\s+-\s+\(quota\)\s+0\s+0\s+0\s`, `(?m)^a100\s+2\s+4\s+\(quota\)\s+\S+\s+1\s+1\s`, `(?m)^h100\s+4\s+-\s+\(quota\)\s+\S+\s+2\s+2\s`} {
		if !regexp.MustCompile(re).MatchString(desc) {
			t.Errorf("allot queue describe gpu-team lacks %s:\n%s", re, desc)
		}
	}
	if _, err := e.run(t, "queue", "describe", "nobody"); err == nil || !strings.Contains(err.Error(), `queue "nobody" does not exist; queues: `) {
		t.Errorf("allot queue describe of a queue that does not exist: %v", err)
	}

	if _, err := e.run(t, "submit", "elsewhere", "-p", "gpu-team", "-i", "pytorch", "-g", "1", "--node-pool", "l40s"); err == nil ||
		!strings.Contains(err.Error(), `node pool "l40s" is not one queue gpu-team may use: its nodePools are h100, a100`) {
		t.Errorf("a pool the queue does not list: %v", err)
	}

	e.must(t, "queue", "edit", "gpu-team", "--pool-quota", "a100=none")
	qs, err := inspect.Queues(e.Ctx, e.Allot)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "gpu-team" {
			if _, ok := q.Spec.GPU.Pools["a100"]; ok || q.Spec.GPU.Pools["h100"].Quota != 4 {
				t.Errorf("after --pool-quota a100=none: pools %+v", q.Spec.GPU.Pools)
			}
		}
	}
}

// rowOf is the line of a table that starts with the queue and then the pool, its columns
// up to the bar joined by one space.
func rowOf(table, queue, pool string) string {
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) >= 7 && f[0] == queue && f[1] == pool {
			return strings.Join(f[:7], " ")
		}
	}
	return ""
}
