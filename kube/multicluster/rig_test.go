package multicluster_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// rig is a manager cluster and its workers, each a real control plane: the manager with
// no nodes, each worker with simulated GPU nodes and Allot's whole stack (with the fence).
// The manager reaches each worker through a TCP proxy the test can cut.
type rig struct {
	manager *kubetest.Env
	workers map[string]*kubetest.Env
	proxies map[string]*partition
	opts    multicluster.Options
	stop    context.CancelFunc
	done    chan struct{}
}

// testOptions are short: a worker is fenced 3 s after it is cut off, and its work
// dispatched again after 9 s.
var testOptions = multicluster.Options{Interval: 300 * time.Millisecond, LeaseDuration: 3 * time.Second, LostAfter: 9 * time.Second}

func newRig(t testing.TB, workers map[string][]simnode.Spec, opts multicluster.Options) *rig {
	t.Helper()
	r := &rig{manager: kubetest.StartNodes(t), workers: map[string]*kubetest.Env{}, proxies: map[string]*partition{}, opts: opts}
	mustNamespace(t, r.manager, "allot-system")
	for name, specs := range workers {
		e := kubetest.StartNodes(t, specs...)
		if _, err := stack.LocalWith(e.Ctx, e.Cluster.Config, e.Cluster.Config, e.Dir, "", stack.Options{
			Scheduler: scheduler.Options{Interval: 200 * time.Millisecond}, FenceNamespace: "allot-system"}); err != nil {
			t.Fatal(err)
		}
		p := newPartition(t, e.Cluster.Config.Host)
		r.workers[name], r.proxies[name] = e, p
		r.register(t, name, kubeconfigVia(t, e.Cluster.Config, p.addr()))
	}
	r.start(t)
	return r
}

// register writes a worker's kubeconfig into a Secret and its WorkerCluster.
func (r *rig) register(t testing.TB, name, kubeconfig string) {
	t.Helper()
	ctx := r.manager.Ctx
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Namespace: "allot-system"},
		Data: map[string][]byte{"kubeconfig": []byte(kubeconfig)}}
	if _, err := r.manager.Client.CoreV1().Secrets("allot-system").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wc := &v1alpha1.WorkerCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WorkerClusterSpec{KubeconfigSecret: v1alpha1.SecretKey{Namespace: "allot-system", Name: name + "-kubeconfig"}}}
	if _, err := r.manager.Allot.AllotV1alpha1().WorkerClusters().Create(ctx, wc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// start runs a manager; restart stops it and runs a new one, as a replica restarted.
func (r *rig) start(t testing.TB) {
	ctx, cancel := context.WithCancel(r.manager.Ctx)
	r.stop, r.done = cancel, make(chan struct{})
	rc := rest.CopyConfig(r.manager.Cluster.Config)
	rc.QPS, rc.Burst = 500, 1000
	m := multicluster.New(kubernetes.NewForConfigOrDie(rc), allotclient.NewForConfigOrDie(rc), r.opts)
	go func() { defer close(r.done); m.Run(ctx) }()
	t.Cleanup(func() { r.halt() })
}

func (r *rig) halt() {
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop = nil
	}
}

// job is a Job handed to the manager: pods × gpus each, in a queue.
func job(name, queue string, pods, gpus int32, annotations map[string]string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: map[string]string{v1alpha1.LabelQueue: queue},
		Annotations: annotations},
		Spec: batchv1.JobSpec{ManagedBy: ptr.To(multicluster.ManagedBy), Parallelism: &pods, Completions: &pods,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "train:1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						corev1.ResourceName(v1alpha1.GPUResource): *resource.NewQuantity(int64(gpus), resource.DecimalSI)}}}}}}}}
}

func (r *rig) submit(t *testing.T, j *batchv1.Job) *batchv1.Job {
	t.Helper()
	mustNamespace(t, r.manager, j.Namespace)
	got, err := r.manager.Client.BatchV1().Jobs(j.Namespace).Create(r.manager.Ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// managerJob reads a Job on the manager.
func (r *rig) managerJob(t *testing.T, name string) *batchv1.Job {
	t.Helper()
	j, err := r.manager.Client.BatchV1().Jobs("team").Get(r.manager.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// runningIn waits until the Job was dispatched to one cluster and all its pods run there;
// it returns the cluster and the nodes its pods run on.
func (r *rig) runningIn(t *testing.T, name string, pods int) (string, []string) {
	t.Helper()
	var cluster string
	var nodes []string
	r.manager.WaitFor(t, "job "+name+" running on a worker", func() (bool, string) {
		j := r.managerJob(t, name)
		cluster = j.Annotations[multicluster.AnnotationCluster]
		w := r.workers[cluster]
		if w == nil {
			return false, "not dispatched; waiting: " + j.Annotations[multicluster.AnnotationWaiting]
		}
		nodes = nil
		for _, p := range w.Pods(t, "team") {
			if p.Labels["job-name"] == name && kubetest.Running(p) && p.DeletionTimestamp == nil {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		return len(nodes) == pods, "dispatched to " + cluster + "; running there: " + strings.Join(nodes, ", ")
	})
	return cluster, nodes
}

func (r *rig) remove(t *testing.T, names ...string) {
	t.Helper()
	bg := metav1.DeletePropagationBackground
	for _, n := range names {
		if err := r.manager.Client.BatchV1().Jobs("team").Delete(r.manager.Ctx, n, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
	}
	r.manager.WaitFor(t, "the copies of "+strings.Join(names, ", ")+" gone from the workers", func() (bool, string) {
		for c, w := range r.workers {
			for _, p := range w.Pods(t, "team") {
				for _, n := range names {
					if p.Labels["job-name"] == n {
						return false, "pod " + p.Name + " still on " + c
					}
				}
			}
		}
		return true, ""
	})
}

func mustNamespace(t testing.TB, e *kubetest.Env, ns string) {
	t.Helper()
	_, err := e.Client.CoreV1().Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

// kubeconfigVia is a kubeconfig for the cluster rc reaches, through addr instead.
func kubeconfigVia(t testing.TB, rc *rest.Config, addr string) string {
	t.Helper()
	via := rest.CopyConfig(rc)
	via.Host = "https://" + addr
	b, err := localcluster.Kubeconfig(via)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// partition forwards TCP to an API server until cut: a cut closes every open connection
// and refuses new ones, as a network partition between the manager and a worker would.
type partition struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newPartition(t testing.TB, host string) *partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, target: strings.TrimPrefix(host, "https://"), conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.setCut(true) })
	return p
}

func (p *partition) addr() string { return p.ln.Addr().String() }

func (p *partition) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = true
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *partition) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[s] = true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	_, _ = io.Copy(c, s)
	_ = c.Close()
}

// setCut cuts the link (closing what is open) or heals it.
func (p *partition) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}
