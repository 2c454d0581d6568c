package faults

import (
	"encoding/pem"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Proxy stands between a client and the API server and makes the server look slow and
// the network between them lossy: each request waits a random latency before it is
// passed on, every open connection can be cut at once (Drop), and the answers of chosen
// requests can be lost after the server acted on them (LoseAnswers), as when a connection
// dies while the answer is on its way. It speaks HTTP to its clients (TLS, its own
// certificate) and passes requests on with the target's credentials, so it sees each
// request whole, not only bytes.
type Proxy struct {
	srv      *httptest.Server
	mu       sync.Mutex
	rng      *rand.Rand
	lo, hi   time.Duration                            // latency range
	wlo, whi time.Duration                            // watch events' latency range
	of       func(*http.Request) bool                 // the requests SetLatencyOf delays (nil: all)
	lose     func(*http.Request) bool                 // requests whose answer may be lost
	loseP    float64                                  // how often
	counts   map[string]int                           // "lost", "delayed"
	target   func(http.ResponseWriter, *http.Request) // the reverse proxy
}

// NewProxy starts a proxy in front of the API server target describes.
func NewProxy(target *rest.Config, seed uint64) (*Proxy, error) {
	rt, err := rest.TransportFor(target)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(target.Host)
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = rt
	rp.FlushInterval = -1 // watches stream event by event
	p := &Proxy{rng: rand.New(rand.NewPCG(seed, 3)), counts: map[string]int{}, target: rp.ServeHTTP}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	return p, nil
}

// Config is target's client configuration pointed at the proxy instead.
func (p *Proxy) Config() *rest.Config {
	return &rest.Config{Host: p.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(p.srv)}}
}

// SetLatency makes each request wait between lo and hi before it is passed on (0, 0: none).
func (p *Proxy) SetLatency(lo, hi time.Duration) { p.SetLatencyOf(nil, lo, hi) }

// SetLatencyOf is SetLatency for the requests match picks only (nil: all).
func (p *Proxy) SetLatencyOf(match func(*http.Request) bool, lo, hi time.Duration) {
	p.mu.Lock()
	p.of, p.lo, p.hi = match, lo, hi
	p.mu.Unlock()
}

// SetWatchLatency makes each event a watch streams arrive between lo and hi late, in
// order, as from a loaded server: the client's informers lag behind what it wrote.
func (p *Proxy) SetWatchLatency(lo, hi time.Duration) {
	p.mu.Lock()
	p.wlo, p.whi = lo, hi
	p.mu.Unlock()
}

// LoseAnswers loses the answer of a share (0–1) of the requests match picks, after the
// server has acted on them; nil stops it.
func (p *Proxy) LoseAnswers(match func(*http.Request) bool, share float64) {
	p.mu.Lock()
	p.lose, p.loseP = match, share
	p.mu.Unlock()
}

// Drop cuts every connection open now, in the middle of whatever it carries.
func (p *Proxy) Drop() { p.srv.CloseClientConnections() }

// Count is how many requests had their answer lost ("lost") or waited ("delayed").
func (p *Proxy) Count(what string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[what]
}

// Close stops the proxy, cutting the watches still open (httptest.Server.Close alone
// would wait for them to end).
func (p *Proxy) Close() {
	p.srv.Listener.Close()
	p.srv.CloseClientConnections()
	p.srv.Close()
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	var wait time.Duration
	if p.hi > 0 && (p.of == nil || p.of(r)) {
		wait = p.lo + time.Duration(p.rng.Int64N(int64(p.hi-p.lo)+1))
		p.counts["delayed"]++
	}
	lose := p.lose != nil && p.lose(r) && p.rng.Float64() < p.loseP
	if lose {
		p.counts["lost"]++
	}
	p.mu.Unlock()
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
	}
	if r.URL.Query().Get("watch") == "true" {
		lagged := newLagWriter(w, p.watchLag)
		defer lagged.close()
		w = lagged
	}
	if !lose {
		p.target(w, r)
		return
	}
	// The server acts on the request; its answer never reaches the client, whose
	// stream is reset as a cut connection would.
	p.target(&discard{header: http.Header{}}, r)
	panic(http.ErrAbortHandler)
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func certPEM(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// watchLag is how late the next watch event is to arrive.
func (p *Proxy) watchLag() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.whi <= 0 {
		return 0
	}
	return p.wlo + time.Duration(p.rng.Int64N(int64(p.whi-p.wlo)+1))
}

// lagWriter passes what is written to w on, each piece held back by lag() but never
// overtaking the one before.
type lagWriter struct {
	w     http.ResponseWriter
	lag   func() time.Duration
	queue chan lagged
	done  chan struct{}
}

type lagged struct {
	at time.Time
	b  []byte
}

func newLagWriter(w http.ResponseWriter, lag func() time.Duration) *lagWriter {
	l := &lagWriter{w: w, lag: lag, queue: make(chan lagged, 1024), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for c := range l.queue {
			time.Sleep(time.Until(c.at))
			if _, err := w.Write(c.b); err != nil {
				continue
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}()
	return l
}

func (l *lagWriter) Header() http.Header  { return l.w.Header() }
func (l *lagWriter) WriteHeader(code int) { l.w.WriteHeader(code) }
func (l *lagWriter) Write(b []byte) (int, error) {
	l.queue <- lagged{at: time.Now().Add(l.lag()), b: append([]byte(nil), b...)}
	return len(b), nil
}
func (l *lagWriter) Flush() {} // each piece is flushed as it is passed on
func (l *lagWriter) close() { close(l.queue); <-l.done }
