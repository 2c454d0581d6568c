// Package dashboard serves Allot's web dashboard: the pages (built into package web and
// embedded in the binary), a JSON state made from informers, and a stream that pushes a
// new state whenever the cluster changes. It only reads, with the identity it is given.
package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	coordinationv1 "k8s.io/api/coordination/v1"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/workload"
	"github.com/allot-dev/allot/web"
)

// Options tune the server; the zero value serves a real cluster.
type Options struct {
	Clock clock.WithTicker
	// SampleEvery is the history charts' step; Keep how many points they hold.
	SampleEvery time.Duration
	Keep        int
	// Settle gathers a burst of changes (a gang binding) into one new state.
	Settle time.Duration
}

func (o *Options) defaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.Keep <= 0 {
		o.Keep = 720 // an hour at 5 s
	}
	if o.Settle <= 0 {
		o.Settle = 250 * time.Millisecond
	}
}

// Server holds the informers and the latest state.
type Server struct {
	opts    Options
	factory informers.SharedInformerFactory
	dynf    dynamicinformer.DynamicSharedInformerFactory
	// leaseF watches the agents' Leases, which carry their GPUs' load.
	leaseF informers.SharedInformerFactory
	leases cache.SharedIndexInformer
	pods   cache.SharedIndexInformer
	events cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	jobs   cache.SharedIndexInformer
	deps   cache.SharedIndexInformer
	rss    cache.SharedIndexInformer
	queues cache.SharedIndexInformer
	// topologies is nil where the Topology CRD is not installed.
	topologies cache.SharedIndexInformer
	dirty      chan struct{}
	assets     http.Handler
	// synced is set once every informer has listed: until then the page would show an
	// empty cluster, so /healthz says not ready (a missing permission keeps it so).
	synced atomic.Bool

	mu      sync.Mutex
	state   []byte // the latest State as JSON
	version uint64
	changed chan struct{} // closed and replaced when state changes
	history []Sample
}

// New makes a server that reads the cluster with rc's identity.
func New(rc *rest.Config, opts Options) (*Server, error) {
	opts.defaults()
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dist, err := fs.Sub(web.Dist, "dist")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, dirty: make(chan struct{}, 1), changed: make(chan struct{}),
		factory: informers.NewSharedInformerFactory(client, 0),
		dynf:    dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
		assets:  http.FileServerFS(dist)}
	s.leaseF = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(v1alpha1.SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.LabelAgentLease }))
	s.leases = s.leaseF.Coordination().V1().Leases().Informer()
	s.pods = s.factory.Core().V1().Pods().Informer()
	s.events = s.factory.Core().V1().Events().Informer()
	s.nodes = s.factory.Core().V1().Nodes().Informer()
	s.jobs = s.factory.Batch().V1().Jobs().Informer()
	s.deps = s.factory.Apps().V1().Deployments().Informer()
	s.rss = s.factory.Apps().V1().ReplicaSets().Informer()
	s.queues = s.dynf.ForResource(v1alpha1.Queues).Informer()
	if workload.Served(client.Discovery(), v1alpha1.Topologies) {
		s.topologies = s.dynf.ForResource(v1alpha1.Topologies).Informer()
	}
	for _, inf := range s.informers() {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { s.touch() },
			UpdateFunc: func(any, any) { s.touch() },
			DeleteFunc: func(any) { s.touch() },
		}); err != nil {
			return nil, err
		}
	}
	s.state, _ = json.Marshal(State{Nodes: []inspect.Node{}, Workloads: []inspect.Workload{}, Queues: []Queue{}, History: []Sample{}})
	return s, nil
}

func (s *Server) informers() []cache.SharedIndexInformer {
	out := []cache.SharedIndexInformer{s.pods, s.events, s.nodes, s.jobs, s.deps, s.rss, s.queues, s.leases}
	if s.topologies != nil {
		out = append(out, s.topologies)
	}
	return out
}

// topology is the Topology the Nodes page groups by, if the cluster has one to pick.
func (s *Server) topology() *convert.Levels {
	if s.topologies == nil {
		return nil
	}
	if lv, ok := convert.ViewTopology(s.topologies.GetStore().List()); ok {
		return &lv
	}
	return nil
}

func (s *Server) touch() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// Run starts the informers and keeps the state current until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	s.dynf.Start(ctx.Done())
	s.leaseF.Start(ctx.Done())
	for _, inf := range s.informers() {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			if ctx.Err() != nil {
				return nil
			}
			return errors.New("dashboard: informers did not sync")
		}
	}
	s.rebuild()
	s.synced.Store(true)
	tick := s.opts.Clock.NewTicker(s.opts.SampleEvery)
	defer tick.Stop()
	var took time.Duration // how long the last rebuild took
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.dirty:
			// Let a burst settle so a gang's binds arrive as one change. Under a stream of
			// changes on a large cluster, wait longer, so that rebuilding takes at most a
			// tenth of a core from the control plane it shares the machine with.
			select {
			case <-ctx.Done():
				return nil
			case <-s.opts.Clock.After(max(s.opts.Settle, 9*took)):
			}
			start := s.opts.Clock.Now()
			s.rebuild()
			took = s.opts.Clock.Since(start)
		case <-tick.C():
			s.rebuild()
		}
	}
}

func list[T any](inf cache.SharedIndexInformer) []*T { return typed[T](inf.GetStore().List()) }

func (s *Server) queueObjects() []*v1alpha1.Queue {
	var out []*v1alpha1.Queue
	for _, o := range s.queues.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var q v1alpha1.Queue
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err == nil {
			out = append(out, &q)
		}
	}
	return out
}

// rebuild makes a new state from the caches, adds a history point when one is due, and
// wakes the streams.
func (s *Server) rebuild() {
	st := Build(Input{Now: s.opts.Clock.Now(), Nodes: inspect.WithLoad(list[corev1.Node](s.nodes), list[coordinationv1.Lease](s.leases)), Queues: s.queueObjects(), Topology: s.topology(),
		Objects: inspect.Objects{NodeUUIDs: inspect.NodeUUIDs(list[corev1.Node](s.nodes)), Pods: list[corev1.Pod](s.pods), Jobs: list[batchv1.Job](s.jobs), Deployments: list[appsv1.Deployment](s.deps),
			ReplicaSets: list[appsv1.ReplicaSet](s.rss), Refusals: inspect.Refusals(list[corev1.Event](s.events))}})
	s.mu.Lock()
	defer s.mu.Unlock()
	// History keeps a point every SampleEvery; the charts end at the present moment.
	pt := sample(&st)
	if n := len(s.history); n == 0 || pt.Time.Sub(s.history[n-1].Time) >= s.opts.SampleEvery {
		s.history = append(s.history, pt)
		if len(s.history) > s.opts.Keep {
			s.history = slices.Delete(s.history, 0, len(s.history)-s.opts.Keep)
		}
		st.History = s.history
	} else {
		st.History = append(s.history[:n:n], pt)
	}
	s.version++
	st.Version = s.version
	b, err := json.Marshal(st)
	if err != nil {
		slog.Error("dashboard: state", "err", err)
		return
	}
	s.state = b
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) current() ([]byte, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.changed
}

// ServeHTTP serves the pages, /api/state, /api/stream, /api/workloads/NS/NAME and /healthz.
// Only GET and HEAD: the dashboard never changes the cluster.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read-only: GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	switch p := r.URL.Path; {
	case p == "/healthz":
		if !s.synced.Load() {
			http.Error(w, "not ready: still listing the cluster's objects (a permission missing from the dashboard's role keeps it so)", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	case p == "/api/state":
		b, _ := s.current()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	case p == "/api/stream":
		s.stream(w, r)
	case strings.HasPrefix(p, "/api/workloads/"):
		s.detail(w, strings.TrimPrefix(p, "/api/workloads/"))
	case strings.HasPrefix(p, "/api/"):
		http.Error(w, "no such API: /api/state, /api/stream and /api/workloads/NAMESPACE/NAME are served", http.StatusNotFound)
	default:
		s.assets.ServeHTTP(w, r)
	}
}

// stream sends the state as server-sent events: now, and after every change.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	for {
		b, changed := s.current()
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

func (s *Server) detail(w http.ResponseWriter, key string) {
	// NAMESPACE/NAME, or NAMESPACE/KIND/NAME when two workloads of other kinds share a name.
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		http.Error(w, "want /api/workloads/NAMESPACE/NAME or /api/workloads/NAMESPACE/KIND/NAME", http.StatusBadRequest)
		return
	}
	at := func(i cache.SharedIndexInformer) []any {
		l, _ := i.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		return l
	}
	evs := typed[corev1.Event](at(s.events))
	all := inspect.BuildWorkloads(inspect.Objects{Pods: typed[corev1.Pod](at(s.pods)), Jobs: typed[batchv1.Job](at(s.jobs)),
		Deployments: typed[appsv1.Deployment](at(s.deps)), ReplicaSets: typed[appsv1.ReplicaSet](at(s.rss)), Refusals: inspect.Refusals(evs),
		NodeUUIDs: inspect.NodeUUIDs(list[corev1.Node](s.nodes))})
	found, err := inspect.Pick(all, ns, name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	events := inspect.WorkloadEvents(evs, found)
	d := Detail{Workload: *found, Events: showEvents(events), Timeline: Timeline(*found, events)}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(d)
}

func typed[T any](items []any) []*T {
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Serve runs the server on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("dashboard: %w", err)
		}
	}()
	select {
	case <-ctx.Done():
	case err := <-errs:
		if err != nil {
			_ = srv.Close()
			return err
		}
		<-ctx.Done()
	}
	// Streams stay open until their clients go: close rather than wait for them.
	return srv.Close()
}
