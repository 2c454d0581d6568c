//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

// TestSoak (make soak): the real scheduler binary for SOAK_TIME (30m) on SOAK_NODES (250)
// simulated nodes of 8 GPUs, under a steady churn of pods of 1–8 GPUs and gangs of 2–4
// pods keeping demand near 1.3× the cluster, each running 30 s–4 min. Every SOAK_EVERY
// (1m) the scheduler's heap in use and goroutines (its /metrics) and the API server's open
// watches are sampled; at the end the samples are printed as a table, plotted to SOAK_PLOT
// (an SVG), and the run fails if the heap's trend over the last 20 minutes (or the last
// two thirds of a shorter run) grows by more than 10%.
func TestSoak(t *testing.T) {
	length := kubetest.EnvDuration(t, "SOAK_TIME", 30*time.Minute)
	every := kubetest.EnvDuration(t, "SOAK_EVERY", time.Minute)
	nodes := 250
	if v := os.Getenv("SOAK_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_NODES=%q: a whole number of nodes, at least 1", v)
		}
		nodes = n
	}
	window := min(20*time.Minute, length*2/3)
	const gpusPerNode = 8
	bin := kubetest.BuildAllot(t)
	t.Logf("soak: %d nodes × %d GPUs for %s, a sample every %s", nodes, gpusPerNode, length, every)
	e := kubetest.Start(t, nodes, gpusPerNode)
	kubeconfig := filepath.Join(e.Dir, "kubeconfig")
	if err := e.Cluster.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	capacity := nodes * gpusPerNode
	queues := []string{"qa", "qb", "qc", "qd"}
	for _, q := range queues {
		e.Queue(t, q, int64(capacity/len(queues)), nil)
	}
	port := freePort(t)
	log, err := os.Create(filepath.Join(t.TempDir(), "scheduler.log"))
	if err != nil {
		t.Fatal(err)
	}
	sched := exec.Command(bin, "scheduler", "--kubeconfig", kubeconfig, "--metrics-port", strconv.Itoa(port))
	sched.Stdout, sched.Stderr = log, log
	if err := sched.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sched.Process.Signal(syscall.SIGKILL); _, _ = sched.Process.Wait() }()

	ctx, cancel := context.WithTimeout(e.Ctx, length)
	defer cancel()
	c := &churn{e: e, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11)), queues: queues, target: capacity * 13 / 10}
	go c.run(ctx)

	start := time.Now()
	var samples []Sample
	client := &http.Client{Timeout: 10 * time.Second}
	for tick := time.NewTicker(every); ; {
		select {
		case <-ctx.Done():
			tick.Stop()
			goto done
		case <-tick.C:
		}
		s, err := sample(e.Ctx, e, client, port)
		if err != nil {
			t.Logf("sample at %s: %v", time.Since(start).Round(time.Second), err)
			continue
		}
		s.At = time.Since(start)
		samples = append(samples, s)
		t.Logf("%s/%s: heap %.1f MiB, %.0f goroutines, %.0f watches, %d pods (%d bound), %d created",
			s.At.Round(time.Second), length, s.HeapBytes/(1<<20), s.Goroutines, s.Watches, s.Pods, s.Bound, c.created)
	}
done:
	var table strings.Builder
	_ = Table(&table, samples)
	t.Log("\n" + table.String())
	if path := os.Getenv("SOAK_PLOT"); path != "" {
		if err := Plot(path, samples); err != nil {
			t.Error(err)
		} else {
			t.Logf("plot: %s", path)
		}
	}
	line, pass := Verdict(samples, window, 0.10)
	t.Log(line)
	if !pass {
		t.Fail()
	}
}

func sample(ctx context.Context, e *kubetest.Env, client *http.Client, port int) (Sample, error) {
	var s Sample
	fams, err := Scrape(client, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return s, err
	}
	s.HeapBytes, _ = Sum(fams, "go_memstats_heap_inuse_bytes", nil)
	s.Goroutines, _ = Sum(fams, "go_goroutines", nil)
	raw, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, err
	}
	api, err := Parse(strings.NewReader(string(raw)))
	if err != nil {
		return s, err
	}
	s.Watches, _ = Sum(api, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH"})
	pods, err := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return s, err
	}
	s.Pods = len(pods.Items)
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			s.Bound++
		}
	}
	return s, nil
}

// churn keeps the GPUs asked for by unfinished pods near target: finished jobs are
// deleted, whole, and new ones made.
type churn struct {
	e       *kubetest.Env
	rng     *rand.Rand
	queues  []string
	target  int
	seq     int
	created int
}

func (c *churn) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.round(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

func (c *churn) round(ctx context.Context) {
	pods, err := c.e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return
	}
	demand := 0
	finished := map[string]bool{}
	byJob := map[string][]string{}
	for _, p := range pods.Items {
		job := p.Labels["job"]
		byJob[job] = append(byJob[job], p.Name)
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			finished[job] = true
		} else if p.DeletionTimestamp == nil {
			demand += int(v1alpha1.WholeGPUs(&p))
		}
	}
	for job := range finished {
		for _, name := range byJob[job] {
			_ = c.e.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{})
		}
		if strings.HasPrefix(job, "g") {
			_ = c.e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Delete(ctx, job, metav1.DeleteOptions{})
		}
	}
	for demand < c.target && ctx.Err() == nil {
		demand += c.submit(ctx)
	}
}

func (c *churn) submit(ctx context.Context) int {
	c.seq++
	q := c.queues[c.rng.IntN(len(c.queues))]
	run := time.Duration(30+c.rng.IntN(210)) * time.Second
	ann := map[string]string{simnode.AnnotationDuration: run.String()}
	gpus := []int64{1, 2, 4, 8}[c.rng.IntN(4)]
	if c.rng.IntN(5) > 0 {
		job := fmt.Sprintf("s%d", c.seq)
		c.pod(ctx, job, job, q, gpus, nil, ann)
		return int(gpus)
	}
	job := fmt.Sprintf("g%d", c.seq)
	n := 2 + c.rng.IntN(3)
	if err := c.e.CreatePodGroup(ctx, job, q, n); err != nil {
		return 1 // counted, so that a failing API server does not spin this loop
	}
	for i := 0; i < n; i++ {
		c.pod(ctx, job, fmt.Sprintf("%s-%d", job, i), q, gpus, map[string]string{v1alpha1.LabelPodGroup: job}, ann)
	}
	return n * int(gpus)
}

func (c *churn) pod(ctx context.Context, job, name, queue string, gpus int64, labels, ann map[string]string) {
	p := kubetest.PodSpec{Name: name, Queue: queue, GPUs: gpus, Labels: labels, Annotations: ann, Job: job}.Pod()
	if _, err := c.e.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err == nil {
		c.created++
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
