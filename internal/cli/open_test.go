package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/kube/inspect"
)

// background runs one allot command that keeps running (open, port-forward) until the
// returned stop is called, which says how it ended.
func (e *cliEnv) background(t *testing.T, args ...string) (*syncBuffer, func() error) {
	t.Helper()
	return background(t, e.Ctx, e.kubeconfig, args...)
}

func background(t *testing.T, parent context.Context, kubeconfig string, args ...string) (*syncBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	root := NewRoot()
	out := &syncBuffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(append(args, "--kubeconfig", kubeconfig))
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		if ctx.Err() == nil {
			// Ended by itself: printed stops waiting and shows why.
			fmt.Fprintf(out, "\n%s: %v\n", ended, err)
		}
		done <- err
	}()
	stopped := false
	var err error
	stop := func() error {
		if !stopped {
			cancel()
			err, stopped = <-done, true
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return out, stop
}

// ended marks, in a background command's output, that it stopped by itself.
const ended = "[the command ended]"

// printed waits until out shows pattern and returns its first group.
func printed(t *testing.T, out *syncBuffer, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var got string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			got = m[1]
		}
		if m == nil && strings.Contains(out.String(), ended) {
			return false, fmt.Errorf("it ended")
		}
		return m != nil, nil
	})
	if err != nil {
		t.Fatalf("no %q in:\n%s", pattern, out.String())
	}
	return got
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOpenAndPortForward: an interactive workload submitted with --port opens from this
// machine: allot open prints a URL with the notebook's token from its log, and the page
// answers through the API server's port-forward and the (simulated) node's kubelet; a
// suspended one is resumed first; port-forward reaches a given port; and what cannot be
// opened says why.
func TestOpenAndPortForward(t *testing.T) {
	e := startCLI(t)
	e.must(t, "submit", "nb", "-p", "team-a", "-i", "jupyter/base-notebook", "-g", "1", "--interactive", "--port", "8888")
	e.workload(t, "nb", running(1))

	out, stop := e.background(t, "open", "nb", "--no-browser")
	url := printed(t, out, `nb is open at (http://127\.0\.0\.1:\d+/lab\?token=[0-9a-f]+)\n`)
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "<h1>Workspace nb-0</h1>") {
		t.Fatalf("GET %s: %d\n%s", url, code, body)
	}
	// The token is the workspace's own: without it the page is refused.
	bare := url[:strings.Index(url, "?")]
	if code, _ := get(t, bare); code != http.StatusForbidden {
		t.Fatalf("GET %s without the token: %d, want 403", bare, code)
	}
	token := url[strings.Index(url, "?"):]
	if err := stop(); err != nil {
		t.Fatalf("allot open stopped with %v\n%s", err, out.String())
	}

	out, stop = e.background(t, "port-forward", "nb", "0:8888")
	addr := printed(t, out, `Forwarding from (127\.0\.0\.1:\d+) -> pod nb-0 port 8888`)
	if code, body := get(t, "http://"+addr+"/tree"+token); code != http.StatusOK || !strings.Contains(body, "Workspace nb-0") {
		t.Fatalf("GET through port-forward: %d\n%s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("allot port-forward stopped with %v\n%s", err, out.String())
	}

	// A notebook suspended (by hand here; by its queue's idleTimeout in kube/stack's idle
	// test) is brought back by open, which waits for its pod.
	e.must(t, "suspend", "nb")
	e.workload(t, "nb", func(w inspect.Workload) bool { return w.Status == "Suspended" && len(w.Pods) == 0 })
	out, stop = e.background(t, "open", "nb", "--no-browser")
	url = printed(t, out, `nb is open at (http://\S+)\n`)
	if !strings.Contains(out.String(), "nb was suspended: StatefulSet default/nb resumed; waiting for its pod") {
		t.Fatalf("open of a suspended notebook said:\n%s", out.String())
	}
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "<h1>Workspace nb-0</h1>") {
		t.Fatalf("GET %s: %d\n%s", url, code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("allot open stopped with %v\n%s", err, out.String())
	}

	// A suspended inference service is resumed by open, which waits for its pod.
	e.must(t, "submit", "svc", "-p", "team-d", "-i", "vllm", "-g", "1", "--inference", "--port", "8000")
	e.workload(t, "svc", running(1))
	e.must(t, "suspend", "svc")
	e.workload(t, "svc", func(w inspect.Workload) bool { return w.Status == "Suspended" && len(w.Pods) == 0 })
	out, stop = e.background(t, "open", "svc", "--no-browser")
	url = printed(t, out, `svc is open at (http://\S+)\n`)
	if !strings.Contains(out.String(), "svc was suspended: Deployment default/svc resumed; waiting for its pod") {
		t.Fatalf("open of a suspended workload said:\n%s", out.String())
	}
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "<h1>Workspace svc-") {
		t.Fatalf("GET %s: %d\n%s", url, code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("allot open stopped with %v", err)
	}

	// An inference service at rest at zero (where its autoscaler, minimum 0, put it) is
	// woken by open, and by resume.
	e.must(t, "submit", "rest", "-p", "team-d", "-i", "vllm", "-g", "1", "--inference", "--port", "8000", "--replicas", "0:2")
	e.workload(t, "rest", running(1))
	atZero := func() {
		t.Helper()
		sc, err := e.Client.AppsV1().Deployments("default").GetScale(e.Ctx, "rest", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sc.Spec.Replicas = 0
		if _, err := e.Client.AppsV1().Deployments("default").UpdateScale(e.Ctx, "rest", sc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.workload(t, "rest", func(w inspect.Workload) bool { return len(w.Pods) == 0 })
	}
	atZero()
	out, stop = e.background(t, "open", "rest", "--no-browser")
	url = printed(t, out, `rest is open at (http://\S+)\n`)
	if !strings.Contains(out.String(), "rest was at rest at zero replicas: scaled to 1") {
		t.Fatalf("open of a service at zero said:\n%s", out.String())
	}
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "<h1>Workspace rest-") {
		t.Fatalf("GET %s: %d\n%s", url, code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("allot open stopped with %v", err)
	}
	atZero()
	e.must(t, "resume", "rest")
	e.workload(t, "rest", running(1))

	e.must(t, "submit", "train", "-p", "team-b", "-i", "pytorch", "-g", "1")
	e.workload(t, "train", running(1))
	// A queue's limit keeps this one waiting.
	e.must(t, "queue", "create", "tiny", "--quota", "1", "--limit", "1")
	e.must(t, "submit", "huge", "-p", "tiny", "-i", "pytorch", "-g", "1", "--interactive", "--port", "8888")
	e.workload(t, "huge", running(1))
	e.must(t, "submit", "huge2", "-p", "tiny", "-i", "pytorch", "-g", "1", "--interactive", "--port", "8888")
	// A training job someone suspended is not started by a look at it, and a service its
	// owner scaled to zero (no autoscaler resting it there) is not scaled up.
	e.must(t, "submit", "held", "-p", "team-b", "-i", "pytorch", "-g", "1")
	e.must(t, "suspend", "held")
	e.workload(t, "held", func(w inspect.Workload) bool { return w.Status == "Suspended" })
	sc, err := e.Client.AppsV1().Deployments("default").GetScale(e.Ctx, "svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = 0
	if _, err := e.Client.AppsV1().Deployments("default").UpdateScale(e.Ctx, "svc", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.workload(t, "svc", func(w inspect.Workload) bool { return len(w.Pods) == 0 })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"open", "nosuch"}, `no workload "nosuch" in namespace default`},
		{[]string{"open", "held", "--no-browser"}, "held is a suspended train workload: allot open resumes only interactive and inference ones"},
		{[]string{"open", "svc", "--no-browser"}, "svc is scaled to zero replicas, and no autoscaler with a minimum of 0 put it there"},
		{[]string{"resume", "svc"}, "svc is not suspended: it runs 0 replicas"},
		{[]string{"open", "train", "--no-browser"}, "train declares no port to open (pod train-"},
		{[]string{"open", "huge2", "--wait", "1s"}, "huge2 is not running: pod huge2-0 Pending"},
		{[]string{"port-forward", "huge2", "8888"}, "huge2 is not running: pod huge2-0 Pending"},
		{[]string{"port-forward", "nb", "88888"}, `port "88888" is not allowed: [LOCAL:]REMOTE`},
		{[]string{"port-forward", "nb", "x:8888"}, `port "x:8888" is not allowed`},
		{[]string{"open", "nb", "--local-port", "-1"}, "--local-port -1 is not allowed"},
	} {
		if _, err := e.run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allot %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

// TestUpOpen: on allot up itself (simulated nodes with the device plugin and the real
// agents), a notebook submitted with a port opens, and an autoscaled inference service's
// metric is served through the API server.
func TestUpOpen(t *testing.T) {
	// A short warm-up: the service's pod counts for its autoscaler 5 s after it starts.
	up := startUp(t, "--nodes", "1", "--gpu-utilization-warmup", "5s")
	ctx, kc := up.ctx, up.kubeconfig
	must := func(args ...string) string {
		t.Helper()
		out, err := runAllot(ctx, kc, args...)
		if err != nil {
			t.Fatalf("allot %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	must("queue", "create", "ml", "--quota", "4")
	must("submit", "nb", "-p", "ml", "-i", "jupyter/base-notebook", "-g", "1", "--interactive", "--port", "8888")
	out, stop := background(t, ctx, kc, "open", "nb", "--no-browser")
	url := printed(t, out, `nb is open at (http://127\.0\.0\.1:\d+/lab\?token=[0-9a-f]+)\n`)
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "<h1>Workspace nb-0</h1>") {
		t.Fatalf("GET %s: %d\n%s", url, code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("allot open stopped with %v\n%s", err, out.String())
	}
	must("submit", "llm", "-p", "ml", "-i", "vllm", "-g", "1", "--inference", "--replicas", "1:3", "--target-gpu-utilization", "50")
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	// Inference pods keep their GPUs 95% busy on allot up: above 50, so the service grows.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		d, err := client.AppsV1().Deployments("default").Get(ctx, "llm", metav1.GetOptions{})
		return err == nil && *d.Spec.Replicas > 1, nil
	})
	b, rerr := client.CoreV1().RESTClient().Get().AbsPath("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/deployments.apps/llm/gpu-utilization").DoRaw(ctx)
	if err != nil {
		t.Fatalf("llm did not scale up: %v; its metric: %v %s", err, rerr, b)
	}
}
