package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/internal/progress"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
)

// AgainstRun is one scheduler's figures in a comparison.
type AgainstRun struct {
	Scheduler string
	*Result
}

// Against measures the upstream kube-scheduler (the binary at kubeScheduler, built
// from the k8s.io/kubernetes module of go.mod by make bench-kube) and Allot's scheduler the
// same way, each on a fresh embedded API server with the same simulated nodes, in turn
// (the order alternating each round), and prints both and their ratio.
// allot is the allot binary that runs `allot scheduler`.
// In backlog mode the pods are created first, with no scheduler running (their creation
// is then the API server's own rate, nothing else competing), and times count from the
// scheduler's start: its listing, its first cycle and the binds, as after a restart.
func Against(ctx context.Context, out, progressTo io.Writer, allot, kubeScheduler, mode string, nodes, pods, rounds int) ([]AgainstRun, error) {
	// The embedded control planes' logs go to a file; the schedulers' to their own.
	logPath := filepath.Join(os.TempDir(), "allot-bench-against.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Not closed: klog keeps writing to it (a control plane stopping) until the process ends.
	localcluster.QuietLogs(logFile)
	fmt.Fprintf(progressTo, "control plane and scheduler logs: %s\n", logPath)
	modes := []string{mode}
	if mode == Both {
		modes = []string{Stream, Backlog}
	}
	var all []AgainstRun
	for i, m := range modes {
		if i > 0 {
			fmt.Fprintln(out)
		}
		runs, err := compareInMode(ctx, out, progressTo, logFile, allot, kubeScheduler, m, nodes, pods, rounds)
		all = append(all, runs...)
		if err != nil {
			return all, err
		}
	}
	return all, printCeilingTable(out, all, modes, rounds, nodes, pods)
}

// compareInMode runs the rounds of one mode and prints its runs and ratios. Each round
// has kube-scheduler, Allot and the ceiling (direct binds), the order reversed every other
// round, so that Allot's runs and the ceiling's alternate in the sitting.
func compareInMode(ctx context.Context, out, progressTo, logFile io.Writer, allot, kubeScheduler, mode string, nodes, pods, rounds int) ([]AgainstRun, error) {
	var runs []AgainstRun
	for r := 0; r < rounds; r++ {
		// The API server's own ceiling, in the same sitting: the pods bound by the bench
		// itself, deciding nothing, as many at once as Allot's scheduler has in flight.
		order := []string{"kube-scheduler", "allot", direct}
		if r%2 == 1 {
			order = []string{direct, "allot", "kube-scheduler"}
		}
		for _, name := range order {
			fmt.Fprintf(progressTo, "%s, round %d of %d: %s on a fresh API server with %d nodes\n", mode, r+1, rounds, name, nodes)
			res, err := benchOnFreshCluster(ctx, name, allot, kubeScheduler, mode, nodes, pods, logFile, progress.Bar(progressTo, pods, name))
			if err != nil {
				return runs, fmt.Errorf("%s: %w", name, err)
			}
			runs = append(runs, AgainstRun{Scheduler: name, Result: res})
		}
	}
	fmt.Fprintf(out, "mode %s:\n", mode)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULER\tPODS/S\tP50\tP99\tBOUND\tPODS CREATED IN\tFIRST BIND\tPODS/S ONCE BINDING")
	sum, binding := map[string]float64{}, map[string]float64{}
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d/%d\t%s\t%s\t%.0f\n", r.Scheduler, r.PodsPerSecond, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond),
			r.Bound, r.Pods, r.Submitted.Round(time.Millisecond), r.FirstBind.Round(time.Millisecond), r.Binding)
		sum[r.Scheduler] += r.PodsPerSecond
		binding[r.Scheduler] += r.Binding
	}
	if err := tw.Flush(); err != nil {
		return runs, err
	}
	what := "creation to binding"
	if mode == Backlog {
		what = "created first, the scheduler's start to binding"
	}
	if sum["kube-scheduler"] > 0 {
		fmt.Fprintf(out, "allot ÷ kube-scheduler: %.2f× (mean pods/s over %d round(s), %d nodes × 8 GPUs, %d one-GPU pods, %s)\n",
			sum["allot"]/sum["kube-scheduler"], rounds, nodes, pods, what)
		// What any scheduler could show here: a binder that decides nothing is as fast as
		// this API server lets binds be.
		fmt.Fprintf(out, "direct binds ÷ kube-scheduler: %.2f× (the most a scheduler could show on this API server)\n",
			sum[direct]/sum["kube-scheduler"])
	}
	binds := sum[direct] / float64(rounds)
	if mode == Stream {
		for _, name := range []string{"allot", "kube-scheduler"} {
			fmt.Fprintf(out, "%s binds at %.0f%% of the bench's own binds as the pods arrive (%.0f against %.0f pods/s)\n",
				name, 100*sum[name]/sum[direct], sum[name]/float64(rounds), binds)
		}
	}
	if mode == Backlog {
		// With nothing scheduling while they were made, the creations measure the API
		// server itself: how close to it each scheduler drains.
		var created float64
		for _, r := range runs {
			created += float64(r.Pods) / r.Submitted.Seconds()
		}
		created /= float64(len(runs))
		for _, name := range []string{"allot", "kube-scheduler"} {
			sched := sum[name] / float64(rounds)
			fmt.Fprintf(out, "%s drains at %.0f%% of the API server's creation rate (%.0f pods/s, mean of the runs) and at %.0f%% of its bind rate (%.0f pods/s, bound directly)\n",
				name, 100*sched/created, created, 100*sched/binds, binds)
		}
		// The part of the gap that is the start (process, lists, first cycle) and the part
		// that is the binds themselves.
		for _, name := range []string{"allot", "kube-scheduler"} {
			fmt.Fprintf(out, "%s binds at %.0f%% of the bench's own binds from its first binding to its last (%.0f against %.0f pods/s)\n",
				name, 100*binding[name]/binding[direct], binding[name]/float64(rounds), binding[direct]/float64(rounds))
		}
	}
	return runs, nil
}

// printCeilingTable prints, per mode, each scheduler's mean pods/s as a part of the
// ceiling's (the bench's own binds, deciding nothing, on the same kind of fresh API server
// in the same sitting): from the first creation (backlog: the scheduler's start) to the
// last binding, and from the first binding to the last.
func printCeilingTable(out io.Writer, runs []AgainstRun, modes []string, rounds, nodes, pods int) error {
	fmt.Fprintf(out, "\nof the ceiling (direct binds: the bench binds the pods itself, deciding nothing), mean over %d round(s), %d nodes × 8 GPUs, %d one-GPU pods:\n", rounds, nodes, pods)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tCEILING PODS/S\tALLOT PODS/S\tALLOT ÷ CEILING\tKUBE-SCHEDULER PODS/S\tKUBE-SCHEDULER ÷ CEILING\tALLOT ÷ CEILING ONCE BINDING\tKUBE-SCHEDULER ÷ CEILING ONCE BINDING")
	for _, m := range modes {
		mean, binding := map[string]float64{}, map[string]float64{}
		n := map[string]int{}
		for _, r := range runs {
			if r.Mode == m {
				mean[r.Scheduler] += r.PodsPerSecond
				binding[r.Scheduler] += r.Binding
				n[r.Scheduler]++
			}
		}
		for k := range n {
			mean[k] /= float64(n[k])
			binding[k] /= float64(n[k])
		}
		part := func(a, b float64) string {
			if b <= 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f%%", 100*a/b)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%.0f\t%s\t%s\t%s\n", m, mean[direct], mean["allot"], part(mean["allot"], mean[direct]),
			mean["kube-scheduler"], part(mean["kube-scheduler"], mean[direct]), part(binding["allot"], binding[direct]), part(binding["kube-scheduler"], binding[direct]))
	}
	return tw.Flush()
}

// direct names the run with no scheduler: the bench binds the pods itself.
const direct = "direct binds"

// Both runs the comparison in stream mode, then in backlog mode, in one sitting.
const Both = "both"

// bindDirectly binds every pod of scheduler sched in namespace default that waits, to the
// nodes in turn, and gives the first failure.
func bindDirectly(ctx context.Context, client kubernetes.Interface, sched string) error {
	bind, err := bindInTurn(ctx, client)
	if err != nil {
		return err
	}
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: waitingFor(sched)})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	work := make(chan *corev1.Pod)
	go func() {
		defer close(work)
		for i := range pods.Items {
			select {
			case work <- &pods.Items[i]:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first error
	var once sync.Once
	bindEach(ctx, work, bind, func(err error) { once.Do(func() { first = err }) })
	return first
}

// bindAsCreated binds each pod of scheduler sched in namespace default as it is created,
// to the nodes in turn: a scheduler that watches pods through the API server, as any must, and
// decides nothing. It returns once it watches; it binds until ctx ends, failures logged.
func bindAsCreated(ctx context.Context, client kubernetes.Interface, sched string, logs io.Writer) error {
	bind, err := bindInTurn(ctx, client)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = waitingFor(sched)
	}))
	inf := factory.Core().V1().Pods().Informer()
	work := make(chan *corev1.Pod, 1024)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			select {
			case work <- p:
			case <-ctx.Done():
			}
		}
	}}); err != nil {
		return err
	}
	go bindEach(ctx, work, bind, func(err error) { fmt.Fprintf(logs, "direct binds: %v\n", err) })
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("direct binds: the pods were not listed: %w", ctx.Err())
	}
	return nil
}

// waitingFor selects the pods of scheduler sched not bound yet.
func waitingFor(sched string) string {
	return "spec.schedulerName=" + sched + ",spec.nodeName="
}

// bindInTurn lists the nodes and gives a bind to the next of them in turn, one GPU a pod
// as the bench's pods ask; safe to call at once from many goroutines.
func bindInTurn(ctx context.Context, client kubernetes.Interface) (func(*corev1.Pod) error, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	if len(nodes.Items) == 0 {
		return nil, fmt.Errorf("no nodes to bind to")
	}
	var next atomic.Int64
	return func(p *corev1.Pod) error {
		return bindPod(ctx, client, p, nodes.Items[int(next.Add(1)-1)%len(nodes.Items)].Name)
	}, nil
}

// bindPod binds p to node through the Binding subresource, as a scheduler does.
func bindPod(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, node string) error {
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := client.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding %s: %w", p.Name, err)
	}
	return nil
}

// bindEach binds the pods from work with as many binds in flight as Allot's scheduler
// has, until work closes or ctx ends; failed hears of each bind that failed while ctx
// lasted.
func bindEach(ctx context.Context, work <-chan *corev1.Pod, bind func(*corev1.Pod) error, failed func(error)) {
	var wg sync.WaitGroup
	for w := 0; w < scheduler.BindWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case p, ok := <-work:
					if !ok {
						return
					}
					if err := bind(p); err != nil && ctx.Err() == nil {
						failed(err)
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
}

// storedPods watches the pods of namespace default in etcd itself, each version as the
// API server stored it. The comparison sees binds there: a watch through the API server is
// closed when it falls behind (a fresh API server gives each watcher a buffer of tens of
// events), and an informer sees the binds since only once it watches or lists again, all
// at once and late, more often the faster a scheduler binds (docs/performance.md, "Beside
// upstream kube-scheduler"). etcd's watch catches up instead, and the API server under test serves
// one watch less.
func storedPods(store *clientv3.Client) podSource {
	return func(ctx context.Context, seen func(*corev1.Pod)) error {
		// From the revision now, so that no version after this call is missed.
		now, err := store.Get(ctx, podsKey, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("reading the pods' revision in etcd: %w", err)
		}
		decoder := scheme.Codecs.UniversalDeserializer()
		w := store.Watch(ctx, podsKey, clientv3.WithPrefix(), clientv3.WithRev(now.Header.Revision+1))
		go func() {
			for resp := range w {
				for _, ev := range resp.Events {
					if ev.Type != mvccpb.PUT {
						continue
					}
					if obj, _, err := decoder.Decode(ev.Kv.Value, nil, nil); err == nil {
						if p, ok := obj.(*corev1.Pod); ok {
							seen(p)
						}
					}
				}
			}
		}()
		return nil
	}
}

// podsKey is where kube-apiserver stores the pods of namespace default (its etcd prefix is
// /registry, localcluster's and kubeadm's).
const podsKey = "/registry/pods/default/"

// benchOnFreshCluster starts an embedded API server (etcd, kube-apiserver and the
// controller manager, as allot up has, but no default scheduler) with simulated nodes and
// their kubelet, starts the named scheduler as a process of its own (or, for direct, binds
// the pods itself), times pods binding, and stops it all.
func benchOnFreshCluster(parent context.Context, name, self, kubeScheduler, mode string, nodes, pods int, logs io.Writer, prog func(done, total int)) (*Result, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	dir, err := os.MkdirTemp("", "allot-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Without the embedded default scheduler: it would share the pods with the
	// kube-scheduler under test (both are default-scheduler).
	c, err := localcluster.StartWithoutDefaultScheduler(ctx, dir)
	if err != nil {
		return nil, err
	}
	// Clients (the simulated kubelet, the scheduler) stop first, or the API server's
	// shutdown waits a minute for their watches.
	defer func() { cancel(); c.Stop() }()
	rc := *c.Config
	rc.QPS, rc.Burst = 2000, 4000
	rc.ContentType = runtime.ContentTypeProtobuf
	client := kubernetes.NewForConfigOrDie(&rc)
	if err := simnode.Create(ctx, client, simnode.Spec{Prefix: "node", Count: nodes, GPUs: 8, GPUType: "A100-SXM4-80GB",
		GPUMemoryMi: 81920, CPU: "64", Memory: "512Gi"}); err != nil {
		return nil, err
	}
	go simnode.NewKubelet(client).Run(ctx)
	store := c.Store()
	defer store.Close()
	stored := storedPods(store)
	kc := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kc); err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	sched := scheduler.SchedulerName
	switch name {
	case direct:
		sched = "allot-bench-direct"
		if mode == Stream {
			if err := bindAsCreated(ctx, client, sched, logs); err != nil {
				return nil, err
			}
			return submitAndTime(ctx, client, pods, "", Stream, sched, nil, stored, prog)
		}
		release := func() (time.Time, error) {
			at := time.Now()
			go func() {
				if err := bindDirectly(ctx, client, sched); err != nil && ctx.Err() == nil {
					fmt.Fprintf(logs, "direct binds: %v\n", err)
				}
			}()
			return at, nil
		}
		return submitAndTime(ctx, client, pods, "", Backlog, sched, release, stored, prog)
	case "allot":
		cmd = exec.CommandContext(ctx, self, "scheduler", "--kubeconfig", kc)
	default:
		// The rate limits the harness and kube-scheduler's performance tests use; no
		// leader election, as Allot runs here.
		cfg := filepath.Join(dir, "kube-scheduler.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q, qps: 5000, burst: 5000}
leaderElection: {leaderElect: false}
`, kc)), 0o600); err != nil {
			return nil, err
		}
		cmd = exec.CommandContext(ctx, kubeScheduler, "--config="+cfg, "--secure-port=0")
		sched = "default-scheduler"
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	start := func() (time.Time, error) {
		at := time.Now()
		if err := cmd.Start(); err != nil {
			return at, fmt.Errorf("starting %s: %w", cmd.Path, err)
		}
		return at, nil
	}
	defer func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	if mode == Backlog {
		queue := ""
		if name == "allot" {
			queue = "bench"
			if err := ensureQueue(ctx, allotclient.NewForConfigOrDie(&rc), queue, pods, true); err != nil {
				return nil, err
			}
		}
		return submitAndTime(ctx, client, pods, queue, Backlog, sched, start, stored, prog)
	}
	if _, err := start(); err != nil {
		return nil, err
	}
	// Both list and watch before the first pod, as a running cluster's scheduler has.
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return Run(ctx, client, allotclient.NewForConfigOrDie(&rc), "bench", pods, Stream, sched, stored, prog)
}
