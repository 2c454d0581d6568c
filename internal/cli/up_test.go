package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	allotclient "github.com/allot-dev/allot/kube/client"
)

// syncBuffer lets the test read what the command prints while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// upRun is `allot up` running in the test, with what it printed.
type upRun struct {
	ctx        context.Context
	out        *syncBuffer
	kubeconfig string
	dataDir    string
}

// startUp runs `allot up` with args until the test ends (then Ctrl-C, and it must stop
// cleanly), waiting until it prints its kubeconfig.
func startUp(t *testing.T, args ...string) *upRun {
	t.Helper()
	dir := t.TempDir()
	kc := filepath.Join(dir, "config")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := NewRoot()
	out := &syncBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	dataDir := filepath.Join(dir, "state")
	cmd.SetArgs(append([]string{"up", "--data-dir", dataDir, "--kubeconfig", kc,
		"--dashboard-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("allot up stopped with %v", err)
		}
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "kubeconfig: "+kc), nil
	})
	if err != nil {
		t.Fatalf("no kubeconfig path printed: %s", out.String())
	}
	return &upRun{ctx: ctx, out: out, kubeconfig: kc, dataDir: dataDir}
}

// TestUpDemo runs `allot up --demo` and uses its kubeconfig as a user would: nodes and
// queues are there, team-a borrows beyond its quota of 4, and Ctrl-C stops it cleanly.
func TestUpDemo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := l.Addr().String()
	l.Close()
	up := startUp(t, "--demo", "--metrics-address", metrics, "--topology", "rack,block", "--fair-share-history", "1:24h") // the last flag wins
	ctx, kc := up.ctx, up.kubeconfig
	// Once ready, the demo says what to try next: three commands the CLI has.
	next := up.out.String()
	if i := strings.Index(next, "Try next"); i < 0 {
		t.Fatalf("allot up --demo printed no next steps:\n%s", next)
	} else {
		next = next[i:]
	}
	tried := 0
	for _, line := range strings.Split(next, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "allot" {
			if c, _, err := NewRoot().Find(f[1:]); err != nil || c.Name() != f[1] {
				t.Errorf("next step %q is not a command: %v", line, err)
			}
			tried++
		}
	}
	if tried != 3 {
		t.Errorf("%d next steps, want 3:\n%s", tried, next)
	}
	// A second allot up on the same data directory says who holds it, at once, instead of
	// hanging on etcd's lock.
	second := NewRoot()
	second.SetOut(io.Discard)
	second.SetErr(io.Discard)
	second.SetArgs([]string{"up", "--data-dir", up.dataDir, "--dashboard-address", "", "--metrics-address", "127.0.0.1:0"})
	secondCtx, cancelSecond := context.WithTimeout(ctx, 30*time.Second)
	err = second.ExecuteContext(secondCtx)
	cancelSecond()
	if err == nil || !strings.Contains(err.Error(), "holds "+up.dataDir+" (another allot up") || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("a second allot up on %s: %v", up.dataDir, err)
	}
	if !strings.Contains(up.out.String(), "metrics: http://"+metrics+"/metrics") {
		t.Fatalf("metrics not at --metrics-address %s:\n%s", metrics, up.out.String())
	}
	if resp, err := http.Get("http://" + metrics + "/metrics"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics at %s: %v", metrics, err)
	} else {
		resp.Body.Close()
	}
	if _, err := os.Stat(kc); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 || nodes.Items[0].Labels["nvidia.com/gpu.product"] == "" {
		t.Fatalf("nodes: %v %+v", err, nodes)
	}
	qs, err := dynamic.NewForConfigOrDie(rc).Resource(schema.GroupVersionResource{Group: "allot.dev", Version: "v1alpha1", Resource: "queues"}).List(ctx, metav1.ListOptions{})
	if err != nil || len(qs.Items) != 4 {
		t.Fatalf("queues: %v", err)
	}
	// --topology rack,block: two nodes share rack-1 and block-1, and the Topology lists the
	// block first.
	topo, err := allotclient.NewForConfigOrDie(rc).AllotV1alpha1().Topologies().Get(ctx, "default", metav1.GetOptions{})
	if err != nil || len(topo.Spec.Levels) != 2 || topo.Spec.Levels[0].Name != "block" || topo.Spec.Levels[1].NodeLabel != "topology.allot.dev/rack" {
		t.Fatalf("topology: %v %+v", err, topo)
	}
	for _, n := range nodes.Items {
		if n.Labels["topology.allot.dev/rack"] != "rack-1" || n.Labels["topology.allot.dev/block"] != "block-1" {
			t.Errorf("node %s labels %v, want rack-1 in block-1", n.Name, n.Labels)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 12, nil
	})
	if err != nil {
		t.Fatal("the demo's 12 pods (10 of team-a, beyond its quota of 4, and 2 of team-b) did not all run")
	}
	// The next steps, run exactly as printed, show what they say.
	say := map[string]string{}
	holds10 := regexp.MustCompile(`team-a\s.*\b10\b`)
	for _, line := range strings.Split(next, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "allot" {
			run := func() {
				root := NewRoot()
				var b bytes.Buffer
				root.SetOut(&b)
				root.SetErr(&b)
				root.SetArgs(f[1:])
				if err := root.ExecuteContext(ctx); err != nil {
					t.Fatalf("%s: %v\n%s", line, err, b.String())
				}
				say[f[1]] = b.String()
			}
			run()
			// The queues' status trails the pods by a cycle or two (a queue's status is
			// written at most once a second): allot queues, run again until it settles.
			for deadline := time.Now().Add(30 * time.Second); f[1] == "queues" && !holds10.MatchString(say["queues"]) && time.Now().Before(deadline); {
				time.Sleep(500 * time.Millisecond)
				run()
			}
			if f[1] != "submit" {
				continue
			}
			// The gang runs whole: 4 GPUs free, 4 taken back from team-a.
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, nil
				}
				llama, teamA := 0, 0
				for _, p := range pods.Items {
					if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
						continue
					}
					switch p.Labels["allot.dev/queue"] {
					case "team-d":
						llama++
					case "team-a":
						teamA++
					}
				}
				return llama == 2 && teamA <= 6, nil
			})
			if err != nil {
				t.Fatalf("%s: the gang of 2 × 4 did not run beside team-a's pods taken back", line)
			}
		}
	}
	if q := say["queues"]; !holds10.MatchString(q) {
		t.Errorf("allot queues does not show team-a holding 10:\n%s", q)
	}
	t.Logf("allot describe llama:\n%s", say["describe"])
	if d := say["describe"]; !strings.Contains(d, "Made room") || !strings.Contains(d, "reclaimed by queue team-d for job default/llama") {
		t.Errorf("allot describe llama does not say what was reclaimed from team-a:\n%s", d)
	}
}

// TestUpFailGPU runs `allot up --fail-gpu dgx-1/2`: the simulated node's agent reports the
// failure through the same path as on a real node, `allot top nodes` shows it, and the
// agents' metrics are served under DCGM exporter's names.
func TestUpFailGPU(t *testing.T) {
	up := startUp(t, "--nodes", "1", "--gpus-per-node", "4", "--fail-gpu", "dgx-1/2")
	metrics := ""
	for _, line := range strings.Split(up.out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "metrics: "); ok {
			metrics = rest
		}
	}
	var top string
	err := wait.PollUntilContextTimeout(up.ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cmd := NewRoot()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"top", "nodes", "--kubeconfig", up.kubeconfig})
		if err := cmd.ExecuteContext(up.ctx); err != nil {
			return false, nil
		}
		top = out.String()
		return strings.Contains(top, "FAILED: XID 79 (GPU has fallen off the bus)"), nil
	})
	if err != nil {
		t.Fatalf("allot top nodes never showed GPU 2 failed:\n%s", top)
	}
	for _, line := range strings.Split(top, "\n") {
		if strings.Contains(line, "FAILED") && !strings.HasPrefix(strings.TrimSpace(line), "2 ") {
			t.Errorf("a GPU other than 2 shown failed: %q", line)
		}
	}
	resp, err := http.Get(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page bytes.Buffer
	_, _ = page.ReadFrom(resp.Body)
	for _, want := range []string{`DCGM_FI_DEV_GPU_UTIL{Hostname="dgx-1",UUID="GPU-`, `allot_agent_gpu_healthy{Hostname="dgx-1",UUID="GPU-`} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(page.String(), `DCGM_FI_DEV_XID_ERRORS{Hostname="dgx-1"`) || !regexpMatch(`DCGM_FI_DEV_XID_ERRORS\{[^}]*gpu="2"[^}]*\} 79`, page.String()) {
		t.Errorf("the last XID of GPU 2 is not 79 in the metrics")
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// A --fail-gpu that names no simulated GPU is refused before anything starts.
// TestUpRefusesBadHistoryAndTopology: each flag names what it takes, before anything
// starts.
func TestUpRefusesBadHistoryAndTopology(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--fair-share-history", "strong"}, `--fair-share-history "strong" is not allowed: STRENGTH[:HALF-LIFE]`},
		{[]string{"--fair-share-history", "1:forever"}, "the half-life after the colon is a positive duration"},
		{[]string{"--topology", "rack,rack"}, `--topology "rack,rack" is not allowed: distinct level names, narrowest first`},
		{[]string{"--mig-gpus", "2"}, "--mig-gpus 2 is not allowed: with --dra, from 0 to --gpus-per-node (8)"},
		{[]string{"--dra", "--mig-gpus", "9"}, "--mig-gpus 9 is not allowed"},
		{[]string{"--dra", "--sharing", "mps"}, "--dra with --sharing or --fail-gpu is not offered"},
		{[]string{"--with", "lws,kueue"}, `--with: controllers "kueue" is not one Allot runs: one of jobset, lws, ray, trainer`},
	} {
		cmd := NewRoot()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append([]string{"up", "--data-dir", t.TempDir()}, c.args...))
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allot up %v: %v, want %q", c.args, err, c.want)
		}
	}
	if s, h, err := parseHistory("0.5:72h"); err != nil || s != 0.5 || h != 72*time.Hour {
		t.Errorf("0.5:72h read as %v %v %v", s, h, err)
	}
}

func TestUpRefusesAFailGPUItDoesNotHave(t *testing.T) {
	cmd := NewRoot()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"up", "--nodes", "2", "--fail-gpu", "dgx-3/0", "--data-dir", t.TempDir()})
	err := cmd.Execute()
	want := `--fail-gpu "dgx-3/0" is not allowed: NODE/INDEX with NODE one of dgx-1 … dgx-2 and INDEX from 0 to 7`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestUpDRA runs `allot up --dra --demo`: the demo's work claims its GPUs through DRA
// ResourceClaims on nodes that publish them in ResourceSlices; allot top nodes shows the
// devices and who holds them; allot submit claims whole GPUs by itself there and says
// that a fraction is not offered on DRA.
func TestUpDRA(t *testing.T) {
	up := startUp(t, "--dra", "--demo", "--mig-gpus", "1")
	ctx := up.ctx
	rc, err := clientcmd.BuildConfigFromFlags("", up.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	run := func(args ...string) (string, error) {
		cmd := NewRoot()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append(args, "--kubeconfig", up.kubeconfig))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	var top string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && len(p.Spec.ResourceClaims) > 0 && p.Spec.Containers[0].Resources.Limits.Name("nvidia.com/gpu", "").IsZero() {
				running++
			}
		}
		top, _ = run("top", "nodes")
		return running == 12 && strings.Count(top, "team-a-train-") >= 10, nil
	})
	if err != nil {
		t.Fatalf("the demo's 12 pods did not all run on claims, or top nodes does not show them:\n%s", top)
	}
	if !strings.Contains(top, "[DRA]") || !strings.Contains(top, "gpu-1") || !strings.Contains(top, "MIG") || !strings.Contains(top, "Allocated/Total GPUs: 12/16") {
		t.Fatalf("allot top nodes on DRA nodes:\n%s", top)
	}
	// The dashboard shows the same: DRA nodes, their devices, the pods holding them.
	dash := ""
	for _, line := range strings.Split(up.out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "dashboard: "); ok {
			dash = strings.TrimSuffix(strings.Fields(rest)[0], "/")
		}
	}
	var state struct {
		Nodes []struct {
			Name string `json:"name"`
			DRA  bool   `json:"dra"`
			GPUs []struct {
				Device  string `json:"device"`
				Holders []struct {
					Pod string `json:"pod"`
				} `json:"holders"`
			} `json:"gpus"`
		} `json:"nodes"`
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get(dash + "/api/state")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&state) != nil {
			return false, nil
		}
		held := 0
		for _, n := range state.Nodes {
			for _, g := range n.GPUs {
				if n.DRA && strings.HasPrefix(g.Device, "gpu-") && len(g.Holders) > 0 {
					held++
				}
			}
		}
		return len(state.Nodes) == 2 && held == 12, nil
	})
	if err != nil {
		t.Fatalf("the dashboard at %s does not show the 12 claimed GPUs of 2 DRA nodes: %+v", dash, state)
	}
	if out, err := run("describe", "team-a-train-0"); err != nil || !strings.Contains(out, "GPUs:       1 allocated") {
		t.Fatalf("allot describe of a pod on a claim: %v\n%s", err, out)
	}
	out, err := run("submit", "extra", "-p", "team-c", "-i", "pytorch/pytorch", "-g", "2")
	if err != nil {
		t.Fatalf("allot submit -g 2 on DRA nodes: %v\n%s", err, out)
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates("default").Get(ctx, "extra", metav1.GetOptions{}); err != nil {
		t.Fatalf("allot submit made no ResourceClaimTemplate on DRA nodes: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		claims, err := client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range claims.Items {
			if strings.HasPrefix(c.Name, "extra-") && c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) == 2 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the submitted workload's claim of 2 GPUs was never allocated")
	}
	// The demo's work and extra hold every whole GPU: extra goes, and frees its two.
	if out, err := run("delete", "extra"); err != nil || !strings.Contains(out, "ResourceClaimTemplate extra") {
		t.Fatalf("allot delete of a DRA workload: %v\n%s", err, out)
	}
	// Half a GPU is claimed as half its memory, of a GPU claims may share.
	if out, err := run("submit", "half", "-p", "team-c", "-i", "pytorch/pytorch", "-g", "0.5"); err != nil {
		t.Fatalf("allot submit -g 0.5 on DRA nodes: %v\n%s", err, out)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		claims, err := client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range claims.Items {
			if strings.HasPrefix(c.Name, "half-") && c.Status.Allocation != nil {
				r := c.Status.Allocation.Devices.Results[0]
				return r.ShareID != nil && memoryOf(r.ConsumedCapacity) == 40<<30, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the half GPU's claim was never allocated as a 40Gi share of a GPU")
	}
}

// memoryOf reads the memory of a consumed capacity, in bytes.
func memoryOf(c map[resourcev1.QualifiedName]resource.Quantity) int64 {
	q := c["memory"]
	return q.Value()
}
