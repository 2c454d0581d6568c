package cli

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/browsertest"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/inspect"
)

// allot top nodes, for GPUs in MIG mode: each such GPU's row says MIG and names its
// holders' instances, and a table under the nodes' lists every instance by place with who
// holds it, idle ones, the one being made for a waiting pod, and the slices a GPU Allot lays
// out still has free (a fixed layout's are not laid out).
func TestTopNodesShowsMIGLayouts(t *testing.T) {
	fixed := &inspect.MIGLayout{Model: "A100-80GB", MemorySlices: 8, MemoryMi: 81920, Instances: []inspect.MIGInstance{
		{Profile: "3g.40gb", Start: 0, Slices: 4, Share: 0.428, Pod: "ml/train"},
		{Profile: "2g.20gb", Start: 4, Slices: 2, Share: 0.285},
		{Profile: "1g.10gb", Start: 6, Slices: 1, Share: 0.142, InUse: true}}}
	dyn := &inspect.MIGLayout{Model: "A100-80GB", Dynamic: true, MemorySlices: 8, MemoryMi: 81920, Instances: []inspect.MIGInstance{
		{Profile: "1g.10gb", Start: 0, Slices: 1, Share: 0.142, Pod: "ml/nb"},
		{Profile: "3g.40gb", Start: 4, Slices: 4, Share: 0.428, Pod: "ml/wait", Making: true}}}
	nodes := []inspect.Node{
		{Name: "dgx-1", Model: "H100", Allocated: 1, GPUs: []inspect.GPU{{Index: 0, Used: 1, Holders: []inspect.Holder{{Pod: "ml/big", Share: 1}}}}},
		{Name: "mig-1", Model: "A100", Allocated: 0.428, GPUs: []inspect.GPU{{Index: 0, Used: 0.428, Holders: []inspect.Holder{{Pod: "ml/train", Share: 0.428}}, MIG: fixed}}},
		{Name: "migdyn-1", Model: "A100", Allocated: 0.142, GPUs: []inspect.GPU{{Index: 0, Used: 0.142, Holders: []inspect.Holder{{Pod: "ml/nb", Share: 0.142}}, MIG: dyn}}},
	}
	var out bytes.Buffer
	if err := printNodes(&out, nodes); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	lines := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		lines[regexpSpaces(l)] = true
	}
	for _, want := range []string{
		"0 MIG [████······] 0.428 - 0 GiB ml/train (3g.40gb@0)",
		"MIG: GPUs given out as instances (PROFILE@SLICE: the first memory slice it takes)",
		"NODE GPU LAYOUT INSTANCE HELD BY",
		"mig-1 0 fixed, A100-80GB 3g.40gb@0 ml/train",
		"2g.20gb@4 idle",
		"1g.10gb@6 in use, by no pod of Allot's",
		"slices 7 not laid out",
		"migdyn-1 0 dynamic, A100-80GB 1g.10gb@0 ml/nb",
		"3g.40gb@4 being made for ml/wait",
		"slices 1-3 free to lay out",
		"Allocated/Total GPUs: 1.57/3 (52%)",
	} {
		if !lines[want] {
			t.Errorf("allot top nodes lacks the line %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "dgx-1 0") || strings.Index(text, "MIG: GPUs") < strings.Index(text, "Allocated/Total") {
		t.Errorf("the MIG table lists a whole GPU, or stands above the nodes' totals:\n%s", text)
	}
	out.Reset()
	if err := printNodes(&out, nodes[:1]); err != nil || strings.Contains(out.String(), "MIG") {
		t.Errorf("a cluster without MIG shows a MIG table (%v):\n%s", err, out.String())
	}
}

// allot describe of a workload with a dynamic fraction: what each pod was last measured to
// hold against its request and limit, and what of it is past the request.
func TestDescribeShowsGPUMemoryPastTheRequest(t *testing.T) {
	used := int64(12800)
	var out bytes.Buffer
	printGPUMemory(&out, []inspect.Pod{
		{Name: "burst-0", GPUMemory: &inspect.GPUMemory{RequestMi: 10240, LimitMi: 40960, UsedMi: &used}},
		{Name: "frac-0", GPUMemory: &inspect.GPUMemory{Fraction: 0.25, RequestMi: 20480, FractionLimit: 0.75, LimitMi: 61440}},
		{Name: "plain-0"},
	})
	text := out.String()
	lines := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		lines[regexpSpaces(l)] = true
	}
	for _, want := range []string{
		"POD USED REQUEST LIMIT PAST REQUEST",
		"burst-0 12.5 GiB 10 GiB 40 GiB 2.5 GiB",
		"frac-0 not measured yet 0.25 of a GPU (20 GiB) 0.75 of a GPU (60 GiB) -",
	} {
		if !lines[want] {
			t.Errorf("describe lacks the line %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "plain-0") {
		t.Errorf("a pod without a limit is listed:\n%s", text)
	}
	out.Reset()
	if printGPUMemory(&out, []inspect.Pod{{Name: "plain-0"}}); out.Len() != 0 {
		t.Errorf("a workload without limits shows a GPU memory table:\n%s", out.String())
	}
}

// allot submit's MIG and limit flags, without a cluster (--dry-run): what the pod asks,
// and each refusal naming the flag, before anything is made.
func TestSubmitMIGAndLimitFlags(t *testing.T) {
	dry := func(args ...string) (string, error) {
		return runAllot(t.Context(), "", append([]string{"submit", "x", "-p", "q", "-i", "img", "--dry-run"}, args...)...)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--mig", "3g.40gb"}, []string{"nvidia.com/mig-3g.40gb: \"1\""}},
		{[]string{"--mig", "1g.10gb", "--gpu-count", "2"}, []string{"nvidia.com/mig-1g.10gb: \"2\""}},
		{[]string{"--mig-dynamic", "smallest", "-g", "0.25"}, []string{"allot.dev/mig: smallest", "allot.dev/gpu-fraction: \"0.25\""}},
		{[]string{"--mig-dynamic", "3g.40gb", "--gpu-api", "auto"}, []string{"allot.dev/mig: 3g.40gb"}},
		{[]string{"--gpu-memory", "10Gi", "--gpu-memory-limit", "40Gi"}, []string{"allot.dev/gpu-memory: 10Gi", "allot.dev/gpu-memory-limit: 40Gi"}},
		{[]string{"-g", "0.25", "--gpu-fraction-limit", "0.75"}, []string{"allot.dev/gpu-fraction-limit: \"0.75\""}},
	} {
		out, err := dry(c.args...)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the objects lack %q:\n%s", c.args, w, out)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mig", "3g.40gb", "-g", "2"}, "-g or --gpu-memory with --mig 3g.40gb is not allowed: the instance is the request; for several instances give --gpu-count N"},
		{[]string{"--mig", "3g.40gb", "--accelerator", "ascend"}, "--mig with --accelerator ascend is not allowed: MIG instances are NVIDIA GPUs only"},
		{[]string{"--mig", "3g.40gb", "--gpu-compute", "30"}, "--gpu-compute with --mig is not allowed"},
		{[]string{"--mig", "3g.40gb", "--gpu-api", "dra"}, "--mig through DRA (device class gpu.nvidia.com) is not offered"},
		{[]string{"--mig", "40gb"}, `--mig "40gb" is not allowed: a MIG profile <compute>g.<memory>gb, such as 1g.10gb or 3g.40gb`},
		{[]string{"--gpu-memory-limit", "40Gi"}, "--gpu-memory-limit 40Gi needs a slice of one GPU to go past: --gpu-memory (such as 10Gi) or -g between 0 and 1"},
		{[]string{"--gpu-memory", "10Gi", "--gpu-memory-limit", "5Gi"}, "--gpu-memory-limit 5Gi is less than --gpu-memory 10Gi"},
		{[]string{"-g", "0.25", "--gpu-count", "2", "--gpu-fraction-limit", "0.5"}, "--gpu-fraction-limit 0.5 with --gpu-count 2 is not allowed"},
	} {
		if out, err := dry(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (printed %q), want %q", c.args, err, out, c.want)
		}
	}
}

// allot up with a node of whole GPUs, one whose GPU has a fixed MIG layout (3g.40gb +
// 2g.20gb + 1g.10gb) and one whose GPU Allot lays out, used as a person would: allot submit
// --mig 3g.40gb runs on the fixed layout's 3g, --mig-dynamic 1g.10gb on an instance Allot
// had made, --mig 4g.40gb is refused before anything exists naming what the nodes give, a
// dynamic fraction runs and allot describe shows its request and limit; allot top nodes and
// the dashboard's nodes page show both layouts, who holds which instance and what is idle.
func TestSubmitAndShowMIGOnUp(t *testing.T) {
	b := browsertest.Start(t, 1280, 900)
	up := startUp(t, "--nodes", "1", "--mig", "1x1", "--mig-dynamic", "1x1")
	ctx, kc := up.ctx, up.kubeconfig
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "ml"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 4}}}
	if _, err := allotclient.NewForConfigOrDie(rc).AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	submit := func(name string, args ...string) {
		t.Helper()
		if out, err := runAllot(ctx, kc, append([]string{"submit", name, "-p", "ml", "-i", "pytorch"}, args...)...); err != nil {
			t.Fatalf("allot submit %s %v: %v\n%s", name, args, err, out)
		}
	}
	out, err := runAllot(ctx, kc, "submit", "big", "-p", "ml", "-i", "pytorch", "--mig", "4g.40gb")
	if err == nil || !strings.Contains(err.Error(), "--mig 4g.40gb: no node of the cluster's nodes has a 4g.40gb instance in a fixed layout") ||
		!strings.Contains(err.Error(), "Allot lays out MIG on migdyn-1 (A100-80GB: ") || !strings.Contains(err.Error(), "fixed layouts offer mig-1 (1g.10gb ×1, 2g.20gb ×1, 3g.40gb ×1)") {
		t.Errorf("--mig 4g.40gb on a cluster whose fixed layouts have none: %v\n%s", err, out)
	}
	submit("fixed", "--mig", "3g.40gb")
	submit("dyn", "--mig-dynamic", "1g.10gb")
	submit("burst", "--gpu-memory", "10Gi", "--gpu-memory-limit", "40Gi")
	client := kubernetes.NewForConfigOrDie(rc)
	for name, node := range map[string]string{"fixed": "mig-1", "dyn": "migdyn-1", "burst": "dgx-1"} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "allot.dev/workload=" + name})
			return err == nil && len(pods.Items) == 1 && pods.Items[0].Spec.NodeName == node && string(pods.Items[0].Status.Phase) == "Running", nil
		})
		if err != nil {
			list, _ := runAllot(ctx, kc, "list", "-o", "wide")
			t.Fatalf("%s did not run on %s:\n%s", name, node, list)
		}
	}
	// The pods' names are the Jobs' with a suffix: found by the lines that name them.
	var top string
	lines := func() map[string]string {
		out := map[string]string{}
		for _, l := range strings.Split(top, "\n") {
			l = regexpSpaces(l)
			for _, key := range []string{"mig-1 0 fixed, A100-80GB 3g.40gb@", "migdyn-1 0 dynamic, A100-80GB 1g.10gb@", "2g.20gb@", "1g.10gb@", "slices "} {
				if strings.HasPrefix(l, key) {
					out[key] += l + "\n"
				}
			}
		}
		return out
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		top, _ = runAllot(ctx, kc, "top", "nodes")
		l := lines()
		return strings.Contains(l["mig-1 0 fixed, A100-80GB 3g.40gb@"], "default/fixed-") &&
			strings.Contains(l["migdyn-1 0 dynamic, A100-80GB 1g.10gb@"], "default/dyn-") &&
			strings.Contains(l["2g.20gb@"], "idle") && strings.Contains(l["slices "], "free to lay out"), nil
	})
	if err != nil {
		t.Fatalf("allot top nodes does not show the layouts with their holders:\n%s", top)
	}
	if !regexp.MustCompile(`(?m)^\s+0 MIG .* default/fixed-\S+ \(3g\.40gb@\d\)$`).MatchString(top) {
		t.Errorf("allot top nodes: mig-1's GPU row does not name fixed's instance:\n%s", top)
	}
	d, err := runAllot(ctx, kc, "describe", "burst")
	if err != nil || !regexp.MustCompile(`burst-\S+\s+not measured yet\s+10 GiB\s+40 GiB\s+-`).MatchString(d) {
		t.Errorf("allot describe burst (%v) does not show its request and limit:\n%s", err, d)
	}

	m := regexp.MustCompile(`dashboard: (http://\S+)`).FindStringSubmatch(up.out.String())
	if m == nil {
		t.Fatalf("allot up printed no dashboard address:\n%s", up.out.String())
	}
	b.Open(t, strings.TrimSuffix(m[1], "/")+"/#/nodes")
	fixed := "article.node[data-node=mig-1] .gpu[data-mig=fixed]"
	b.WaitText(t, fixed, "mig-1's fixed layout", browsertest.Contains("MIG", "fixed · A100-80GB", "3g\nfixed-", "2g\nidle", "1g\nidle"))
	b.WaitText(t, "article.node[data-node=migdyn-1] .gpu[data-mig=dynamic]", "migdyn-1's layout", browsertest.Contains("MIG", "dynamic · A100-80GB", "1g\ndyn-", "free"))
	// Each instance by its place on the GPU: the 3g held, the 2g and 1g idle (their starts
	// are the simulated layout's).
	held := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll("`+fixed+` .mig-instance")).map(e => e.dataset.instance + "=" + e.dataset.state)`)
	slices.Sort(held)
	if !regexp.MustCompile(`^1g\.10gb@\d=idle 2g\.20gb@\d=idle 3g\.40gb@\d=held$`).MatchString(strings.Join(held, " ")) {
		t.Errorf("mig-1's instances on the page %v: want the 3g held, the 2g and 1g idle", held)
	}
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll("article.node[data-node=dgx-1] .gpu[data-mig]").length`); n != 0 {
		t.Errorf("%d whole GPUs of dgx-1 drawn as MIG", n)
	}
	b.Screenshot(t, "nodes-mig")
}
