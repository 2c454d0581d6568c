package multicluster

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"
)

// The reasons of a WorkerCluster's Ready condition.
const (
	ReasonConnected     = "Connected"
	ReasonSecretMissing = "SecretMissing"
	ReasonBadKubeconfig = "BadKubeconfig"
	ReasonUnauthorized  = "Unauthorized"
	ReasonUnreachable   = "Unreachable"
)

// worker is the manager's connection to one worker cluster: its clients, and informers on
// what dispatch reads there (nodes, pods, Queues, Jobs).
type worker struct {
	name string
	// kubeconfig is the Secret's content the connection was made from: a changed Secret
	// makes a new connection.
	kubeconfig string
	client     kubernetes.Interface
	allot      versioned.Interface
	cancel     context.CancelFunc

	nodes  cache.SharedIndexInformer
	pods   cache.SharedIndexInformer
	queues cache.SharedIndexInformer
	jobs   cache.SharedIndexInformer

	// namespaces are those known to exist there (made by the manager or found).
	namespaces sync.Map

	mu sync.Mutex
	// ready is whether the last probe answered; reason and message say why not.
	ready           bool
	reason, message string
	// lastSeen is when it last answered; lostSince when it stopped (zero while it answers).
	lastSeen, lostSince time.Time
	synced              bool
	// renewed is when the manager's lease there was last renewed; leaseErr why the last
	// try failed.
	renewed  time.Time
	leaseErr string
}

func (w *worker) leaseRenewed(at time.Time, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.renewed, w.leaseErr = at, ""
	} else {
		w.leaseErr = err.Error()
	}
}

// lease is when the manager's lease there was last renewed, and why not since.
func (w *worker) lease() (time.Time, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.renewed, w.leaseErr
}

// health is the worker's state for the manager's decisions and its status.
func (w *worker) health() (ready bool, reason, message string, lastSeen, lostSince time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready, w.reason, w.message, w.lastSeen, w.lostSince
}

// connect reads the kubeconfig and makes the worker's clients; a kubeconfig that does not
// read is refused with the cluster's name and what is wrong.
func connect(name, kubeconfig string, tweak func(*rest.Config)) (*worker, error) {
	if kubeconfig == "" {
		return nil, fmt.Errorf("worker cluster %s: the kubeconfig is empty", name)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("worker cluster %s: the kubeconfig does not read: %v", name, err)
	}
	if _, err := url.Parse(cfg.Host); err != nil || cfg.Host == "" {
		return nil, fmt.Errorf("worker cluster %s: the kubeconfig's server %q is not a URL", name, cfg.Host)
	}
	cfg.Timeout = 10 * time.Second
	cfg.QPS, cfg.Burst = 200, 400
	if tweak != nil {
		tweak(cfg)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("worker cluster %s: %v", name, err)
	}
	allot, err := allotclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("worker cluster %s: %v", name, err)
	}
	return &worker{name: name, kubeconfig: kubeconfig, client: client, allot: allot}, nil
}

// start runs the worker's informers until stop; only the Jobs the manager dispatched are
// watched there, by their origin label.
func (w *worker) start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	f := informers.NewSharedInformerFactory(w.client, 0)
	w.nodes = f.Core().V1().Nodes().Informer()
	w.pods = f.Core().V1().Pods().Informer()
	jf := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = LabelOrigin
	}))
	w.jobs = jf.Batch().V1().Jobs().Informer()
	af := allotinformers.NewSharedInformerFactory(w.allot, 0)
	w.queues = af.Allot().V1alpha1().Queues().Informer()
	f.Start(ctx.Done())
	jf.Start(ctx.Done())
	af.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), w.nodes.HasSynced, w.pods.HasSynced, w.jobs.HasSynced, w.queues.HasSynced) {
			w.mu.Lock()
			w.synced = true
			w.mu.Unlock()
		}
	}()
}

func (w *worker) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// isSynced says whether the informers hold the worker's objects: until then nothing is
// concluded from what they lack.
func (w *worker) isSynced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// probe asks the worker for one node: an answer makes it ready; a refusal of the
// credentials or no answer says so, and since when it has not answered.
func (w *worker) probe(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.ready, w.reason, w.message, w.lastSeen, w.lostSince = true, ReasonConnected, "", now, time.Time{}
		return
	}
	w.ready = false
	if w.lostSince.IsZero() {
		w.lostSince = now
	}
	switch {
	case apierrors.IsUnauthorized(err):
		w.reason, w.message = ReasonUnauthorized, fmt.Sprintf("worker cluster %s refused the manager's credentials: %v", w.name, err)
	case apierrors.IsForbidden(err):
		w.reason, w.message = ReasonUnauthorized, fmt.Sprintf("worker cluster %s: the manager's user may not list nodes there: %v", w.name, err)
	default:
		w.reason = ReasonUnreachable
		w.message = fmt.Sprintf("worker cluster %s does not answer: %v", w.name, err)
	}
}

// gpuSummary counts the worker's GPU nodes, their whole GPUs and those no running pod
// holds, and their models, for the WorkerCluster's status and allot clusters.
func (w *worker) gpuSummary() (nodes, gpus, free int32, models []string) {
	held := map[string]int64{}
	for _, o := range w.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			if q, ok := c.Resources.Limits[gpuResource]; ok {
				held[p.Spec.NodeName] += q.Value()
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range w.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		q, ok := n.Status.Allocatable[gpuResource]
		if !ok || q.Value() == 0 {
			continue
		}
		nodes++
		gpus += int32(q.Value())
		if f := q.Value() - held[n.Name]; f > 0 && !n.Spec.Unschedulable {
			free += int32(f)
		}
		if m := n.Labels[v1alpha1.LabelGPUProduct]; m != "" && !seen[m] {
			seen[m] = true
			models = append(models, m)
		}
	}
	sort.Strings(models)
	return nodes, gpus, free, models
}

// dispatchedJobs are the copies on the worker of the manager's Jobs, by the manager's UID.
func (w *worker) dispatchedJobs() map[string]*batchv1.Job {
	out := map[string]*batchv1.Job{}
	for _, o := range w.jobs.GetStore().List() {
		j := o.(*batchv1.Job)
		out[j.Labels[LabelOrigin]] = j
	}
	return out
}

// queue is the worker's Queue of that name, nil when it has none.
func (w *worker) queue(name string) *v1alpha1.Queue {
	o, ok, _ := w.queues.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	return o.(*v1alpha1.Queue)
}

const gpuResource = corev1.ResourceName(v1alpha1.GPUResource)
