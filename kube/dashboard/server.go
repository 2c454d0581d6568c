// Package dashboard serves Allot's web dashboard: the pages (built into package web and
// embedded in the binary), a JSON state made from informers, and a stream that pushes a
// new state whenever the cluster changes. It reads with the identity it is given; with
// authentication (auth.go) each person is shown what their own identity may read (view.go),
// and the console's changes (a submission, a workload suspended, resumed or deleted) are
// made as that person (writes.go).
package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/stores"
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
	// Auth is who may see what; the zero value is AuthNone, everything to everyone.
	Auth Auth
	// Writes is whether the console changes the cluster, as whom (writes.go); the zero
	// value is WritesAuto.
	Writes Writes
	// ConnectURL, when set, is where workloads' tools are served (connect.go): a URL
	// pattern with "*" for each workload's host label, http://*.localhost:8081. The caller
	// serves ServeConnect on a listener that address reaches.
	ConnectURL string
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
	o.Auth.defaults()
	if o.Writes == "" {
		o.Writes = WritesAuto
	}
}

// Server holds the informers and the latest state.
type Server struct {
	opts   Options
	client kubernetes.Interface
	// rc is the dashboard's own identity, from which a person's is made for a change
	// (writes.go); mapper finds a workload kind's resource.
	rc      *rest.Config
	mapper  meta.RESTMapper
	factory informers.SharedInformerFactory
	allotF  allotinformers.SharedInformerFactory
	// leaseF watches the agents' Leases, which carry their GPUs' load.
	leaseF informers.SharedInformerFactory
	leases cache.SharedIndexInformer
	pods   cache.SharedIndexInformer
	events cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	jobs   cache.SharedIndexInformer
	deps   cache.SharedIndexInformer
	rss    cache.SharedIndexInformer
	// sts: StatefulSets, so that a notebook scaled to zero (suspended) is still shown.
	sts    cache.SharedIndexInformer
	queues cache.SharedIndexInformer
	// topologies is nil where the Topology CRD is not installed.
	topologies cache.SharedIndexInformer
	// slices, classes and claims are nil where the API server serves no DRA.
	slices, classes, claims cache.SharedIndexInformer
	dirty                   chan struct{}
	assets                  http.Handler
	// synced is set once every informer has listed: until then the page would show an
	// empty cluster, so /healthz says not ready (a missing permission keeps it so).
	synced atomic.Bool
	// auth finds who asks, access what they may see; access is nil with AuthNone.
	auth   *authenticator
	access *access
	// connect serves workloads' tools; nil without Options.ConnectURL.
	connect *connector

	mu      sync.Mutex
	st      State  // the latest State, shared: filtered per person on the way out
	state   []byte // the latest State as JSON
	version uint64
	changed chan struct{} // closed and replaced when state changes
	history []Sample
}

// New makes a server that reads the cluster with rc's identity. With opts.Auth in token
// or proxy mode, rc's identity also reviews tokens and asks what each person may read
// (tokenreviews and subjectaccessreviews: create, as the role system:auth-delegator has).
func New(rc *rest.Config, opts Options) (*Server, error) {
	opts.defaults()
	if _, err := ParseAuthMode(string(opts.Auth.Mode)); err != nil {
		return nil, err
	}
	if _, err := ParseWrites(string(opts.Writes)); err != nil {
		return nil, err
	}
	var base *url.URL
	if opts.ConnectURL != "" {
		var err error
		if base, err = ParseConnectURL(opts.ConnectURL); err != nil {
			return nil, err
		}
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	// Allot's resources speak JSON only (allotclient asks so of its copy of rc).
	allot, err := allotclient.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dist, err := fs.Sub(web.Dist, "dist")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, dirty: make(chan struct{}, 1), changed: make(chan struct{}), client: client, rc: rc, mapper: newMapper(client),
		factory: informers.NewSharedInformerFactory(client, 0),
		allotF:  allotinformers.NewSharedInformerFactory(allot, 0),
		assets:  http.FileServerFS(dist)}
	s.auth = newAuthenticator(opts.Auth, client, opts.Clock)
	if base != nil {
		s.connect = newConnector(base, opts.Clock.Now)
	}
	if opts.Auth.Mode != AuthNone {
		s.access = newAccess(client, opts.Clock, opts.Auth.CacheFor)
	}
	s.leaseF = stores.AgentLeases(client)
	s.leases = s.leaseF.Coordination().V1().Leases().Informer()
	s.pods = s.factory.Core().V1().Pods().Informer()
	s.events = s.factory.Core().V1().Events().Informer()
	s.nodes = s.factory.Core().V1().Nodes().Informer()
	s.jobs = s.factory.Batch().V1().Jobs().Informer()
	s.deps = s.factory.Apps().V1().Deployments().Informer()
	s.rss = s.factory.Apps().V1().ReplicaSets().Informer()
	s.sts = s.factory.Apps().V1().StatefulSets().Informer()
	s.queues = s.allotF.Allot().V1alpha1().Queues().Informer()
	if workload.Served(client.Discovery(), v1alpha1.Topologies) {
		s.topologies = s.allotF.Allot().V1alpha1().Topologies().Informer()
	}
	if workload.Served(client.Discovery(), resourcev1.SchemeGroupVersion.WithResource("resourceslices")) {
		// Nodes whose GPUs come through DRA, and the claims that hold them.
		s.slices = s.factory.Resource().V1().ResourceSlices().Informer()
		s.classes = s.factory.Resource().V1().DeviceClasses().Informer()
		s.claims = s.factory.Resource().V1().ResourceClaims().Informer()
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
	s.st = State{Nodes: []inspect.Node{}, Workloads: []inspect.Workload{}, Queues: []Queue{}, History: []Sample{}}
	s.state, _ = json.Marshal(s.st)
	return s, nil
}

func (s *Server) informers() []cache.SharedIndexInformer {
	out := []cache.SharedIndexInformer{s.pods, s.events, s.nodes, s.jobs, s.deps, s.rss, s.sts, s.queues, s.leases}
	if s.topologies != nil {
		out = append(out, s.topologies)
	}
	if s.slices != nil {
		out = append(out, s.slices, s.classes, s.claims)
	}
	return out
}

// dra is what the DRA informers hold (nothing where the API server serves no DRA).
func (s *Server) dra() inspect.DRA {
	if s.slices == nil {
		return inspect.DRA{}
	}
	return inspect.DRA{Slices: list[resourcev1.ResourceSlice](s.slices), Classes: list[resourcev1.DeviceClass](s.classes),
		Claims: list[resourcev1.ResourceClaim](s.claims)}
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
	s.allotF.Start(ctx.Done())
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

// rebuild makes a new state from the caches, adds a history point when one is due, and
// wakes the streams.
func (s *Server) rebuild() {
	st := Build(Input{Now: s.opts.Clock.Now(), Nodes: inspect.WithLoad(list[corev1.Node](s.nodes), list[coordinationv1.Lease](s.leases)), Queues: list[v1alpha1.Queue](s.queues), Topology: s.topology(), DRA: s.dra(),
		Objects: inspect.Objects{NodeUUIDs: inspect.NodeUUIDs(list[corev1.Node](s.nodes)), Pods: list[corev1.Pod](s.pods), Jobs: list[batchv1.Job](s.jobs), Deployments: list[appsv1.Deployment](s.deps),
			ReplicaSets: list[appsv1.ReplicaSet](s.rss), StatefulSets: list[appsv1.StatefulSet](s.sts), Refusals: inspect.Refusals(list[corev1.Event](s.events))}})
	s.mu.Lock()
	defer s.mu.Unlock()
	// History keeps a point every SampleEvery; the charts end at the present moment.
	pt := sample(&st)
	if n := len(s.history); n == 0 || pt.Time.Sub(s.history[n-1].Time) >= s.opts.SampleEvery {
		s.history = append(s.history, pt)
		if len(s.history) > s.opts.Keep {
			s.history = slices.Delete(s.history, 0, len(s.history)-s.opts.Keep)
		}
		// A copy: s.st is read outside the lock, and s.history moves as it is trimmed.
		st.History = slices.Clone(s.history)
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
	s.st, s.state = st, b
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) current() (State, []byte, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, s.state, s.changed
}

// stateFor is the state as JSON as id may see it (nil id: everything, AuthNone).
func (s *Server) stateFor(ctx context.Context, id *Identity, st State, all []byte) []byte {
	if id == nil || s.access == nil {
		return all
	}
	v := s.access.viewer(ctx, id, &st)
	if v.Admin() {
		return all
	}
	b, err := json.Marshal(Filter(st, v))
	if err != nil {
		slog.Error("dashboard: state", "err", err)
		return []byte("{}")
	}
	return b
}

// ServeHTTP serves the pages, /api/state, /api/stream, /api/workloads/NS/NAME and /healthz;
// with AuthToken also /login and /logout. Changes are POSTs to /api/submit, /api/act,
// /api/queue and /api/connect (opening a workload's tool, connect.go), made as the person (writes.go) where the server takes them; every other path
// answers GET and HEAD only. Without AuthNone every path but /healthz needs an identity.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	p := r.URL.Path
	if s.opts.Auth.Mode == AuthToken && (p == "/login" || p == "/logout") {
		s.auth.login(w, r)
		return
	}
	// Changes are POSTs to two paths (writes.go); everything else only reads.
	change := p == "/api/submit" || p == "/api/act" || p == "/api/queue" || p == "/api/connect"
	if change && r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, p+" takes POST only", http.StatusMethodNotAllowed)
		return
	}
	if !change && r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET and HEAD only here: changes are POSTs to /api/submit, /api/act, /api/queue and /api/connect", http.StatusMethodNotAllowed)
		return
	}
	if p == "/healthz" {
		if !s.synced.Load() {
			http.Error(w, "not ready: still listing the cluster's objects (a permission missing from the dashboard's role keeps it so)", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
		return
	}
	id, err := s.auth.identify(r)
	if err != nil {
		s.auth.refuse(w, r, err)
		return
	}
	switch {
	case change:
		if s.acceptWrite(w, r) {
			s.change(w, r, id, p)
		}
	case p == "/api/templates":
		if !s.writable() {
			writeError(w, http.StatusForbidden, "the console is read-only: it offers no Submit page")
		} else {
			s.templates(w, r, id)
		}
	case p == "/api/state":
		st, all, _ := s.current()
		b := s.stateFor(r.Context(), id, st, all)
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	case p == "/api/stream":
		s.stream(w, r, id)
	case strings.HasPrefix(p, "/api/workloads/"):
		s.detail(w, r, id, strings.TrimPrefix(p, "/api/workloads/"))
	case p == "/api/consumption":
		s.consumption(w, r, id)
	case strings.HasPrefix(p, "/api/queues/"):
		s.queueDetail(w, r, id, strings.TrimPrefix(p, "/api/queues/"))
	case p == "/api/me":
		// Who the pages show as signed in, and whether they offer to sign out; the pages
		// also ask it when their stream breaks, to tell an expired sign-in (401) from a
		// server away.
		me := Me{SignOut: s.opts.Auth.Mode == AuthToken, Writes: s.writable(), Connect: s.writable() && s.connect != nil}
		if id != nil {
			me.User = id.User
		}
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(me)
	case strings.HasPrefix(p, "/api/"):
		http.Error(w, "no such API: /api/state, /api/stream, /api/me, /api/workloads/NAMESPACE/NAME, /api/queues/NAME and /api/consumption are served, and POST /api/submit, /api/act, /api/queue and /api/connect", http.StatusNotFound)
	default:
		s.assets.ServeHTTP(w, r)
	}
}

// Me is /api/me: the person the dashboard acts for (empty with AuthNone), and whether
// the pages offer to sign out (AuthToken's sign-in cookie).
type Me struct {
	User    string `json:"user,omitempty"`
	SignOut bool   `json:"signOut,omitempty"`
	// Writes is whether the pages offer to submit, suspend, resume and delete.
	Writes bool `json:"writes,omitempty"`
	// Connect is whether the pages offer to open a workload's tool (connect.go).
	Connect bool `json:"connect,omitempty"`
}

// stream sends the state as server-sent events, as id may see it: now, and after every
// change. A token no longer accepted ends it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id *Identity) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	for first := true; ; first = false {
		st, all, changed := s.current()
		if !first && s.opts.Auth.Mode == AuthToken {
			// A token no longer accepted ends the stream; the API server not answering
			// the review (a 503) does not: the person was signed in a moment ago.
			var rf *refusal
			if _, err := s.auth.identify(r); errors.As(err, &rf) && rf.status == http.StatusUnauthorized {
				return
			}
		}
		b := s.stateFor(r.Context(), id, st, all)
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

func (s *Server) detail(w http.ResponseWriter, r *http.Request, id *Identity, key string) {
	// NAMESPACE/NAME, or NAMESPACE/KIND/NAME when two workloads of other kinds share a name.
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		http.Error(w, "want /api/workloads/NAMESPACE/NAME or /api/workloads/NAMESPACE/KIND/NAME", http.StatusBadRequest)
		return
	}
	// A name no namespace can have is not worth a review of the API server (anyone signed
	// in could otherwise make the dashboard ask one per made-up name).
	if id != nil && s.access != nil && (len(validation.IsDNS1123Label(ns)) > 0 || !s.access.canReadNamespace(r.Context(), id, ns)) {
		// As if there were none: 404, not 403, so that it does not tell what exists.
		_, err := inspect.Pick(nil, ns, name)
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	at := func(i cache.SharedIndexInformer) []any {
		l, _ := i.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		return l
	}
	evs := typed[corev1.Event](at(s.events))
	all := inspect.BuildWorkloads(inspect.Objects{Pods: typed[corev1.Pod](at(s.pods)), Jobs: typed[batchv1.Job](at(s.jobs)),
		Deployments: typed[appsv1.Deployment](at(s.deps)), ReplicaSets: typed[appsv1.ReplicaSet](at(s.rss)), StatefulSets: typed[appsv1.StatefulSet](at(s.sts)), Refusals: inspect.Refusals(evs),
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
