package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/progress"
	"github.com/allot-dev/allot/kube/admission"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
)

// A Scenario is one of allot bench --scenario's measurements, each the shape of one of
// KAI-Scheduler's published scale tests (or, for restart, of a restart at a size reported
// to Volcano): it sets up a fresh embedded cluster and reports what it timed.
type Scenario struct {
	name  string
	about string
	// Nodes is the default --nodes.
	Nodes int
	run   func(h *scenarioHarness) (*ScenarioReport, error)
}

// scenarios lists the built-in scenarios in the order they are documented.
func scenarios() []Scenario {
	return []Scenario{fillScenario, bigGangScenario, reclaimOneScenario, reclaimAllScenario, reclaimBigScenario, restartScenario, kueueScenario}
}

// ScenarioNames are the built-in scenarios' names, for the flag's help and its refusals.
func ScenarioNames() string {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

// FindScenario is the built-in scenario of that name, or an error naming them all.
func FindScenario(name string) (Scenario, error) {
	for _, s := range scenarios() {
		if s.name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("--scenario %q is not allowed: one of %s", name, ScenarioNames())
}

// ScenarioOptions are allot bench --scenario's flags.
type ScenarioOptions struct {
	Nodes, GPUs int
	// StopAfter is how long an evicted pod's containers take to stop on the simulated
	// kubelet (at most its grace period); 0 stops them at once.
	StopAfter time.Duration
	// CPUProfile, if set, is where the measured scheduler writes a CPU profile.
	CPUProfile string
	// CustomMetrics has the schedulers serve the custom metrics API as well, as the chart
	// runs them (customMetrics.enabled): every reader of pods in the process, for its
	// memory. Nothing reads the API; it serves on a free port with a self-signed
	// certificate.
	CustomMetrics bool
}

// ScenarioReport is what a Scenario measured. Times are from Origin.
type ScenarioReport struct {
	Scenario, Shape string
	Origin          string // what the times count from
	Created         int
	Create          time.Duration // creating the scenario's timed pods
	Want, Bound     int           // pods to bind in the timed phase, and bound
	FirstBind       time.Duration
	LastBind        time.Duration
	// Evictions issued (the scheduler's eviction requests) and done (victims gone), and
	// how many the Scenario needs (the GPUs it reclaims, each victim holding one).
	EvictionsIssued, EvictionsDone, EvictionsNeeded int
	// The first victim seen terminating, the last, and the last gone.
	FirstEviction, LastEviction, LastEvictionDone time.Duration
	// LastVictimStopped is when the last victim's containers stopped (its devices free),
	// which a rebind may follow before the victim is removed.
	LastVictimStopped time.Duration
	// Samples are the single reclaims of reclaim-one, each from its pod's creation.
	Samples []time.Duration
	Sched   ChildReport
	// Total is the scenario's headline figure, TotalIs what it is (empty: from Origin to
	// the last binding).
	Total   time.Duration
	TotalIs string
	Notes   []string
}

// scenarioHarness is a fresh embedded cluster with simulated nodes, the pods seen in etcd,
// and Allot's scheduler as a process of its own.
type scenarioHarness struct {
	ctx                context.Context
	opts               ScenarioOptions
	self               string // the allot binary
	dir, kubeconfig    string
	client             kubernetes.Interface
	allot              versioned.Interface
	pods               *podLog
	logs, progressTo   io.Writer
	scheduler          *exec.Cmd
	schedulerStart     time.Time
	schedulerReport    string
	schedulerRuns      int
	schedulerProfileOn bool
}

// RunScenario runs the Scenario on a fresh embedded cluster and prints its report on out,
// progress on progressTo; self is the allot binary that runs the scheduler.
func RunScenario(ctx context.Context, out, progressTo io.Writer, self string, s Scenario, opts ScenarioOptions) (*ScenarioReport, error) {
	logPath := filepath.Join(os.TempDir(), "allot-bench-scenario.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Not closed: klog keeps writing to it (a control plane stopping) until the process ends.
	localcluster.QuietLogs(logFile)
	// The simulated kubelet's warnings (a status write cut off as the cluster stops) too.
	slog.SetDefault(slog.New(slog.NewTextHandler(logFile, nil)))
	fmt.Fprintf(progressTo, "scenario %s: %d nodes × %d GPUs on a fresh API server; control plane and scheduler logs: %s\n", s.name, opts.Nodes, opts.GPUs, logPath)
	h, stop, err := startScenarioHarness(ctx, self, opts, logFile, progressTo)
	if err != nil {
		return nil, err
	}
	defer stop()
	rep, err := s.run(h)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.name, err)
	}
	rep.Scenario = s.name
	printScenario(out, rep)
	if rep.EvictionsIssued != rep.EvictionsNeeded {
		// More evictions than the reclaim needed stop work for nothing; fewer leave it short.
		return rep, fmt.Errorf("scenario %s: %d evictions issued where %d were needed", s.name, rep.EvictionsIssued, rep.EvictionsNeeded)
	}
	return rep, nil
}

// startScenarioHarness starts etcd, kube-apiserver and the controller manager (no default
// scheduler: nothing but Allot binds), the simulated nodes and their kubelet.
func startScenarioHarness(parent context.Context, self string, opts ScenarioOptions, logs, progressTo io.Writer) (*scenarioHarness, func(), error) {
	ctx, cancel := context.WithCancel(parent)
	dir, err := os.MkdirTemp("", "allot-scenario-")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	c, err := localcluster.StartWithoutDefaultScheduler(ctx, dir)
	if err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	h := &scenarioHarness{ctx: ctx, opts: opts, self: self, dir: dir, logs: logs, progressTo: progressTo}
	store := c.Store()
	stop := func() {
		h.stopScheduler()
		// Clients (the kubelet, the watch) stop first, or the API server's shutdown waits
		// a minute for their watches.
		cancel()
		store.Close()
		c.Stop()
		os.RemoveAll(dir)
	}
	rc := *c.Config
	rc.QPS, rc.Burst = 5000, 10000
	rc.ContentType = runtime.ContentTypeProtobuf
	h.client = kubernetes.NewForConfigOrDie(&rc)
	h.allot = allotclient.NewForConfigOrDie(&rc)
	h.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(h.kubeconfig); err != nil {
		stop()
		return nil, nil, err
	}
	if h.pods, err = watchPods(ctx, store); err != nil {
		stop()
		return nil, nil, err
	}
	began := time.Now()
	if err := createNodes(ctx, h.client, opts.Nodes, opts.GPUs); err != nil {
		stop()
		return nil, nil, err
	}
	fmt.Fprintf(progressTo, "%d simulated nodes made in %s\n", opts.Nodes, time.Since(began).Round(time.Millisecond))
	go simnode.NewKubelet(h.client).Run(ctx)
	return h, stop, nil
}

// createNodes makes the simulated nodes, in groups at once: a 5,000-node cluster one node
// after another takes minutes of round trips.
func createNodes(ctx context.Context, client kubernetes.Interface, nodes, gpus int) error {
	groups := min(16, nodes)
	var wg sync.WaitGroup
	errs := make([]error, groups)
	for g := 0; g < groups; g++ {
		count := nodes / groups
		if g < nodes%groups {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = simnode.Create(ctx, client, simnode.Spec{Prefix: fmt.Sprintf("node%d", g), Count: count, GPUs: gpus,
				GPUType: "A100-SXM4-80GB", GPUMemoryMi: 81920, CPU: "64", Memory: "512Gi"})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startScheduler starts `allot bench --as-scheduler` (allot scheduler with its requests
// counted) and gives the moment it was started.
func (h *scenarioHarness) startScheduler() (time.Time, error) {
	if h.scheduler != nil {
		return time.Time{}, fmt.Errorf("a scheduler is already running")
	}
	h.schedulerRuns++
	h.schedulerReport = filepath.Join(h.dir, fmt.Sprintf("scheduler-%d.json", h.schedulerRuns))
	args := []string{"bench", "--as-scheduler", h.schedulerReport}
	if h.schedulerProfileOn && h.opts.CPUProfile != "" {
		args = append(args, "--cpu-profile", h.opts.CPUProfile)
	}
	args = append(args, "--", "--kubeconfig", h.kubeconfig)
	if h.opts.CustomMetrics {
		certs := filepath.Join(h.dir, "custom-metrics")
		if _, err := admission.SelfSigned(certs); err != nil {
			return time.Time{}, fmt.Errorf("the custom metrics API's certificate: %w", err)
		}
		port, err := freeLoopbackPort()
		if err != nil {
			return time.Time{}, err
		}
		args = append(args, "--custom-metrics-port", strconv.Itoa(port), "--webhook-cert-dir", certs)
	}
	cmd := exec.Command(h.self, args...)
	cmd.Stdout, cmd.Stderr = h.logs, h.logs
	at := time.Now()
	if err := cmd.Start(); err != nil {
		return at, fmt.Errorf("starting %s: %w", h.self, err)
	}
	h.scheduler, h.schedulerStart = cmd, at
	return at, nil
}

// freeLoopbackPort is a port free on 127.0.0.1 now.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// measureScheduler marks the next scheduler started as the measured one (its CPU profile
// taken, when asked).
func (h *scenarioHarness) measureScheduler() { h.schedulerProfileOn = true }

// stopScheduler stops the running scheduler as Kubernetes stops a pod (SIGTERM) and gives
// its report: its requests and peak memory.
func (h *scenarioHarness) stopScheduler() (ChildReport, error) {
	var rep ChildReport
	cmd := h.scheduler
	if cmd == nil {
		return rep, nil
	}
	h.scheduler = nil
	h.schedulerProfileOn = false
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return rep, fmt.Errorf("the scheduler did not stop within 30s of SIGTERM")
	}
	b, err := os.ReadFile(h.schedulerReport)
	if err != nil {
		return rep, fmt.Errorf("the scheduler's report: %w", err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("the scheduler's report %s: %w", h.schedulerReport, err)
	}
	return rep, nil
}

// ensureScenarioQueue makes a queue with a GPU quota, an over-quota weight (nil: as the
// quota) and a limit (nil: none).
func (h *scenarioHarness) ensureScenarioQueue(name string, quota int, weight, limit *int32) error {
	return h.createQueue(name, v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: int32(quota), OverQuotaWeight: weight, Limit: limit}})
}

// createQueue makes a queue of that spec.
func (h *scenarioHarness) createQueue(name string, spec v1alpha1.QueueSpec) error {
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if _, err := h.allot.AllotV1alpha1().Queues().Create(h.ctx, q, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating queue %s: %w", name, err)
	}
	return nil
}

// labelRole marks a scenario's pods by their part in it.
const labelRole = "allot.dev/bench-role"

// scenarioPod is a pod of Allot's scheduler in namespace default, in queue, asking gpus
// whole GPUs; role is its part in the scenario.
func scenarioPod(name, role, queue string, gpus int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		Labels: map[string]string{labelRole: role, scheduler.LabelQueue: queue}},
		Spec: corev1.PodSpec{SchedulerName: scheduler.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "bench"}}}}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{scheduler.GPUResource: *resource.NewQuantity(int64(gpus), resource.DecimalSI)}
	}
	return p
}

// createPods creates n pods made by mk, many at once, and gives how long it took.
func (h *scenarioHarness) createPods(n int, what string, mk func(i int) *corev1.Pod) (time.Duration, error) {
	prog := progress.Bar(h.progressTo, n, "creating "+what)
	work := make(chan int)
	var mu sync.Mutex
	var first error
	done := 0
	var wg sync.WaitGroup
	for w := 0; w < min(64, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				_, err := h.client.CoreV1().Pods("default").Create(h.ctx, mk(i), metav1.CreateOptions{})
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				done++
				prog(done, n)
				mu.Unlock()
			}
		}()
	}
	began := time.Now()
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		return 0, fmt.Errorf("creating %s: %w", what, first)
	}
	return time.Since(began), nil
}

// waitPods waits until at least n pods of the role have reached the state (one of the
// podLog's), with a progress bar, and fails after timeout.
func (h *scenarioHarness) waitPods(role string, state podState, n int, what string, timeout time.Duration) error {
	prog := progress.Bar(h.progressTo, n, what)
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got := h.pods.count(role, state)
		prog(min(got, n), n)
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %s", what, got, n, timeout)
		}
		select {
		case <-h.ctx.Done():
			return h.ctx.Err()
		case <-tick.C:
		}
	}
}

// probe has the running scheduler bind a CPU-only pod and waits for it: the scheduler has
// then listed the cluster and run a cycle, as one that has been running a while has.
func (h *scenarioHarness) probe(queue string) error {
	name := fmt.Sprintf("probe-%d", h.schedulerRuns)
	if _, err := h.client.CoreV1().Pods("default").Create(h.ctx, scenarioPod(name, name, queue, 0), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the probe pod: %w", err)
	}
	return h.waitPods(name, podBound, 1, "the scheduler's first cycle", 5*time.Minute)
}

// fillBound has a scheduler bind n one-GPU pods of role in queue, waits until they run, and
// stops it: the cluster's state before the timed part of a Scenario, with no scheduler
// running.
func (h *scenarioHarness) fillBound(n int, role, queue string, annotate map[string]string) error {
	if _, err := h.startScheduler(); err != nil {
		return err
	}
	if _, err := h.createPods(n, role+" pods", func(i int) *corev1.Pod {
		p := scenarioPod(fmt.Sprintf("%s-%d", role, i), role, queue, 1)
		p.Annotations = annotate
		return p
	}); err != nil {
		return err
	}
	if err := h.waitPods(role, podBound, n, "binding "+role+" pods", 30*time.Minute); err != nil {
		return err
	}
	// Started too: the simulated kubelet, one for all nodes, is otherwise still starting
	// them when the timed part begins, and stops a victim only after.
	if err := h.waitPods(role, podRunning, n, "starting "+role+" pods", 30*time.Minute); err != nil {
		return err
	}
	_, err := h.stopScheduler()
	return err
}

// timed fills the report's bind figures from the pods of role bound since origin.
func (h *scenarioHarness) timed(rep *ScenarioReport, role string, origin time.Time) {
	first, last, n := h.pods.span(role, podBound)
	rep.Bound = n
	if n > 0 {
		rep.FirstBind, rep.LastBind = first.Sub(origin), last.Sub(origin)
	}
}

// evictions fills the report's eviction figures: the scheduler's eviction requests and the
// victims (pods of role) gone since origin.
func evictions(rep *ScenarioReport, h *scenarioHarness, victims string, origin time.Time) {
	rep.EvictionsIssued = rep.Sched.Requests["create pods/eviction"]
	// A victim's devices are free once its containers stop, a moment before the API server
	// removes it, so the last rebind can come before the last removal: wait (a minute at
	// most) until every victim evicted is gone, so that "done" counts what the evictions
	// did, not how far the removals had got at the last rebind (CI once read 12 of 16). The
	// times are the pods' own, whenever read.
	_ = h.waitPods(victims, podGone, rep.EvictionsIssued, "victims removed", time.Minute)
	first, last, n := h.pods.span(victims, podTerminating)
	if n > 0 {
		rep.FirstEviction, rep.LastEviction = first.Sub(origin), last.Sub(origin)
	}
	_, last, n = h.pods.span(victims, podGone)
	rep.EvictionsDone = n
	if n > 0 {
		rep.LastEvictionDone = last.Sub(origin)
		rep.LastVictimStopped = h.pods.lastStopped(victims).Sub(origin)
	}
}

// printScenario writes the report.
func printScenario(w io.Writer, r *ScenarioReport) {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Fprintf(w, "scenario %s: %s\n", r.Scenario, r.Shape)
	if r.Create > 0 {
		fmt.Fprintf(w, "  create: %d pods in %s\n", r.Created, ms(r.Create))
	}
	fmt.Fprintf(w, "  from %s: first bind %s, last bind %s (%d of %d bound)\n", r.Origin, ms(r.FirstBind), ms(r.LastBind), r.Bound, r.Want)
	if r.EvictionsIssued > 0 || r.EvictionsDone > 0 {
		fmt.Fprintf(w, "  evictions: %d issued of %d needed (victims terminating from %s to %s), %d done (victims gone, the last at %s), %d rebinds (the reclaimers bound)\n",
			r.EvictionsIssued, r.EvictionsNeeded, ms(r.FirstEviction), ms(r.LastEviction), r.EvictionsDone, ms(r.LastEvictionDone), r.Bound)
	}
	if len(r.Samples) > 0 {
		s := append([]time.Duration(nil), r.Samples...)
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		var sum time.Duration
		parts := make([]string, len(r.Samples))
		for i, d := range r.Samples {
			sum += d
			parts[i] = ms(d)
		}
		fmt.Fprintf(w, "  single reclaims, creation to binding: mean %s, min %s, max %s (%s)\n",
			ms(sum/time.Duration(len(s))), ms(s[0]), ms(s[len(s)-1]), strings.Join(parts, " "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	list, total := formatRequests(r.Sched.Requests)
	fmt.Fprintf(w, "  scheduler: peak RSS %d MiB (Go runtime's memory from the OS at the end %d MiB); %d API requests: %s\n",
		r.Sched.MaxRSS>>20, r.Sched.HeapSys>>20, total, list)
	what := r.TotalIs
	if what == "" {
		what = "from " + r.Origin + " to the last binding"
	}
	fmt.Fprintf(w, "  total: %s (%s)\n", ms(r.Total), what)
}
