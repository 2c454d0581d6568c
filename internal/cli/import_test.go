package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/migrate"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// yamlObjects decodes a YAML stream (comments and empty documents skipped).
func yamlObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	out, err := kubetest.DecodeYAML(data)
	if err != nil {
		t.Fatalf("not YAML: %v\n%s", err, data)
	}
	return out
}

// importedQueues reads the Allot queues a dry run printed.
func importedQueues(t *testing.T, out string) map[string]v1alpha1.QueueSpec {
	t.Helper()
	// runAllot's output has the command's standard error too: its progress, before the YAML.
	if i := strings.Index(out, "# "); i > 0 {
		out = out[i:]
	}
	qs := map[string]v1alpha1.QueueSpec{}
	for _, u := range yamlObjects(t, []byte(out)) {
		if u.GetAPIVersion() != "allot.dev/v1alpha1" || u.GetKind() != "Queue" {
			t.Errorf("printed %s %s, want Allot Queues only", u.GetAPIVersion(), u.GetKind())
		}
		var q v1alpha1.Queue
		b, _ := json.Marshal(u.Object)
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatal(err)
		}
		qs[q.Name] = q.Spec
	}
	return qs
}

func gpuSpec(s v1alpha1.QueueSpec) string {
	l, w := "-", "-"
	if s.GPU.Limit != nil {
		l = fmt.Sprint(*s.GPU.Limit)
	}
	if s.GPU.OverQuotaWeight != nil {
		w = fmt.Sprint(*s.GPU.OverQuotaWeight)
	}
	return fmt.Sprintf("parent=%s quota=%d weight=%s limit=%s priority=%d", s.Parent, s.GPU.Quota, w, l, s.Priority)
}

// The KAI tree of testdata/import/kai-tree.yaml as Allot writes it: KAI's default
// priority (100) written out, -1 limits as none.
var kaiTreeInAllot = map[string]string{
	"research": "parent= quota=6 weight=1 limit=- priority=100",
	"vision":   "parent=research quota=4 weight=3 limit=- priority=100",
	"nlp":      "parent=research quota=2 weight=1 limit=- priority=100",
	"platform": "parent= quota=2 weight=1 limit=5 priority=200",
}

// TestImportFromFile: allot import -f reads exported YAML with no cluster at all and
// prints Allot queues kubectl apply takes, with the table of what became of each field;
// bad flags and bad files say what is allowed.
func TestImportFromFile(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "no-kubeconfig")
	out, err := runAllot(context.Background(), nowhere, "import", "-f", "testdata/import/kai-tree.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	qs := importedQueues(t, out)
	if len(qs) != len(kaiTreeInAllot) {
		t.Errorf("%d queues printed, want %d:\n%s", len(qs), len(kaiTreeInAllot), out)
	}
	for name, want := range kaiTreeInAllot {
		if got := gpuSpec(qs[name]); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	if d := qs["vision"].ReclaimMinRuntime; d == nil || d.Duration != 10*time.Minute {
		t.Errorf("vision: reclaimMinRuntime %v, want KAI's 10m", d)
	}
	if q := qs["research"].CPU; q == nil || q.Quota == nil || q.Quota.String() != "8" || q.Limit != nil {
		t.Errorf("research: cpu %+v, want quota 8 (8000 millicores) and no limit", q)
	}
	for _, want := range []string{
		"# KAI-Scheduler Queue (scheduling.run.ai/v2): 4 queues",
		"# Volcano Queue (scheduling.volcano.sh/v1beta1): 0 queues",
		"kai/research  spec.displayName", "✗ not carried", "Allot shows a queue by its name",
		"kai/vision    spec.resources.gpu.overQuotaWeight     3         spec.gpu.overQuotaWeight: 3",
		"not carried (✗), into 4 Allot queues",
		"# nothing written: allot import --apply writes these 4 queues",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: x}\nspec: {resources: {gpu: {quota: lots}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", bad}, `nothing imported:` + "\n" + `kai/x: spec.resources.gpu.quota: "lots" is not allowed: a number of GPUs (0.5 is half of one), or -1 for unlimited`},
		{[]string{"-f", "testdata/import/kai-tree.yaml", "--from", "slurm"}, `--from: "slurm" is not a kind allot import reads: kai, volcano`},
		{[]string{"-f", "testdata/import/nope.yaml"}, "-f: open testdata/import/nope.yaml: no such file or directory"},
		{[]string{"-f", "testdata/import/kai-tree.yaml", "--apply"}, "no cluster configured"},
	} {
		out, err := runAllot(context.Background(), nowhere, append([]string{"import"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allot import %s: %v\n%s\nwant an error saying %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}

// create creates the objects of a YAML file with the dynamic client, each as soon as the
// API server serves its kind (a CRD created just before takes a moment).
func (e *cliEnv) create(t *testing.T, path string, gvr schema.GroupVersionResource) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs := yamlObjects(t, data)
	for _, u := range objs {
		e.WaitFor(t, "create "+u.GetName(), func() (bool, string) {
			_, err := e.Dyn.Resource(gvr).Create(e.Ctx, u, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err)
		})
	}
	return objs
}

// startEmpty is startCLI without its queues: 2 nodes of 8 GPUs and Allot's stack, for
// tests that make their own.
func startEmpty(t *testing.T) *cliEnv {
	t.Helper()
	env := kubetest.Start(t, 2, 8)
	if _, err := stack.Local(env.Ctx, env.Cluster.Config, env.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(env.Dir, "kubeconfig")
	if err := env.Cluster.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALLOT_CONFIG", filepath.Join(env.Dir, "allot.yaml"))
	return &cliEnv{Env: env, kubeconfig: kc}
}

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// allotQueues reads the Allot queues as allot queues -o json prints them.
func (e *cliEnv) allotQueues(t *testing.T) map[string]v1alpha1.Queue {
	t.Helper()
	var qs []v1alpha1.Queue
	if err := json.Unmarshal([]byte(e.must(t, "queues", "-o", "json")), &qs); err != nil {
		t.Fatal(err)
	}
	out := map[string]v1alpha1.Queue{}
	for _, q := range qs {
		out[q.Name] = q
	}
	return out
}

// TestImportKAIQueuesKeepTheirFairShares: a KAI-Scheduler queue tree on a real API server
// (its CRD from testdata) is imported by allot import; a dry run writes nothing and says
// Volcano's kind is not there; --apply writes the tree; with work submitted, Allot's fair
// shares are those KAI's rules give the same tree; a second --apply changes nothing, a
// third updates what changed in KAI and keeps what an admin set in Allot; Volcano's queues
// follow once its CRD is installed.
func TestImportKAIQueuesKeepTheirFairShares(t *testing.T) {
	e := startEmpty(t) // 16 GPUs

	e.create(t, "testdata/import/kai-crd.yaml", crds)
	e.create(t, "testdata/import/kai-tree.yaml", migrate.KAI.Resource)

	// A dry run prints the queues and writes none.
	out := e.must(t, "import")
	for _, want := range []string{
		"# KAI-Scheduler Queue (scheduling.run.ai/v2): 4 queues",
		"# Volcano Queue (scheduling.volcano.sh/v1beta1): not found in this cluster (no CRD serves queues.scheduling.volcano.sh)",
		"# nothing written",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run: output lacks %q:\n%s", want, out)
		}
	}
	if qs := importedQueues(t, out); len(qs) != 4 {
		t.Errorf("dry run printed %d queues, want 4", len(qs))
	}
	if qs := e.allotQueues(t); len(qs) != 0 {
		t.Fatalf("a dry run wrote %d Allot queues", len(qs))
	}

	out = e.must(t, "import", "--apply")
	// Parents first: research before its projects.
	for _, want := range []string{"queue research created (1/4)", "queue nlp created", "queue vision created", "queue platform created", "(4/4)"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply: output lacks %q:\n%s", want, out)
		}
	}
	qs := e.allotQueues(t)
	for name, want := range kaiTreeInAllot {
		if got := gpuSpec(qs[name].Spec); got != want {
			t.Errorf("Allot queue %s: %s, want %s", name, got, want)
		}
	}

	// Work for more than the cluster has: vision and nlp want 12 GPUs each, platform 8.
	for _, w := range []struct {
		queue string
		pods  int
	}{{"platform", 8}, {"nlp", 12}, {"vision", 12}} {
		for i := range w.pods {
			e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("%s-%d", w.queue, i), Queue: w.queue, GPUs: 1})
		}
	}
	// KAI's rules for this tree, by hand (its proportion plugin, level by level: each queue
	// first gets min(quota, requested, limit), what is left goes by priority, then in
	// proportion to over-quota weight, each portion rounded down and what rounding left
	// going one GPU at a time to the largest remainder):
	//   top level, 16 GPUs: research min(6, 24) = 6, platform min(2, 8, limit 5) = 2; 8 left.
	//     platform, priority 200, goes first: it can take 3 more (limit 5), gets 3 → 5.
	//     research, priority 100 (KAI's default), gets the other 5 → 11.
	//   within research, 11 GPUs: vision min(4, 12) = 4, nlp min(2, 12) = 2; 5 left.
	//     weights 3:1 → 3.75 and 1.25, rounded down 3 and 1; the GPU left goes to vision,
	//     whose remainder (0.75) is the larger → vision 8, nlp 3.
	want := map[string]float64{"research": 11, "vision": 8, "nlp": 3, "platform": 5}
	e.WaitFor(t, "fair shares as KAI gives them", func() (bool, string) {
		qs := e.allotQueues(t)
		var got []string
		ok := true
		for name, w := range want {
			fs := queueGPUs(qs[name].Status.FairShare)
			got = append(got, fmt.Sprintf("%s=%g", name, fs))
			ok = ok && fs == w
		}
		return ok, strings.Join(got, " ")
	})
	table := e.must(t, "queues")
	for name, w := range want {
		if !strings.Contains(table, fmt.Sprintf(" %g ", w)) || !strings.Contains(table, name) {
			t.Errorf("allot queues does not show %s's fair share %g:\n%s", name, w, table)
		}
	}
	t.Logf("allot queues:\n%s", table)

	// Again: nothing to change.
	out = e.must(t, "import", "--apply")
	if strings.Count(out, " unchanged (") != 4 {
		t.Errorf("second apply: want 4 queues unchanged:\n%s", out)
	}
	// An admin's Allot-only setting stays; what changed in KAI is carried.
	e.must(t, "queue", "edit", "vision", "--namespaces", "default")
	nlp, err := e.Dyn.Resource(migrate.KAI.Resource).Get(e.Ctx, "nlp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(nlp.Object, int64(6), "spec", "resources", "gpu", "limit"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Dyn.Resource(migrate.KAI.Resource).Update(e.Ctx, nlp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out = e.must(t, "import", "--apply", "--from", "kai")
	if !strings.Contains(out, "queue nlp updated") || !strings.Contains(out, "queue vision unchanged") {
		t.Errorf("third apply:\n%s", out)
	}
	qs = e.allotQueues(t)
	if l := qs["nlp"].Spec.GPU.Limit; l == nil || *l != 6 {
		t.Errorf("nlp: limit %v, want KAI's new 6", l)
	}
	if ns := qs["vision"].Spec.Namespaces; len(ns) != 1 || ns[0] != "default" {
		t.Errorf("vision: namespaces %v, want the admin's [default] kept", ns)
	}

	// Volcano's queues, once its CRD is there: its root is the cluster.
	e.create(t, "testdata/import/volcano-crd.yaml", crds)
	e.create(t, "testdata/import/volcano.yaml", migrate.Volcano.Resource)
	out = e.must(t, "import", "--from", "volcano", "--apply")
	if !strings.Contains(out, "queue batch created (1/1)") || !strings.Contains(out, "volcano/root") {
		t.Errorf("volcano apply:\n%s", out)
	}
	batch := e.allotQueues(t)["batch"]
	if got := gpuSpec(batch.Spec); got != "parent= quota=1 weight=2 limit=2 priority=0" {
		t.Errorf("batch: %s", got)
	}
	if _, ok := e.allotQueues(t)["root"]; ok {
		t.Error("Volcano's root queue was imported")
	}
}
