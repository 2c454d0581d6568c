package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/browsertest"
	"github.com/allot-dev/allot/kube/consumption"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/simnode"
)

// TestDashboard opens the dashboard of `allot up --demo` in headless Chromium after work
// is submitted and reads each page as a user would: the numbers on the overview, two
// notebooks sharing one GPU on the nodes page, a pending job's reason on the workloads
// page and its detail, a reclaimed job's timeline, and the queue tree. A screenshot of
// every page is written among the test's artifacts (ALLOT_ARTIFACTS, default artifacts/);
// ALLOT_UPDATE_DOCS=1 also copies the overview and nodes pages to docs/ for the README and docs pages.
func TestDashboard(t *testing.T) {
	b := browsertest.Start(t, 1280, 900)
	up := startUp(t, "--demo")
	m := regexp.MustCompile(`dashboard: (http://\S+)`).FindStringSubmatch(up.out.String())
	if m == nil {
		t.Fatalf("allot up printed no dashboard address:\n%s", up.out.String())
	}
	url := m[1]
	allot := func(args ...string) string {
		t.Helper()
		out, err := runAllot(up.ctx, up.kubeconfig, args...)
		if err != nil {
			t.Fatalf("allot %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	list := func() map[string]inspect.Workload {
		var ws []inspect.Workload
		if err := json.Unmarshal([]byte(allot("list", "-o", "json")), &ws); err != nil {
			t.Fatal(err)
		}
		out := map[string]inspect.Workload{}
		for _, w := range ws {
			out[w.Name] = w
		}
		return out
	}
	waitList := func(what string, ok func(map[string]inspect.Workload) bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !ok(list()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: never; allot list shows %+v", what, list())
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	running := func(ws map[string]inspect.Workload) int {
		n := 0
		for _, w := range ws {
			if w.Status == "Running" {
				n++
			}
		}
		return n
	}
	// The demo: team-a runs 10 one-GPU jobs on a quota of 4 (6 borrowed), team-b 2.
	waitList("the demo's 12 jobs run", func(ws map[string]inspect.Workload) bool { return running(ws) == 12 })

	// Two half-GPU notebooks for team-c, and a job of 8 GPUs for team-b that cannot start:
	// no node has 8 free GPUs (and team-b is at its quota, so it may not reclaim).
	allot("submit", "nb-1", "-p", "team-c", "-i", "jupyter", "-g", "0.5", "--interactive")
	allot("submit", "nb-2", "-p", "team-c", "-i", "jupyter", "-g", "0.5", "--interactive")
	allot("submit", "big", "-p", "team-b", "-i", "pytorch", "-g", "8")
	waitList("notebooks run and big waits", func(ws map[string]inspect.Workload) bool {
		return ws["nb-1"].Status == "Running" && ws["nb-2"].Status == "Running" && ws["big"].Pending == 1 && ws["big"].Reason != "" && ws["big"].Pods[0].Reason != ""
	})
	// big's reason is the one its last cycle wrote, and a later cycle may word it anew (the
	// largest free block it names moves as the notebooks land and the demo's jobs move): the
	// pages are checked against what allot list says at the same moment, not at this one.
	var listed string
	bigReason := func(s string) bool {
		listed = list()["big"].Reason
		return listed != "" && strings.Contains(s, listed)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("allot list's last reason for big: %q", listed)
		}
	})

	// Overview: the headline numbers and the queue bars' figures.
	b.Open(t, url)
	ms := browsertest.Eval[float64](t, b, `new Promise(done => { (function wait() {
		document.querySelector("[data-stat=gpus] .stat-value") ? done(performance.now()) : setTimeout(wait, 5) })() })`)
	nav := browsertest.Eval[float64](t, b, `performance.getEntriesByType("navigation")[0].responseStart`)
	t.Logf("first render: %.0f ms after navigation start (first byte at %.0f ms)", ms, nav)
	stat := func(id string) string { return fmt.Sprintf("[data-stat=%s] .stat-value", id) }
	b.WaitText(t, stat("gpus"), "16 GPUs in all", browsertest.Contains("16"))
	b.WaitText(t, stat("shared"), "one shared GPU", browsertest.Contains("1"))
	b.WaitText(t, stat("allocated"), "13 GPUs allocated (12 jobs and two halves)", browsertest.Contains("13"))
	b.WaitText(t, stat("idle"), "3 idle", browsertest.Contains("3"))
	b.WaitText(t, stat("running"), "14 running workloads", browsertest.Contains("14"))
	b.WaitText(t, stat("pending"), "1 pending workload", browsertest.Contains("1"))
	// The simulated agent reports the notebooks' GPU idle and the training GPUs 95% busy:
	// one GPU allocated and idle (the two halves).
	b.WaitText(t, stat("idle-allocated"), "the notebooks' GPU allocated but idle", func(s string) bool { return strings.TrimSpace(s) == "1" })
	row := func(q string) string { return fmt.Sprintf("table.queues-overview tr[data-queue=%s]", q) }
	// Allocated, quota, fair share, running, pending: team-a holds 10 on a quota of 4.
	b.WaitText(t, row("team-a"), "team-a borrows 6", browsertest.Contains("10 (6 borrowed)\t4\t"))
	b.WaitText(t, row("team-c"), "team-c's two notebooks", browsertest.Contains("team-c", "\t1\t2\t"))
	b.WaitText(t, row("team-b"), "team-b's waiting job", func(s string) bool { return strings.HasSuffix(strings.TrimSpace(s), "\t2\t1") })
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll("figure.chart canvas").length`); n != 1 {
		t.Errorf("the allocation chart is not drawn (%d canvases)", n)
	}
	b.Screenshot(t, "overview")

	// Nodes: each GPU a cell; nb-1 and nb-2 (their StatefulSets' pods nb-1-0, nb-2-0) are halves of one cell.
	b.Open(t, url+"#/nodes")
	shared := b.WaitText(t, ".gpu.gpu-shared", "two notebooks share one GPU", browsertest.Contains("nb-1", "nb-2"))
	if strings.Count(shared, "0.5") != 2 {
		t.Errorf("the shared GPU should show two halves, shows %q", shared)
	}
	parts := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll(".gpu-shared .gpu-part")).map(p => p.dataset.pod + "=" + p.dataset.share + "@" + Math.round(p.getBoundingClientRect().width))`)
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "default/nb-1-0=0.5@") || !strings.HasPrefix(parts[1], "default/nb-2-0=0.5@") ||
		strings.Split(parts[0], "@")[1] != strings.Split(parts[1], "@")[1] {
		t.Errorf("the shared GPU's parts should be two equal halves, nb-1 and nb-2: %v", parts)
	}
	b.WaitText(t, "article.node", "the nodes' free GPUs", browsertest.Contains("dgx-1", "dgx-2", "A100-SXM4-80GB", "3 free"))
	b.WaitText(t, ".gpu.gpu-shared .gpu-index", "the notebooks' GPU marked idle", browsertest.Contains("idle 0%"))
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll(".gpu-util[data-util='95']").length`); n != 12 {
		t.Errorf("%d GPUs shown 95%% busy, want the 12 the demo's training jobs hold", n)
	}
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll(".gpu").length`); n != 16 {
		t.Errorf("%d GPU cells, want 16", n)
	}
	// Colour by queue, with a legend entry per queue; each GPU cell names its queue.
	legend := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll("[data-legend-queue]")).map(l => l.dataset.legendQueue)`)
	if strings.Join(legend, ",") != "team-a,team-b,team-c,team-d" {
		t.Errorf("legend %v, want an entry per queue", legend)
	}
	if bad := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll(".gpu-part[data-pod]")).filter(p => !p.textContent.includes(p.dataset.queue) || !p.dataset.queue).map(p => p.dataset.pod)`); len(bad) != 0 {
		t.Errorf("GPU cells that do not name their queue: %v", bad)
	}
	// team-a's ten jobs: one hue in shades, none of them another queue's hue.
	shades := browsertest.Eval[[]string](t, b, `[...new Set(Array.from(document.querySelectorAll(".gpu-part[data-queue=team-a]")).map(p => getComputedStyle(p).backgroundColor))]`)
	if len(shades) < 2 {
		t.Errorf("team-a's jobs in %d shade(s), want one per job: %v", len(shades), shades)
	}
	b.Screenshot(t, "nodes")

	// Workloads: big waits, with the scheduler's reason; the status filter leaves it alone.
	b.Open(t, url+"#/workloads")
	b.WaitText(t, "tr[data-workload=big]", "big pending with its reason", browsertest.All(browsertest.Contains("team-b", "Pending"), bigReason))
	b.WaitText(t, "tr[data-workload=nb-1]", "nb-1 running half a GPU", browsertest.Contains("team-c", "interactive", "Running", "0.5", "dgx-"))
	// How busy each workload's GPUs are, as the nodes report them: a training job's whole
	// GPU at 95%; a notebook's slice has no GPU of its own to measure.
	b.WaitText(t, "tr[data-workload=team-a-train-0] td.gpu-use", "team-a-train-0's GPU use", browsertest.Contains("95%"))
	b.WaitText(t, "tr[data-workload=nb-1] td.gpu-use", "nb-1's GPU use", func(s string) bool { return strings.TrimSpace(s) == "-" })
	// A notebook's GPU is idle on the simulated nodes: once the idle controller has looked
	// (every 30 s), its Idle cell shows for how long.
	b.WaitText(t, "tr[data-workload=nb-1] td.idle", "nb-1's idle time", func(s string) bool {
		return regexp.MustCompile(`^[0-9]+[smhd]$`).MatchString(strings.TrimSpace(s))
	})
	b.Screenshot(t, "workloads")
	// The same looks count GPU-hours (kube/consumption): by the second, allot report gives
	// team-a's training its GPU-hours at the 95% the simulated nodes report it busy.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		out := allot("report", "-o", "csv")
		if regexp.MustCompile(`(?m)^team-a,[0-9.]+,[0-9.]+,[0-9.]+,95%$`).MatchString(out) && !strings.Contains(out, "team-a,0.00,") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("allot report never counted team-a's training at 95%% busy:\n%s", out)
		}
	}
	// With the chart's prices (consumption.prices, here the default pool's), a cost each.
	rc, err := clientcmd.BuildConfigFromFlags("", up.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	prices := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: consumption.PricesName, Namespace: v1alpha1.SystemNamespace}, Data: map[string]string{"default": "2.5"}}
	if _, err := kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps(v1alpha1.SystemNamespace).Create(up.ctx, prices, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Open(t, url+"#/consumption")
	b.WaitText(t, "tr[data-line=team-a]", "team-a's GPU-hours and cost on the Consumption page", func(s string) bool {
		f := strings.Fields(s)
		return strings.Contains(s, "95%") && !strings.Contains(s, "0.00\t") && len(f) == 5 && f[4] != "0.00"
	})
	b.Screenshot(t, "consumption")
	b.Open(t, url+"#/workloads")
	b.WaitText(t, "tr[data-workload=big]", "the workloads again", browsertest.Contains("big"))
	browsertest.Eval[bool](t, b, `(s => { s.value = "Pending"; s.dispatchEvent(new Event("change", {bubbles: true})); return true })(document.querySelector("#filter-status"))`)
	b.WaitText(t, "table.workloads tbody", "only pending workloads", func(s string) bool {
		return strings.Contains(s, "big") && !strings.Contains(s, "nb-1") && strings.Count(s, "\n") == 0
	})
	browsertest.Eval[bool](t, b, `(s => { s.value = ""; s.dispatchEvent(new Event("change", {bubbles: true})); s = document.querySelector("#filter-queue"); s.value = "team-c"; s.dispatchEvent(new Event("change", {bubbles: true})); return true })(document.querySelector("#filter-status"))`)
	b.WaitText(t, "table.workloads tbody", "team-c's workloads", func(s string) bool {
		return strings.Contains(s, "nb-1") && strings.Contains(s, "nb-2") && strings.Count(s, "\n") == 1
	})
	b.Screenshot(t, "workloads-filtered")
	// Search by name, and sort by a column (again for the other way).
	b.Open(t, url+"#/workloads?q=nb-")
	b.WaitText(t, "table.workloads tbody", "the search for nb-", func(s string) bool {
		return strings.Contains(s, "nb-1") && strings.Contains(s, "nb-2") && strings.Count(s, "\n") == 1 && strings.Contains(s, "default")
	})
	b.Open(t, url+"#/workloads")
	b.WaitText(t, "table.workloads", "the list", browsertest.Contains("big"))
	sorted := func(col string) []string {
		browsertest.Eval[bool](t, b, `(document.querySelector("button.sort[data-sort=`+col+`]").click(), true)`)
		time.Sleep(200 * time.Millisecond)
		return browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll("table.workloads tbody tr")).map(r => r.dataset.workload)`)
	}
	gpusColumn := func() []float64 {
		return browsertest.Eval[[]float64](t, b, `Array.from(document.querySelectorAll("table.workloads tbody tr")).map(r => parseFloat(r.children[5].textContent))`)
	}
	ordered := func(xs []float64, desc bool) bool {
		for i := 1; i < len(xs); i++ {
			if desc && xs[i] > xs[i-1] || !desc && xs[i] < xs[i-1] {
				return false
			}
		}
		return len(xs) > 2 && xs[0] != xs[len(xs)-1]
	}
	sorted("gpus")
	if up := gpusColumn(); !ordered(up, false) {
		t.Errorf("sorted by GPUs: %v", up)
	}
	sorted("gpus")
	if down := gpusColumn(); !ordered(down, true) {
		t.Errorf("sorted by GPUs the other way: %v", down)
	}

	// Live: with the page open, a new job appears without a reload. team-d (quota 8,
	// holding nothing) takes back the GPUs team-a borrowed.
	b.Open(t, url+"#/workloads")
	b.WaitText(t, "table.workloads", "the list", browsertest.Contains("big"))
	allot("submit", "llama", "-p", "team-d", "-i", "pytorch", "-g", "4", "--workers", "2")
	b.WaitText(t, "tr[data-workload=llama]", "llama appears and runs, live", browsertest.Contains("team-d", "distributed", "Running"))
	// Two pods of one job share one colour: team-d's hue, as its legend entry shows.
	b.Open(t, url+"#/nodes")
	b.WaitText(t, "[data-legend-queue=team-d]", "the legend", browsertest.Contains("team-d"))
	// "Running" above also matches a job running partly: the page may show one pod yet.
	var llama []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		llama = browsertest.Eval[[]string](t, b, `(() => {
		const parts = Array.from(document.querySelectorAll(".gpu-part[data-workload='default/Job/llama']"));
		const sw = getComputedStyle(document.querySelector("[data-legend-queue=team-d] .sw")).backgroundColor;
		return [String(new Set(parts.map(p => p.dataset.pod)).size), ...new Set(parts.map(p => getComputedStyle(p).backgroundColor)), sw] })()`)
		if (len(llama) > 0 && llama[0] == "2") || time.Now().After(deadline) {
			break
		}
	}
	if len(llama) != 3 || llama[0] != "2" || llama[1] != llama[2] {
		t.Errorf("llama's pods, their colours and team-d's legend colour: %v; want 2 pods in one colour, team-d's", llama)
	}

	// Detail: big's reason, timeline and progress (its owner's allot.dev/progress, as text);
	// a reclaimed team-a job's timeline.
	progress := []byte(`{"metadata":{"annotations":{"allot.dev/progress":"<b>epoch 0/3</b>"}}}`)
	if _, err := kubernetes.NewForConfigOrDie(rc).BatchV1().Jobs("default").Patch(up.ctx, "big", types.MergePatchType, progress, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Open(t, url+"#/workloads/default/big")
	b.WaitText(t, ".detail", "big's detail", browsertest.All(browsertest.Contains("Why it waits", "Submitted", "Waiting", "Pods", "Events", "FailedScheduling", "Progress\n<b>epoch 0/3</b>"), bigReason))
	b.Screenshot(t, "workload-pending")
	// The page updates in place: the same element, never "Loading…" again, as the state moves on.
	browsertest.Eval[bool](t, b, `(() => { window.marked = document.querySelector(".detail"); window.sawLoading = false;
		new MutationObserver(() => { if (document.querySelector(".loading")) window.sawLoading = true })
			.observe(document.querySelector("main"), {subtree: true, childList: true, characterData: true}); return true })()`)
	version := browsertest.Eval[float64](t, b, `Number(document.querySelector("main").dataset.version)`)
	// A node's label changes: the state moves on, the workload does not.
	touch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
	if _, err := kubernetes.NewForConfigOrDie(rc).CoreV1().Nodes().Patch(up.ctx, "dgx-1", types.MergePatchType, touch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for browsertest.Eval[float64](t, b, `Number(document.querySelector("main").dataset.version)`) < version+1 {
		if time.Now().After(deadline) {
			t.Fatal("the page got no new state after a node changed")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // the detail's own fetch after the update
	if same := browsertest.Eval[bool](t, b, `window.marked === document.querySelector(".detail") && !window.sawLoading`); !same {
		t.Errorf("the detail page was replaced or showed Loading… on an update")
	}
	var reclaimed string
	waitList("a team-a job is reclaimed", func(ws map[string]inspect.Workload) bool {
		for name, w := range ws {
			if strings.HasPrefix(name, "team-a-") && w.Running == 0 {
				reclaimed = name
				return true
			}
		}
		return false
	})
	b.Open(t, url+"#/workloads/default/"+reclaimed)
	b.WaitText(t, ".timeline", "the reclaimed job's story", browsertest.Contains("Submitted", "Started", "Preempted", "team-d"))
	// An interactive workload's page says who created it and how to open it from this machine.
	b.Open(t, url+"#/workloads/default/nb-1")
	b.WaitText(t, ".detail dl.facts", "nb-1's creator and open command", browsertest.Contains("Created by", "Open", "allot open nb-1"))
	b.Screenshot(t, "workload-preempted")

	// Queues: the tree with quotas and fair shares, and a history chart per queue.
	b.Open(t, url+"#/queues")
	b.WaitText(t, "table.queue-tree tr[data-queue=team-d]", "team-d's row", browsertest.Contains("team-d\t0\t8\t8\tnone\t8\t8\t0\t0.0\t"))
	// 16 GPUs: quotas a 4, b 2, d 8, and c wants only 1; the GPU left over goes to a and
	// b, who want more, by their weights 4:2 (0.67 and 0.33): demand is in whole GPUs, so
	// the shares are too, and the GPU goes to the larger remainder, a's.
	b.WaitText(t, "table.queue-tree tr[data-queue=team-a]", "team-a's fair share", browsertest.Contains("team-a\t0\t4\t4\tnone\t5\t"))
	b.WaitText(t, "table.queue-tree tr[data-queue=team-b]", "team-b's fair share", browsertest.Contains("team-b\t0\t2\t2\tnone\t2\t"))
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll(".charts canvas").length`); n != 4 {
		t.Errorf("%d queue history charts, want 4", n)
	}
	// Allocation and fair share told apart: a key per chart, the fair share dashed.
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll(".charts .chart-key li[data-line='fair share'][data-dash=dashed]").length`); n != 4 {
		t.Errorf("%d charts key the fair share as a dashed line, want 4", n)
	}
	// The time axis labels do not overlap: no two read the same, and each has its 80 px
	// (uPlot draws them on the canvas; the chart keeps what it drew on its element).
	axes := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll(".charts [data-xticks]")).map(e => e.clientWidth + "=" + e.dataset.xticks)`)
	if len(axes) != 4 {
		t.Errorf("%d charts report their time labels, want 4", len(axes))
	}
	for _, a := range axes {
		width, list, _ := strings.Cut(a, "=")
		labels := strings.Split(list, "|")
		px, _ := strconv.Atoi(width)
		seen := map[string]bool{}
		for _, l := range labels {
			if seen[l] || l == "" {
				t.Errorf("time labels %v: %q twice or empty", labels, l)
			}
			seen[l] = true
		}
		if len(labels)*80 > px {
			t.Errorf("%d time labels on a %d px chart: closer than 80 px", len(labels), px)
		}
	}
	b.Screenshot(t, "queues")
	// A queue's page: its rules, its workloads, and the reclaims it suffered and made.
	b.Open(t, url+"#/queues/team-a")
	b.WaitText(t, "table.reclaims-lost", "team-a's page: what team-d took from it", browsertest.Contains("default/team-a-train-", "reclaimed by queue team-d"))
	b.WaitText(t, "table.queue-members", "team-a's workloads", browsertest.Contains("team-a-train-0"))
	b.Open(t, url+"#/queues/team-d")
	b.WaitText(t, "table.reclaims-took", "team-d's page: what it took", browsertest.Contains("reclaimed by queue team-d for job default/llama"))
	b.WaitText(t, ".queue-page dl.facts", "team-d's facts", browsertest.Contains("Quota", "8 GPUs", "Fair share"))
	b.Screenshot(t, "queue-team-d")

	// Nodes grouped by the cluster's Topology: once one exists, a heading per rack with
	// what its nodes hold, each node under its rack.
	for node, rack := range map[string]string{"dgx-1": "r1", "dgx-2": "r2"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"example.com/rack":%q}}}`, rack)
		if _, err := kubernetes.NewForConfigOrDie(rc).CoreV1().Nodes().Patch(up.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	topo := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "Topology", "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"levels": []any{map[string]any{"name": "rack", "nodeLabel": "example.com/rack"}}}}}
	if _, err := dynamic.NewForConfigOrDie(rc).Resource(v1alpha1.Topologies).Create(up.ctx, topo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Open(t, url+"#/nodes")
	b.WaitText(t, "h2.domain[data-domain=r2]", "rack r2's heading", browsertest.Contains("rack r2", "/8 allocated"))
	order := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll("h2.domain, article.node")).map(e => e.dataset.domain || e.dataset.node)`)
	if strings.Join(order, ",") != "r1,dgx-1,r2,dgx-2" {
		t.Errorf("nodes page order %v, want each node under its rack: r1,dgx-1,r2,dgx-2", order)
	}
	b.Screenshot(t, "nodes-topology")

	// A GPU fails (the simulated node's driver raises XID 79; its agent reports it) and a
	// node declares its sharing unenforced: the nodes page marks the GPU failed with the
	// reason and carries the node's warning.
	for node, patch := range map[string]string{
		"dgx-2": fmt.Sprintf(`{"metadata":{"annotations":{%q:"5",%q:"6"}}}`, simnode.AnnotationFailGPU, v1alpha1.AnnotationGPUCordon),
		"dgx-1": fmt.Sprintf(`{"metadata":{"labels":{%q:"none"}}}`, v1alpha1.LabelGPUSharing)} {
		if _, err := kubernetes.NewForConfigOrDie(rc).CoreV1().Nodes().Patch(up.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b.WaitText(t, "article.node[data-node=dgx-2] .gpu-failed[data-gpu='5']", "GPU 5 of dgx-2 shown failed", browsertest.Contains("failed", "XID 79 (GPU has fallen off the bus)"))
	b.WaitText(t, "article.node[data-node=dgx-1] [data-sharing-warning]", "dgx-1's unenforced sharing", browsertest.Contains("GPU sharing is not enforced here"))
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll(".gpu-failed").length`); n != 1 {
		t.Errorf("%d GPUs shown failed, want 1", n)
	}
	// An admin cordons GPU 6 (allot.dev/gpu-cordon): shown cordoned, with why, and not free.
	b.WaitText(t, "article.node[data-node=dgx-2] .gpu-cordoned[data-gpu='6']", "GPU 6 of dgx-2 shown cordoned",
		browsertest.Contains("cordoned", "cordoned by an admin (allot.dev/gpu-cordon)"))
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll("article.node[data-node=dgx-2] .gpu-cordoned.gpu-free").length`); n != 0 {
		t.Errorf("a cordoned GPU is shown free")
	}
	b.Screenshot(t, "nodes-failed-gpu")

	if os.Getenv("ALLOT_UPDATE_DOCS") != "" {
		for _, name := range []string{"overview", "nodes", "workloads", "queues"} {
			png, err := os.ReadFile(filepath.Join(b.Artifacts, name+".png"))
			if err == nil {
				err = os.WriteFile(filepath.Join("..", "..", "docs", "dashboard-"+name+".png"), png, 0o644)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
}
