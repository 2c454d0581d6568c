package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// cliEnv is a cluster with Allot's stack on it and a kubeconfig the commands use.
type cliEnv struct {
	*kubetest.Env
	kubeconfig string
}

func startCLI(t *testing.T) *cliEnv {
	t.Helper()
	e := kubetest.Start(t, 2, 8)
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for q, quota := range map[string]int64{"team-a": 4, "team-b": 2, "team-c": 2, "team-d": 8} {
		e.Queue(t, q, quota, nil)
	}
	kc := filepath.Join(e.Dir, "kubeconfig")
	if err := e.Cluster.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALLOT_CONFIG", filepath.Join(e.Dir, "allot.yaml"))
	return &cliEnv{Env: e, kubeconfig: kc}
}

// run runs one allot command against the cluster and returns what it printed.
func (e *cliEnv) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runAllot(e.Ctx, e.kubeconfig, args...)
}

// runAllot runs one allot command with a kubeconfig, as a user types it.
func runAllot(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	full := append([]string(nil), args...)
	if args[0] != "config" {
		// Flags go before a "--" that starts the workload's command.
		at := len(full)
		for i, a := range full {
			if a == "--" {
				at = i
				break
			}
		}
		full = append(full[:at], append([]string{"--kubeconfig", kubeconfig}, full[at:]...)...)
	}
	root.SetArgs(full)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func (e *cliEnv) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.run(t, args...)
	if err != nil {
		t.Fatalf("allot %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// workload waits until allot list -o json shows the workload as cond wants.
func (e *cliEnv) workload(t *testing.T, name string, cond func(inspect.Workload) bool) inspect.Workload {
	t.Helper()
	var got inspect.Workload
	e.WaitFor(t, "workload "+name, func() (bool, string) {
		var ws []inspect.Workload
		if err := json.Unmarshal([]byte(e.must(t, "list", "-o", "json")), &ws); err != nil {
			return false, err.Error()
		}
		for _, w := range ws {
			if w.Name == name {
				got = w
				return cond(w), fmt.Sprintf("%+v", w)
			}
		}
		return false, "not listed"
	})
	return got
}

func running(n int) func(inspect.Workload) bool {
	return func(w inspect.Workload) bool { return w.Status == "Running" && w.Running == n }
}

// TestSubmitListDescribeDelete: each kind of workload, from one command to running, listed,
// described with its pods, nodes and GPUs, and deleted.
func TestSubmitListDescribeDelete(t *testing.T) {
	e := startCLI(t)
	for _, c := range []struct {
		args       []string
		name, typ  string
		pods       int
		gpus       float64
		descrParts []string
	}{
		{[]string{"submit", "resnet", "-p", "team-a", "-i", "pytorch", "-g", "2", "--", "python", "train.py"}, "resnet", "train", 1, 2,
			[]string{"Type:       train", "Queue:      team-a"}},
		{[]string{"submit", "ddp", "-p", "team-d", "-i", "pytorch", "-g", "4", "--workers", "2"}, "ddp", "distributed", 2, 8,
			[]string{"ddp-0-", "ddp-1-", "Type:       distributed"}},
		{[]string{"submit", "notebook", "-p", "team-c", "-i", "jupyter", "-g", "0.5", "--interactive", "--port", "8888"}, "notebook", "interactive", 1, 0.5,
			[]string{"Type:       interactive", "Kind:       StatefulSet", "(0.5)"}},
		{[]string{"submit", "llm", "-p", "team-b", "-i", "vllm", "-g", "1", "--inference", "--port", "8000"}, "llm", "inference", 1, 1,
			[]string{"Type:       inference"}},
	} {
		t.Run(c.typ, func(t *testing.T) {
			if out := e.must(t, c.args...); !strings.Contains(out, c.typ+" "+c.name+" submitted") {
				t.Fatalf("submit said %q", out)
			}
			w := e.workload(t, c.name, running(c.pods))
			if w.Type != c.typ || w.GPUs != c.gpus || len(w.Nodes) == 0 {
				t.Fatalf("listed %+v, want type %s with %v GPUs on a node", w, c.typ, c.gpus)
			}
			table := e.must(t, "list")
			// GPUS held/requested and PODS running/(running and waiting), as the
			// dashboard writes them, never "1 (1)".
			gpus, pods := gpuAmount(c.gpus)+"/"+gpuAmount(c.gpus), fmt.Sprintf("%d/%d", c.pods, c.pods)
			if !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(c.name)+`\s.*\s`+regexp.QuoteMeta(gpus)+`\s+`+regexp.QuoteMeta(pods)+`\s`).MatchString(table) ||
				!strings.Contains(table, "NAME  ") || !strings.Contains(table, "  IDLE") {
				t.Fatalf("table, want %s with GPUS %s and PODS %s:\n%s", c.name, gpus, pods, table)
			}
			d := e.must(t, "describe", c.name)
			for _, want := range append(c.descrParts, "Status:     Running", w.Nodes[0]) {
				if !strings.Contains(d, want) {
					t.Fatalf("describe lacks %q:\n%s", want, d)
				}
			}
			e.must(t, "delete", c.name)
			e.WaitFor(t, c.name+" gone", func() (bool, string) {
				out := e.must(t, "list")
				return !strings.Contains(out, c.name+" "), out
			})
		})
	}
}

// TestPendingReasonAndTopNodes: a job too large for any node says why in list -o wide and
// describe; two half-GPU notebooks show as one shared GPU in top nodes.
func TestPendingReasonAndTopNodes(t *testing.T) {
	e := startCLI(t)
	// allot submit refuses a job no node can hold; kubectl does not.
	e.kubectlJob(t, "huge", "team-d", 1, 9)
	want := "needs 9 GPUs on one node; the largest node it may use has 8"
	e.workload(t, "huge", func(w inspect.Workload) bool { return w.Status == "Pending" && strings.Contains(w.Reason, want) })
	if out := e.must(t, "list", "-o", "wide"); !strings.Contains(out, want) {
		t.Fatalf("list -o wide lacks the reason:\n%s", out)
	}
	if out := e.must(t, "describe", "huge"); !strings.Contains(out, "Waiting:    "+want) {
		t.Fatalf("describe lacks the reason:\n%s", out)
	}
	// Its owner says how far it has come (allot.dev/progress): shown as text, on one line.
	patch := []byte(`{"metadata":{"annotations":{"allot.dev/progress":"step 4500/10000\u001b[2J"}}}`)
	if _, err := e.Client.BatchV1().Jobs("default").Patch(e.Ctx, "huge", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.workload(t, "huge", func(w inspect.Workload) bool { return w.Progress == "step 4500/10000 [2J" })
	if out := e.must(t, "list", "-o", "wide"); !regexp.MustCompile(`(?m)^huge\s.*\sstep 4500/10000 \[2J\s+` + regexp.QuoteMeta(want)).MatchString(out) {
		t.Errorf("list -o wide lacks the progress before the reason:\n%s", out)
	}
	if out := e.must(t, "describe", "huge"); !strings.Contains(out, "Progress:   step 4500/10000 [2J\n") {
		t.Errorf("describe lacks the progress:\n%s", out)
	}
	e.must(t, "submit", "nb-a", "-p", "team-a", "-i", "jupyter", "-g", "0.5", "--interactive")
	e.must(t, "submit", "nb-b", "-p", "team-a", "-i", "jupyter", "-g", "0.5", "--interactive")
	e.workload(t, "nb-b", running(1))
	e.workload(t, "nb-a", running(1))
	out := e.must(t, "top", "nodes")
	var shared string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "nb-a") {
			shared = line
		}
	}
	if !strings.Contains(shared, "default/nb-a-") && !strings.Contains(shared, "default/nb-a (0.5)") ||
		!strings.Contains(shared, "(0.5), default/nb-b") || !strings.Contains(out, "Allocated/Total GPUs: 1/16 (6%)") {
		t.Fatalf("top nodes:\n%s", out)
	}
	// With a Topology, top nodes groups the nodes by it: a line per rack with what its
	// nodes hold, the nodes under it.
	for node, rack := range map[string]string{"dgx-1": "r1", "dgx-2": "r2"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"example.com/rack":%q}}}`, rack)
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	topo := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "Topology", "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"levels": []any{map[string]any{"name": "rack", "nodeLabel": "example.com/rack"}}}}}
	if _, err := e.Dyn.Resource(v1alpha1.Topologies).Create(e.Ctx, topo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grouped := e.must(t, "top", "nodes")
	var lines []string
	for _, l := range strings.Split(grouped, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "rack" || strings.HasPrefix(f[0], "dgx-")) {
			lines = append(lines, strings.Join(f[:min(len(f), 4)], " "))
		}
	}
	indented := ""
	for _, l := range strings.Split(grouped, "\n") {
		if strings.HasPrefix(l, "  dgx-") {
			indented += strings.Fields(l)[0] + " "
		}
	}
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "rack r1") || !strings.HasPrefix(lines[1], "dgx-1") || !strings.HasPrefix(lines[2], "rack r2") ||
		!strings.HasPrefix(lines[3], "dgx-2") || indented != "dgx-1 dgx-2 " {
		t.Fatalf("top nodes with a Topology, grouped lines %q, indented nodes %q:\n%s", lines, indented, grouped)
	}
	q := e.must(t, "queues")
	// PAST USE comes from the status the scheduler keeps (status.usage): team-a is within
	// its quota, so it has used nothing above it.
	if !strings.Contains(q, "team-a") || !strings.Contains(q, "█ within quota") || !strings.Contains(q, "PAST USE") || !strings.Contains(q, " 0 GPU-h ") {
		t.Fatalf("queues:\n%s", q)
	}
}

// TestCLIErrorsSayWhatToDo: mistakes get messages a person can act on.
func TestCLIErrorsSayWhatToDo(t *testing.T) {
	e := startCLI(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "x", "-p", "team-z", "-i", "a"}, `queue "team-z" does not exist; queues: team-a, team-b, team-c, team-d`},
		{[]string{"submit", "x", "-p", "team-a", "-i", "a", "-g", "1.5"}, `-g/--gpu "1.5" is not allowed: a fraction between 0 and 1 (such as 0.5), a whole number of GPUs, or 0 for none`},
		{[]string{"submit", "x", "-i", "a"}, "-p/--queue is required (or set a default: allot config queue NAME)"},
		{[]string{"describe", "nothing"}, `no workload "nothing" in namespace default`},
		{[]string{"list", "-o", "csv"}, `-o "csv" is not allowed: table, json, yaml, wide`},
		{[]string{"queue", "create", "q", "--quota", "1", "--interactive-time-limit", "forever"}, `--interactive-time-limit "forever" is not allowed: a positive duration such as 30m, 4h or 1h30m`},
		{[]string{"queue", "create", "q", "--quota", "1", "--idle-timeout", "training=1h"}, `--idle-timeout "training=1h" is not allowed: CLASS=DURATION, CLASS interactive or inference`},
		{[]string{"queue", "create", "q", "--quota", "1", "--idle-timeout", "interactive=100ms"}, `--idle-timeout interactive="100ms" is not allowed: a duration of at least 1s`},
		{[]string{"queue", "create", "q", "--quota", "1", "--idle-threshold", "101"}, `--idle-threshold 101 is not allowed: a percentage of GPU utilisation from 1 to 100`},
		{[]string{"queue", "create", "q", "--quota", "1", "--pool-quota", "h100"}, `--pool-quota "h100" is not allowed: POOL=N, POOL being the value of its nodes' label allot.dev/node-pool`},
		{[]string{"queue", "create", "q", "--quota", "1", "--pool-quota", "default=2"}, `--pool-quota "default=2" is not allowed: POOL=N`},
		{[]string{"queue", "create", "q", "--quota", "1", "--pool-limit", "h100=-1"}, `--pool-limit "h100=-1" is not allowed: a whole number of GPUs, 0 or more (none removes it)`},
		{[]string{"queue", "create", "q", "--quota", "1", "--class-node-pools", "notebooks=a100"}, `--class-node-pools "notebooks=a100" is not allowed: CLASS=POOL,POOL with CLASS train, interactive or inference`},
		{[]string{"queue", "create", "q", "--quota", "1", "--node-pools", "h100", "--class-node-pools", "interactive=a100"}, `spec.classNodePools.interactive: node pool "a100" is not one of spec.nodePools (h100)`},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "--node-pool", "h100,,a100"}, `--node-pool "h100,,a100": "" is not a node pool`},
		// What could never run is refused before anything is made, with the reason.
		{[]string{"submit", "x", "-p", "team-a", "-i", "a", "--gpu-memory", "1Ti"}, `refused: admission webhook "pods.validate.allot.dev" denied the request: allot.dev/gpu-memory: "1Ti" is more than any GPU in the cluster has: at most 80Gi`},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "-g", "8", "--workers", "100"}, "a gang of 100 pods of 8 GPUs each starts whole or not at all, and the cluster's nodes hold 2 such pods at most"},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "-g", "16"}, "-g 16: no node can hold it: the most GPUs on one node of the cluster's nodes is 8"},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "--node-pool", "h100"}, "--node-pool h100: no node is in that pool; pools: none"},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "--workers", "0"}, `--workers "0" is not allowed: a number of workers (2), or MIN:MAX`},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "--workers", "3:2"}, `--workers "3:2" is not allowed`},
		{[]string{"submit", "x", "-p", "team-d", "-i", "a", "--workers", "1:2", "--min-workers", "1"}, "--workers 1:2 and --min-workers are both set"},
		// Numeric flags say what they take.
		{[]string{"queue", "create", "q", "--quota", "1.5"}, `--quota "1.5" is not allowed: a whole number (GPUs guaranteed)`},
		{[]string{"queue", "create", "q"}, `required flag(s) "quota" not set`},
		{[]string{"queue", "create", "q", "--quota", "1", "--reclaim-min-runtime", "a while"}, `--reclaim-min-runtime "a while" is not allowed: a duration such as 10m or 1h30m`},
		// The first hour's slips: each says what was meant.
		{[]string{"list", "-p", "tema-a"}, `queue "tema-a" does not exist; queues: team-a, team-b, team-c, team-d`},
		{[]string{"submit"}, "a NAME for the workload is required: allot submit NAME -p QUEUE -i IMAGE"},
		{[]string{"submit", "--", "python", "x.py"}, "a NAME for the workload is required"},
		{[]string{"queue", "create", "q", "--quota", "1", "--limit", "-1"}, `--limit "-1" is not allowed: a whole number of GPUs, 0 or more; for no cap leave --limit out`},
		{[]string{"config", "queue", "tema-a", "--kubeconfig", e.kubeconfig}, `queue "tema-a" does not exist; queues: team-a, team-b, team-c, team-d`},
	} {
		out, err := e.run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allot %s: %v (printed %q), want %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
	if got := e.names(t); len(got) != 0 {
		t.Fatalf("refused submissions left workloads: %v", got)
	}
	// A gang whose pods admission refuses says so, not "has 1 so far".
	e.kubectlJob(t, "wide", "team-d", 100, 8)
	e.workload(t, "wide", func(w inspect.Workload) bool {
		return strings.HasPrefix(w.Reason, "pods refused: ") && strings.Contains(w.Reason, "needs 800 GPUs at once (100 pods × 8) but the cluster has 16")
	})
	root := NewRoot()
	var version bytes.Buffer
	root.SetOut(&version)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(version.String(), "allot version ") {
		t.Fatalf("--version: %v, printed %q", err, version.String())
	}
	if out := e.must(t, "submit", "--help"); strings.Contains(out, "--version") {
		t.Fatalf("a Kubernetes component's --version flag leaks into the help:\n%s", out)
	}
	// A default queue makes -p optional.
	e.must(t, "config", "queue", "team-a")
	if out := e.must(t, "submit", "x", "-i", "a", "--dry-run"); !strings.Contains(out, "allot.dev/queue: team-a") {
		t.Fatalf("dry run with the default queue:\n%s", out)
	}
	// -g 0 is a job without GPUs, not "not a whole number".
	if out := e.must(t, "submit", "cpu-only", "-p", "team-a", "-i", "a", "-g", "0", "--dry-run"); strings.Contains(out, "nvidia.com/gpu") {
		t.Fatalf("-g 0 asked for GPUs:\n%s", out)
	}
	// No kubeconfig: where it was looked for and how to get one, not client-go's
	// KUBERNETES_MASTER.
	root = NewRoot()
	root.SetArgs([]string{"list", "--kubeconfig", filepath.Join(e.Dir, "no-such-kubeconfig")})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.ExecuteContext(e.Ctx); err == nil || strings.Contains(err.Error(), "KUBERNETES_MASTER") ||
		!strings.Contains(err.Error(), "no kubeconfig at "+filepath.Join(e.Dir, "no-such-kubeconfig")+"; allot up starts a cluster") {
		t.Fatalf("no kubeconfig: %v", err)
	}
	// No cluster: the kubeconfig and server tried are named.
	root = NewRoot()
	root.SetArgs([]string{"list", "--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify"})
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.ExecuteContext(e.Ctx); err == nil || !strings.Contains(err.Error(), "no cluster reachable at https://127.0.0.1:1") {
		t.Fatalf("unreachable cluster: %v", err)
	}
}

// TestSuspendResumeQueuesAndLogs: a training job suspended gives its GPU back and resumes;
// an admin creates, edits and deletes a queue, and the API server's refusal of a bad one
// reaches the user; top queues shows the queue; logs on a simulated node says why there
// are none.
func TestSuspendResumeQueuesAndLogs(t *testing.T) {
	e := startCLI(t)
	e.must(t, "queue", "create", "research", "--quota", "2", "--limit", "4", "--interactive-time-limit", "4h")
	if _, err := e.run(t, "queue", "create", "broken", "--quota", "4", "--limit", "2"); err == nil || !strings.Contains(err.Error(), "limit must be at least quota") {
		t.Fatalf("limit below quota: %v", err)
	}
	// edit sends what its flags change and nothing else: a field as someone wrote it
	// ("90m") stays written so, and --limit none removes the cap.
	if _, err := e.Dyn.Resource(kubetest.Queues).Patch(e.Ctx, "research", types.MergePatchType, []byte(`{"spec":{"reclaimMinRuntime":"90m"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.must(t, "queue", "edit", "research", "--quota", "3")
	raw, err := e.Dyn.Resource(kubetest.Queues).Get(e.Ctx, "research", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if spec, _ := raw.Object["spec"].(map[string]any); spec["reclaimMinRuntime"] != "90m" || fmt.Sprint(spec["gpu"]) != "map[limit:4 quota:3]" {
		t.Fatalf("after queue edit --quota 3: spec %v", spec)
	}
	e.must(t, "queue", "edit", "research", "--limit", "none")
	if q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "research", metav1.GetOptions{}); err != nil || q.Spec.GPU.Limit != nil || q.Spec.GPU.Quota != 3 {
		t.Fatalf("after queue edit --limit none: %v %+v", err, q.Spec.GPU)
	}
	if out := e.must(t, "queues"); !strings.Contains(out, "research") {
		t.Fatalf("queues:\n%s", out)
	}
	e.must(t, "submit", "sweep", "-p", "research", "-i", "pytorch", "-g", "1")
	e.workload(t, "sweep", running(1))
	e.WaitFor(t, "top queues", func() (bool, string) {
		out := e.must(t, "top", "queues")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 4 && f[0] == "research" && f[1] == "1" && f[3] == "3" {
				return true, out
			}
		}
		return false, out
	})
	if _, err := e.run(t, "logs", "sweep"); err == nil || !strings.Contains(err.Error(), "a simulated node of allot up, and simulated nodes run no containers") ||
		strings.Contains(err.Error(), "preferred addresses") {
		t.Fatalf("logs on a simulated node: %v", err)
	}
	e.must(t, "suspend", "sweep")
	e.workload(t, "sweep", func(w inspect.Workload) bool { return w.Status == "Suspended" && w.Running == 0 })
	e.must(t, "resume", "sweep")
	e.workload(t, "sweep", running(1))
	// A queue with work is not deleted, unless forced; an unknown or cyclic parent is refused
	// by the API server.
	if _, err := e.run(t, "queue", "delete", "research"); err == nil || !strings.Contains(err.Error(), "refused: admission webhook \"queues.validate.allot.dev\" denied the request: queue research still holds 1 pod (default/sweep-") {
		t.Fatalf("deleting a busy queue: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "create", "orphan", "--quota", "1", "--parent", "nosuch"}, `spec.parent: queue "nosuch" does not exist; queues: research, team-a, team-b, team-c, team-d`},
		{[]string{"queue", "edit", "research", "--parent", "research"}, "spec.parent: queue research cannot be its own parent"},
	} {
		if _, err := e.run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("allot %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	e.must(t, "queue", "create", "dept", "--quota", "4", "--reclaim-min-runtime", "10m", "--preempt-min-runtime", "0s")
	e.must(t, "queue", "create", "lab", "--quota", "6", "--limit", "8", "--parent", "dept")
	// The tree, children under their parent, and quotas that promise more than there is.
	tree := e.must(t, "queues")
	for _, want := range []string{"\ndept ", "\n  lab ", "warning: the quotas of dept's child queues add up to 6 GPUs, more than its own quota of 4",
		"warning: the top-level quotas add up to 23 GPUs, more than the cluster's 16", "(bar width: the cluster's 16 GPUs)"} {
		if !strings.Contains(tree, want) {
			t.Fatalf("queues lacks %q:\n%s", want, tree)
		}
	}
	if f := strings.Fields(tree[strings.Index(tree, "\n  lab "):]); f[1] != "6" || f[2] != "8" {
		t.Fatalf("lab's QUOTA and LIMIT: %v", f[:3])
	}
	if _, err := e.run(t, "queue", "edit", "dept", "--parent", "lab"); err == nil || !strings.Contains(err.Error(), "spec.parent: lab makes a cycle of parents: dept → lab → dept") {
		t.Fatalf("a cycle of parents: %v", err)
	}
	if _, err := e.run(t, "queue", "delete", "dept"); err == nil || !strings.Contains(err.Error(), "queue dept has child queues lab: delete or move them first") {
		t.Fatalf("deleting a parent: %v", err)
	}
	e.must(t, "queue", "delete", "lab", "dept")
	if out := e.must(t, "queue", "delete", "--force", "research"); !strings.Contains(out, "queue research deleted") {
		t.Fatalf("forced delete said %q", out)
	}
	// The job whose queue went keeps running, outside every queue's share.
	e.workload(t, "sweep", running(1))
	e.must(t, "delete", "sweep")
	if _, err := e.run(t, "queue", "delete", "research"); err == nil || !strings.Contains(err.Error(), `queue "research" does not exist; queues: team-a`) {
		t.Fatalf("deleting a missing queue: %v", err)
	}
}

// kubectlJob creates a batch Job as kubectl apply would: no label of allot submit, only the
// queue, with parallelism pods of gpus GPUs each.
func (e *cliEnv) kubectlJob(t *testing.T, name, queue string, parallelism int32, gpus int64) {
	t.Helper()
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelQueue: queue}},
		Spec: batchv1.JobSpec{Parallelism: &parallelism, Completions: &parallelism, Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "pytorch", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}}}
	if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// names lists the workloads allot list shows, as kind/name.
func (e *cliEnv) names(t *testing.T) []string {
	t.Helper()
	var ws []inspect.Workload
	if err := json.Unmarshal([]byte(e.must(t, "list", "-o", "json")), &ws); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range ws {
		out = append(out, w.Ref())
	}
	return out
}

// TestKubectlMadeWorkloads: docs/cluster.md's examples applied with kubectl (a Job of two
// workers with its Service, a bare pod, a Deployment of two replicas) are listed under
// their own names and kinds, described with their own events only, suspended, resumed and
// deleted like the workloads of allot submit; a Deployment stays one workload through a
// rollout; a name is matched whole, never as a prefix; a name taken is refused to submit.
func TestKubectlMadeWorkloads(t *testing.T) {
	e := startCLI(t)
	dir := filepath.Join("..", "..", "examples", "kube")
	e.Apply(t, filepath.Join(dir, "distributed.yaml")) // Job ddp: 2 × 4 GPUs, team-d
	e.Apply(t, filepath.Join(dir, "pod.yaml"))         // Pod train-resnet: 2 GPUs, team-a
	e.Apply(t, filepath.Join(dir, "inference.yaml"))   // Deployment llm: 2 × 1 GPU, team-c
	for name, want := range map[string]struct {
		kind, typ, queue string
		pods             int
	}{"ddp": {"Job", "distributed", "team-d", 2}, "train-resnet": {"Pod", "train", "team-a", 1}, "llm": {"Deployment", "inference", "team-c", 2}} {
		w := e.workload(t, name, running(want.pods))
		if w.Kind != want.kind || w.Type != want.typ || w.Queue != want.queue {
			t.Errorf("%s listed as %s, %s, queue %s; want %s, %s, queue %s", name, w.Kind, w.Type, w.Queue, want.kind, want.typ, want.queue)
		}
	}
	if got := e.names(t); !slices.Equal(got, []string{"Job/ddp", "Deployment/llm", "Pod/train-resnet"}) {
		t.Fatalf("listed %v, want the three workloads by their own names", got)
	}

	// Names are whole: "ll" is not llm, and llm's story is its own.
	if _, err := e.run(t, "describe", "ll"); err == nil || !strings.Contains(err.Error(), `no workload "ll" in namespace default; there are: Job/ddp, Deployment/llm, Pod/train-resnet`) {
		t.Fatalf("describe ll: %v", err)
	}
	// logs finds the pod of a kubectl-made workload (the simulated nodes have no kubelet logs).
	if _, err := e.run(t, "logs", "train-resnet"); err == nil || !strings.Contains(err.Error(), "no logs for train-resnet") {
		t.Fatalf("logs train-resnet: %v", err)
	}
	d := e.must(t, "describe", "llm")
	if !strings.Contains(d, "Kind:       Deployment") || !strings.Contains(d, "Scheduled") || strings.Contains(d, "ddp") || strings.Contains(d, "train-resnet") {
		t.Fatalf("describe llm:\n%s", d)
	}
	if _, err := e.run(t, "submit", "llm", "-p", "team-a", "-i", "vllm", "-g", "1"); err == nil ||
		!strings.Contains(err.Error(), "a workload named llm already exists in namespace default: Deployment/llm (inference, running, queue team-c)") {
		t.Fatalf("submitting over llm: %v", err)
	}

	// A rollout makes a second ReplicaSet; the workload is still the one Deployment.
	patch := `{"spec":{"template":{"metadata":{"annotations":{"rollout":"2"}}}}}`
	if _, err := e.Client.AppsV1().Deployments("default").Patch(e.Ctx, "llm", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "a second ReplicaSet", func() (bool, string) {
		l, err := e.Client.AppsV1().ReplicaSets("default").List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 2, fmt.Sprintf("%d ReplicaSets", len(l.Items))
	})
	if got := e.names(t); !slices.Equal(got, []string{"Job/ddp", "Deployment/llm", "Pod/train-resnet"}) {
		t.Fatalf("during the rollout: listed %v", got)
	}

	// Suspend and resume: a Job by its switch, a Deployment by its replicas, a bare pod not at all.
	if out := e.must(t, "suspend", "ddp"); !strings.Contains(out, "Job default/ddp suspended") {
		t.Fatalf("suspend ddp said %q", out)
	}
	e.workload(t, "ddp", func(w inspect.Workload) bool { return w.Status == "Suspended" && w.Running == 0 })
	if out := e.must(t, "resume", "ddp"); !strings.Contains(out, "Job default/ddp resumed") {
		t.Fatalf("resume ddp said %q", out)
	}
	e.workload(t, "ddp", running(2))
	if _, err := e.run(t, "resume", "ddp"); err == nil || !strings.Contains(err.Error(), "ddp is not suspended") {
		t.Fatalf("resuming a running job: %v", err)
	}
	if _, err := e.run(t, "suspend", "train-resnet"); err == nil || !strings.Contains(err.Error(), "train-resnet is a Pod: it cannot be suspended") {
		t.Fatalf("suspending a bare pod: %v", err)
	}
	if _, err := e.run(t, "resume", "train-resnet"); err == nil || !strings.Contains(err.Error(), "train-resnet is a Pod: it cannot be resumed") {
		t.Fatalf("resuming a bare pod: %v", err)
	}
	e.must(t, "suspend", "llm")
	e.workload(t, "llm", func(w inspect.Workload) bool { return w.Status == "Suspended" && w.Running == 0 })
	e.must(t, "resume", "llm")
	e.workload(t, "llm", running(2))

	// Delete says what went, and each is gone with its pods.
	for name, want := range map[string]string{"ddp": "deleted Job default/ddp, 2 pods", "train-resnet": "deleted Pod default/train-resnet",
		"llm": "deleted Deployment default/llm, 2 pods"} {
		if out := e.must(t, "delete", name); !strings.Contains(out, want) {
			t.Errorf("delete %s said %q, want %q", name, out, want)
		}
	}
	e.WaitFor(t, "every pod gone", func() (bool, string) {
		n := len(e.Pods(t, "default"))
		return n == 0 && len(e.names(t)) == 0, fmt.Sprintf("%d pods, workloads %v", n, e.names(t))
	})
	if _, err := e.run(t, "delete", "llm"); err == nil || !strings.Contains(err.Error(), `no workload "llm"`) {
		t.Fatalf("deleting what is gone: %v", err)
	}
}
