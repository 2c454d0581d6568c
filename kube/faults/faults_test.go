package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/simnode"
)

const (
	nodes, gpusPerNode = 4, 8
	// partialLimit is how long a gang may run partly before it is a violation: the
	// engine's grace period, plus the time to see it and for the evictions to land.
	partialLimit = engine.DefaultGangGrace + 5*time.Second
)

// TestFaults: the scheduler's safety under faults. Queues of 12, 8, 8 and 4 GPUs on 32
// share a churn of single pods (1, 2 or 4 GPUs) and gangs (2 or 3 pods of 1 or 2 GPUs)
// driven to 1.5–2× the cluster, jobs ending on their own and being deleted. Two replicas
// reach the API server through a Proxy. Every 4–8 s a fault, in turn: the leader
// SIGKILLed and restarted; a node lost (NotReady, the unreachable taint, its pods deleted
// as the taint-eviction controller would, back 8 s later); the leader SIGSTOPped for twice
// its lease (once); the API server slow and lossy for 8 s (requests 50 ms–2 s late, watch
// events 0.2–1 s late, a third of the bind answers lost, every connection cut twice).
// Checked at every pod event: no GPU index held by two running pods, no node over its
// GPUs, no gang below its minMember for longer than partialLimit, no pod bound to a node
// that had been NotReady for 2 s; at the end, every pod neither the churn nor a lost node
// deleted exists or has an Evicted event.
func TestFaults(t *testing.T) {
	runFaults(t, false, kubetest.EnvDuration(t, "FAULTS_TIME", 90*time.Second)) // each kind of fault once
}

// TestFaultsWithClaims is TestFaults on nodes that publish their GPUs through DRA, every
// pod claiming its GPUs from a ResourceClaimTemplate: the replicas allocate the claims
// through the same faults (but a failed GPU, which DRA reports through device taints).
// Checked beside the rest: no device in two claims' allocations, and no pod refused by its
// kubelet for a device prepared for another claim.
func TestFaultsWithClaims(t *testing.T) {
	runFaults(t, true, kubetest.EnvDuration(t, "FAULTS_DRA_TIME", 60*time.Second))
}

func runFaults(t *testing.T, claims bool, length time.Duration) {
	bin := kubetest.BuildAllot(t)
	var e *kubetest.Env
	if claims {
		e = kubetest.StartNodes(t, simnode.Spec{Prefix: "dgx", Count: nodes, GPUs: gpusPerNode, DRA: true})
		for _, n := range []int64{1, 2, 4} {
			e.ClaimTemplate(t, fmt.Sprintf("gpu-%d", n), kubetest.DeviceClaim(simnode.DRAClass, n))
		}
	} else {
		e = kubetest.Start(t, nodes, gpusPerNode)
	}
	seed := faultsSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	proxy, err := NewProxy(e.Cluster.Config, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	kubeconfig := filepath.Join(e.Dir, "kubeconfig-proxy")
	if err := writeKubeconfig(proxy.Config(), kubeconfig); err != nil {
		t.Fatal(err)
	}
	quotas := map[string]int{"qa": 12, "qb": 8, "qc": 8, "qd": 4}
	for q, n := range quotas {
		e.Queue(t, q, int64(n), nil)
	}
	check := newChecker(t, e)
	if claims {
		check.watchClaims(e)
	}
	replicas := startReplicas(t, bin, kubeconfig, 2)
	defer replicas.stop()

	ctx, cancel := context.WithTimeout(e.Ctx, length)
	defer cancel()
	t.Logf("seed %d (FAULTS_SEED replays it), %s", seed, length)
	ch := &churn{e: e, rng: rand.New(rand.NewPCG(seed, 1)), quotas: quotas, check: check, claims: claims}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ch.run(ctx) }()

	// Faults, after a warm-up, in turn; the pause once.
	time.Sleep(10 * time.Second)
	done := map[string]int{}
	turn := []string{"kill", "node", "pause", "slow", "gpu"}
	if claims {
		turn = turn[:4] // a failed GPU on a DRA node is a device taint (alpha): not injected
	}
	for i := 0; ctx.Err() == nil; i++ {
		wait := time.Duration(4000+rng.IntN(4000)) * time.Millisecond
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
		kind := turn[i%len(turn)]
		switch {
		case kind == "pause" && done["pause"] > 0:
			kind = "kill"
		}
		switch kind {
		case "kill":
			if replicas.killLeader(t, e) {
				done[kind]++
			}
		case "pause":
			replicas.pauseLeader(t, e, 6*time.Second)
			done[kind]++
		case "slow":
			slowAPIServer(ctx, t, proxy, 8*time.Second)
			done[kind]++
		case "node":
			loseNode(ctx, t, e, check, fmt.Sprintf("dgx-%d", 1+rng.IntN(nodes)), 8*time.Second)
			done[kind]++
		case "gpu":
			if loseGPU(ctx, t, e, check, rng, 8*time.Second) {
				done[kind]++
			}
		}
	}
	wg.Wait()
	time.Sleep(3 * time.Second) // let the last evictions and binds land
	events := evicted(t, e)
	violations := check.finish(events)
	for _, v := range violations {
		t.Error(v)
	}
	evictions := 0
	for _, reasons := range events {
		for _, r := range reasons {
			if r == "Evicted" {
				evictions++
			}
		}
	}
	verdict := "PASS"
	if len(violations) > 0 {
		verdict = "FAIL"
	}
	what := "FAULTS"
	if claims {
		what = "FAULTS WITH CLAIMS"
	}
	t.Logf("%s %s: %s, kills=%d nodes_lost=%d gpus_lost=%d pauses=%d slow_api=%d bind_answers_lost=%d violations=%d pods=%d bound=%d evicted=%d gangs=%d longest_partial_gang=%s",
		what, verdict, length, done["kill"], done["node"], done["gpu"], done["pause"], done["slow"], proxy.Count("lost"), len(violations),
		ch.created, check.everBound(), evictions, ch.gangs, check.longest().Round(10*time.Millisecond))
	for _, kind := range turn {
		if done[kind] == 0 {
			t.Fatalf("the faults were not all injected: %v", done)
		}
	}
	if check.everBound() < ch.created/3 {
		t.Fatalf("only %d of %d pods were ever bound: the scheduler did not keep up", check.everBound(), ch.created)
	}
}

// slowAPIServer makes the API server slow and lossy for d, as the proxy sees it.
func slowAPIServer(ctx context.Context, t *testing.T, proxy *Proxy, d time.Duration) {
	t.Logf("%s: API server slow and lossy for %s", time.Now().Format("15:04:05.000"), d)
	proxy.SetLatency(50*time.Millisecond, 2*time.Second)
	proxy.SetWatchLatency(200*time.Millisecond, time.Second)
	proxy.LoseAnswers(func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/binding") }, 1.0/3)
	defer func() {
		proxy.SetLatency(0, 0)
		proxy.SetWatchLatency(0, 0)
		proxy.LoseAnswers(nil, 0)
	}()
	proxy.Drop()
	select {
	case <-ctx.Done():
		return
	case <-time.After(d / 2):
	}
	proxy.Drop()
	select {
	case <-ctx.Done():
	case <-time.After(d / 2):
	}
}

// loseNode takes a node away for d as a dead kubelet would: NotReady, the unreachable
// taint the node lifecycle controller adds, and its pods deleted as the taint-eviction
// controller deletes them; then brings it back.
func loseNode(ctx context.Context, t *testing.T, e *kubetest.Env, check *checker, name string, d time.Duration) {
	t.Logf("%s: node %s lost for %s", time.Now().Format("15:04:05.000"), name, d)
	// Each write reads the node afresh and is retried on a conflict: the node's agent writes
	// it too (seen once in CI: the taint's update refused, "the object has been modified").
	setReady := func(ready bool) {
		status := corev1.ConditionTrue
		if !ready {
			status = corev1.ConditionUnknown
		}
		nodes := e.Client.CoreV1().Nodes()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := nodes.Get(e.Ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "FaultTest",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			_, err = nodes.UpdateStatus(e.Ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Error(err)
			return
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := nodes.Get(e.Ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnreachable })
			if !ready {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
			}
			_, err = nodes.Update(e.Ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Error(err)
		}
	}
	check.nodeDown(name)
	setReady(false)
	pods, err := e.Client.CoreV1().Pods("default").List(e.Ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err == nil {
		zero := int64(0)
		for _, p := range pods.Items {
			check.deletedByFault(p.Name)
			_ = e.Client.CoreV1().Pods("default").Delete(e.Ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	setReady(true)
	check.nodeUp(name)
}

// loseGPU fails one GPU under a running pod for d as the node's agent reports an XID 79
// (the GPU fallen off the bus): the node's unhealthy list names it and, under the evict
// policy, the pod on it is deleted so that its owner makes it again elsewhere; then the GPU
// recovers. False when no pod runs.
func loseGPU(ctx context.Context, t *testing.T, e *kubetest.Env, check *checker, rng *rand.Rand, d time.Duration) bool {
	pods, err := e.Client.CoreV1().Pods("default").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	var on []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Annotations[v1alpha1.AnnotationGPUs] != "" && kubetest.Running(&p) {
			on = append(on, p)
		}
	}
	if len(on) == 0 {
		return false
	}
	p := on[rng.IntN(len(on))]
	node := p.Spec.NodeName
	gpu, err := strconv.Atoi(strings.Split(p.Annotations[v1alpha1.AnnotationGPUs], ",")[0])
	if err != nil {
		return false
	}
	t.Logf("%s: GPU %d of %s lost for %s (under %s)", time.Now().Format("15:04:05.000"), gpu, node, d, p.Name)
	mark := func(list string) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationGPUUnhealthy: list}}})
		if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
	}
	check.gpuDown(node, gpu)
	list, _ := json.Marshal([]v1alpha1.UnhealthyGPU{{Index: gpu, Reason: "XID 79: GPU has fallen off the bus"}})
	mark(string(list))
	check.deletedByFault(p.Name)
	_ = e.Client.CoreV1().Pods("default").Delete(e.Ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	mark("")
	check.gpuUp(node, gpu)
	return true
}

// writeKubeconfig writes a kubeconfig for rc (a server and its CA; no credentials).
func writeKubeconfig(rc *rest.Config, path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	return clientcmd.WriteToFile(*cfg, path)
}

// replicas runs scheduler processes, restarting each that ends.
type replicas struct {
	mu    sync.Mutex
	procs map[string]*exec.Cmd // by identity
	n     int
	bin   string
	kube  string
	dir   string
	done  bool
}

func startReplicas(t *testing.T, bin, kubeconfig string, n int) *replicas {
	r := &replicas{procs: map[string]*exec.Cmd{}, bin: bin, kube: kubeconfig, dir: t.TempDir()}
	for i := 0; i < n; i++ {
		r.spawn(t, i)
	}
	return r
}

func (r *replicas) spawn(t *testing.T, slot int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.n++
	id := fmt.Sprintf("r%d-%d", slot, r.n)
	log, err := os.Create(filepath.Join(r.dir, id+".log"))
	if err != nil {
		t.Error(err)
		return
	}
	cmd := exec.Command(r.bin, "scheduler", "--kubeconfig", r.kube, "--leader-elect", "--identity", id)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return
	}
	r.procs[id] = cmd
	go func() {
		_ = cmd.Wait()
		log.Close()
		r.mu.Lock()
		delete(r.procs, id)
		r.mu.Unlock()
		r.spawn(t, slot) // a supervisor restarts every exit, as a Deployment would
	}()
}

// leader is the process holding the Lease, if it is one of ours.
func (r *replicas) leader(t *testing.T, e *kubetest.Env) (string, *exec.Cmd) {
	l, err := e.Client.CoordinationV1().Leases("kube-system").Get(e.Ctx, "allot-scheduler", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return *l.Spec.HolderIdentity, r.procs[*l.Spec.HolderIdentity]
}

func (r *replicas) killLeader(t *testing.T, e *kubetest.Env) bool {
	id, cmd := r.leader(t, e)
	if cmd == nil {
		return false
	}
	t.Logf("%s: SIGKILL leader %s", time.Now().Format("15:04:05.000"), id)
	return cmd.Process.Signal(syscall.SIGKILL) == nil
}

func (r *replicas) pauseLeader(t *testing.T, e *kubetest.Env, d time.Duration) {
	id, cmd := r.leader(t, e)
	if cmd == nil {
		return
	}
	t.Logf("%s: SIGSTOP leader %s for %s", time.Now().Format("15:04:05.000"), id, d)
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGCONT)
}

func (r *replicas) stop() {
	r.mu.Lock()
	r.done = true
	for _, cmd := range r.procs {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	r.mu.Unlock()
}

// churn keeps each queue's demand near a target that moves, so that queues go idle and
// come back (reclaim) and the cluster stays oversubscribed.
type churn struct {
	e              *kubetest.Env
	rng            *rand.Rand
	quotas         map[string]int
	check          *checker
	created, gangs int
	seq            int
	claims         bool // pods claim their GPUs through DRA templates gpu-1, gpu-2, gpu-4
}

func (c *churn) run(ctx context.Context) {
	target := map[string]int{}
	next := time.Now()
	for ctx.Err() == nil {
		if time.Now().After(next) {
			for q, quota := range c.quotas {
				target[q] = quota * []int{1, 2, 3, 4}[c.rng.IntN(4)] / 2 // 0.5–2× quota
			}
			next = time.Now().Add(time.Duration(10+c.rng.IntN(10)) * time.Second)
		}
		c.round(ctx, target)
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *churn) round(ctx context.Context, target map[string]int) {
	pods, err := c.e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	demand := map[string]int{}
	done := map[string][]string{} // job → its pods, when one of them finished
	jobOf := map[string][]string{}
	for _, p := range pods.Items {
		job := p.Labels["job"]
		jobOf[job] = append(jobOf[job], p.Name)
		if p.Status.Phase == corev1.PodSucceeded {
			done[job] = nil
		}
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded {
			demand[p.Labels[v1alpha1.LabelQueue]] += int(podGPUs(&p))
		}
	}
	// Finished jobs go, whole; now and then a running one is deleted by its user.
	for job := range done {
		c.deleteJob(ctx, job, jobOf[job])
	}
	if c.rng.IntN(10) == 0 {
		for _, p := range pods.Items {
			if _, finished := done[p.Labels["job"]]; !finished && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				c.deleteJob(ctx, p.Labels["job"], jobOf[p.Labels["job"]])
				break
			}
		}
	}
	for q := range c.quotas {
		for demand[q] < target[q] && ctx.Err() == nil {
			demand[q] += c.submit(ctx, q)
		}
	}
}

func (c *churn) deleteJob(ctx context.Context, job string, pods []string) {
	c.check.deletedByUser(job)
	for _, name := range pods {
		_ = c.e.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{})
	}
	if strings.HasPrefix(job, "g") {
		_ = c.e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Delete(ctx, job, metav1.DeleteOptions{})
	}
}

// submit creates a single pod or a gang and returns its GPUs.
func (c *churn) submit(ctx context.Context, queue string) int {
	c.seq++
	run := time.Duration(5+c.rng.IntN(15)) * time.Second
	ann := map[string]string{simnode.AnnotationDuration: run.String(), simnode.AnnotationStopAfter: "1s"}
	if c.rng.IntN(4) > 0 {
		job := fmt.Sprintf("s%d", c.seq)
		gpus := []int64{1, 2, 4}[c.rng.IntN(3)]
		c.pod(ctx, job, job, queue, gpus, nil, ann)
		return int(gpus)
	}
	job := fmt.Sprintf("g%d", c.seq)
	n, gpus := 2+c.rng.IntN(2), int64(1+c.rng.IntN(2))
	if err := c.e.CreatePodGroup(ctx, job, queue, n); err != nil {
		return 0
	}
	c.check.gang(job, n)
	c.gangs++
	for i := 0; i < n; i++ {
		c.pod(ctx, job, fmt.Sprintf("%s-%d", job, i), queue, gpus, map[string]string{v1alpha1.LabelPodGroup: job}, ann)
	}
	return n * int(gpus)
}

func (c *churn) pod(ctx context.Context, job, name, queue string, gpus int64, labels, ann map[string]string) {
	spec := kubetest.PodSpec{Name: name, Queue: queue, GPUs: gpus, Labels: labels, Annotations: ann, Job: job}
	if c.claims {
		spec.GPUs, spec.Claims = 0, kubetest.FromTemplate(fmt.Sprintf("gpu-%d", gpus))
	}
	p := spec.Pod()
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("100m")
	if _, err := c.e.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err == nil {
		c.created++
		c.check.created(name, job)
	}
}

// checker watches pods and checks the invariants at every event.
type checker struct {
	mu      sync.Mutex
	t       *testing.T
	store   cache.Store
	minimum map[string]int       // gang → minMember
	user    map[string]bool      // jobs the churn deleted
	jobOf   map[string]string    // pod → job
	open    map[string]time.Time // gang → since when it runs partly
	worst   time.Duration        // the longest partial window seen
	bound   map[string]bool      // pods ever bound
	byFault map[string]bool      // pods deleted with a lost node
	down    map[string]time.Time // nodes lost, since when
	failed  map[dev]time.Time    // GPUs failed, since when
	limit   time.Duration        // how long a gang may run partly (partialLimit unless slowed)
	fails   []string
	refused map[string]bool // pods the kubelet refused, reported once
	claims  cache.Store     // the ResourceClaims, with claims (watchClaims)
}

// watchClaims has the checker look at the ResourceClaims too.
func (c *checker) watchClaims(e *kubetest.Env) {
	f := informers.NewSharedInformerFactoryWithOptions(e.Client, 0, informers.WithNamespace("default"))
	inf := f.Resource().V1().ResourceClaims().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.look() }, UpdateFunc: func(_, _ any) { c.look() }, DeleteFunc: func(any) { c.look() }})
	f.Start(e.Ctx.Done())
	f.WaitForCacheSync(e.Ctx.Done())
	c.mu.Lock()
	c.claims = inf.GetStore()
	c.mu.Unlock()
}

// podGPUs is what a churn pod asks for: nvidia.com/gpu, or the count of its claim's
// template (gpu-N).
func podGPUs(p *corev1.Pod) int64 {
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimTemplateName != nil {
			n, _ := strconv.ParseInt(strings.TrimPrefix(*pc.ResourceClaimTemplateName, "gpu-"), 10, 64)
			return n
		}
	}
	return v1alpha1.WholeGPUs(p)
}

// dev is one GPU of one node.
type dev struct {
	node string
	gpu  int
}

func (c *checker) gpuDown(n string, g int) {
	c.mu.Lock()
	c.failed[dev{n, g}] = time.Now()
	c.mu.Unlock()
}
func (c *checker) gpuUp(n string, g int) { c.mu.Lock(); delete(c.failed, dev{n, g}); c.mu.Unlock() }

func (c *checker) nodeDown(n string) { c.mu.Lock(); c.down[n] = time.Now(); c.mu.Unlock() }
func (c *checker) nodeUp(n string)   { c.mu.Lock(); delete(c.down, n); c.mu.Unlock() }
func (c *checker) deletedByFault(pod string) {
	c.mu.Lock()
	c.byFault[pod] = true
	c.mu.Unlock()
}

func newChecker(t *testing.T, e *kubetest.Env) *checker {
	c := &checker{t: t, limit: partialLimit, minimum: map[string]int{}, user: map[string]bool{}, jobOf: map[string]string{},
		open: map[string]time.Time{}, bound: map[string]bool{}, byFault: map[string]bool{}, down: map[string]time.Time{}, failed: map[dev]time.Time{},
		refused: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(e.Client, 0, informers.WithNamespace("default"))
	inf := f.Core().V1().Pods().Informer()
	c.store = inf.GetStore()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.look() }, UpdateFunc: func(_, _ any) { c.look() }, DeleteFunc: func(any) { c.look() }})
	f.Start(e.Ctx.Done())
	f.WaitForCacheSync(e.Ctx.Done())
	go func() { // and twice a second, for windows that close no event would show
		for e.Ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			c.look()
		}
	}()
	return c
}

func (c *checker) gang(job string, n int) { c.mu.Lock(); c.minimum[job] = n; c.mu.Unlock() }
func (c *checker) created(pod, job string) {
	c.mu.Lock()
	c.jobOf[pod] = job
	c.mu.Unlock()
}
func (c *checker) deletedByUser(job string) {
	c.mu.Lock()
	c.user[job] = true
	delete(c.open, job) // a window the user ended is not the scheduler's
	c.mu.Unlock()
}

func (c *checker) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if len(c.fails) < 20 {
		c.fails = append(c.fails, time.Now().Format("15:04:05.000")+" "+msg)
	}
}

// look checks the invariants on the pods as the watch last delivered them.
func (c *checker) look() {
	c.mu.Lock()
	defer c.mu.Unlock()
	holder := map[dev]string{}
	perNode := map[string]int64{}
	members := map[string]int{}
	finished := map[string]bool{}
	var failedByKubelet []*corev1.Pod
	for _, o := range c.store.List() {
		p := o.(*corev1.Pod)
		job := p.Labels["job"]
		if p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" && !c.refused[p.Name] {
			c.refused[p.Name] = true
			failedByKubelet = append(failedByKubelet, p)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			finished[job] = true
			continue
		}
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		fresh := !c.bound[p.Name] // first seen bound now
		if since, down := c.down[p.Spec.NodeName]; down && fresh && time.Since(since) > 2*time.Second {
			c.fail("pod %s bound to %s, NotReady for %s", p.Name, p.Spec.NodeName, time.Since(since).Round(time.Millisecond))
		}
		c.bound[p.Name] = true
		members[job]++
		gpus := podGPUs(p)
		perNode[p.Spec.NodeName] += gpus
		idx := strings.Split(p.Annotations[v1alpha1.AnnotationGPUs], ",")
		if int64(len(idx)) != gpus {
			c.fail("pod %s holds %d GPUs but names indices %q", p.Name, gpus, p.Annotations[v1alpha1.AnnotationGPUs])
		}
		for _, s := range idx {
			g, err := strconv.Atoi(s)
			if err != nil || g < 0 || g >= gpusPerNode {
				c.fail("pod %s names GPU %q on %s", p.Name, s, p.Spec.NodeName)
				continue
			}
			if since, down := c.failed[dev{p.Spec.NodeName, g}]; down && fresh && time.Since(since) > 2*time.Second {
				c.fail("pod %s bound to GPU %d of %s, failed for %s", p.Name, g, p.Spec.NodeName, time.Since(since).Round(time.Millisecond))
			}
			if other, ok := holder[dev{p.Spec.NodeName, g}]; ok {
				c.fail("GPU %d of %s booked twice: %s and %s", g, p.Spec.NodeName, other, p.Name)
			}
			holder[dev{p.Spec.NodeName, g}] = p.Name
		}
	}
	for node, n := range perNode {
		if n > gpusPerNode {
			c.fail("%s has %d GPUs booked", node, n)
		}
	}
	for _, p := range failedByKubelet {
		c.fail("pod %s refused by the kubelet of %s: %s", p.Name, p.Spec.NodeName, p.Status.Message)
	}
	if c.claims != nil {
		held := map[string]string{}
		for _, o := range c.claims.List() {
			cl := o.(*resourcev1.ResourceClaim)
			if cl.Status.Allocation == nil {
				continue
			}
			for _, r := range cl.Status.Allocation.Devices.Results {
				d := r.Pool + "/" + r.Device
				if other, ok := held[d]; ok && other != cl.Name {
					c.fail("device %s allocated to claims %s and %s", d, other, cl.Name)
				}
				held[d] = cl.Name
			}
		}
	}
	now := time.Now()
	for job, min := range c.minimum {
		n := members[job]
		partly := n > 0 && n < min && !finished[job] && !c.user[job]
		since, open := c.open[job]
		switch {
		case partly && !open:
			c.open[job] = now
		case !partly && open:
			delete(c.open, job)
		case partly && open && now.Sub(since) > c.worst:
			c.worst = now.Sub(since)
			if c.worst > c.limit {
				c.fail("gang %s has run %d of its %d pods for %s", job, n, min, c.worst.Round(time.Millisecond))
			}
		}
	}
}

func (c *checker) everBound() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.bound) }
func (c *checker) longest() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.worst
}

// evicted lists, per pod, the reasons of the Events about it.
func evicted(t *testing.T, e *kubetest.Env) map[string][]string {
	evs, err := e.Client.CoreV1().Events("default").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, ev := range evs.Items {
		out[ev.InvolvedObject.Name] = append(out[ev.InvolvedObject.Name], ev.Reason)
	}
	return out
}

// finish reports the violations and checks that no pod was lost: each one the churn
// created and did not delete exists, or was evicted with an Event saying so.
func (c *checker) finish(events map[string][]string) []string {
	c.look()
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]bool{}
	for _, o := range c.store.List() {
		live[o.(*corev1.Pod).Name] = true
	}
	var lost []string
	for pod, job := range c.jobOf {
		if live[pod] || c.user[job] || c.byFault[pod] || slices.Contains(events[pod], "Evicted") {
			continue
		}
		lost = append(lost, pod)
	}
	sort.Strings(lost)
	out := append([]string(nil), c.fails...)
	if len(lost) > 0 {
		out = append(out, fmt.Sprintf("%d pods lost (gone without being deleted or an Evicted event): %v", len(lost), lost))
	}
	return out
}

// The checker sees what it is there to see: two pods on one GPU, a pod put on a failed
// GPU, and a pod lost.
func TestCheckerSeesViolations(t *testing.T) {
	e := kubetest.Start(t, 1, gpusPerNode)
	check := newChecker(t, e)
	for _, name := range []string{"a", "b"} {
		p := kubetest.PodSpec{Name: name, GPUs: 1, Annotations: map[string]string{v1alpha1.AnnotationGPUs: "3"}}.Pod()
		p.Spec.NodeName = "dgx-1" // bound by hand, past any scheduler
		if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	check.mu.Lock()
	check.failed[dev{"dgx-1", 5}] = time.Now().Add(-3 * time.Second) // a GPU failed 3 s ago
	check.mu.Unlock()
	d := kubetest.PodSpec{Name: "d", GPUs: 1, Annotations: map[string]string{v1alpha1.AnnotationGPUs: "5"}}.Pod()
	d.Spec.NodeName = "dgx-1"
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the pod on the failed GPU seen", func() (bool, string) {
		check.mu.Lock()
		defer check.mu.Unlock()
		return slices.ContainsFunc(check.fails, func(f string) bool { return strings.Contains(f, "pod d bound to GPU 5 of dgx-1, failed for") }), fmt.Sprint(check.fails)
	})
	check.created("c", "c") // made, never deleted, never evicted: lost
	e.WaitFor(t, "the double booking seen", func() (bool, string) {
		check.mu.Lock()
		defer check.mu.Unlock()
		// In any order: the checker may look at the pod on the failed GPU first.
		return slices.ContainsFunc(check.fails, func(f string) bool { return strings.Contains(f, "GPU 3 of dgx-1 booked twice") }), fmt.Sprint(check.fails)
	})
	if v := check.finish(nil); len(v) < 2 || !strings.Contains(v[len(v)-1], "1 pods lost") || !strings.Contains(v[len(v)-1], "[c]") {
		t.Fatalf("violations at the end: %q", v)
	}
}

// faultsSeed is the seed of a run's randomness: FAULTS_SEED where set, to replay a failed
// run's faults (the test logs its seed), else the clock.
func faultsSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("FAULTS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FAULTS_SEED=%q: a number, as a failed run logs it", v)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}
