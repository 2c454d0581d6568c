package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"

	"github.com/allot-dev/allot/kube/connect"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submission"
)

// A workload's tool (Jupyter, code-server, TensorBoard) is reached from the browser
// through the console: "Open" asks the server (POST /api/connect), as the person, for the
// workload's running pod, its port and its notebook token; the server checks that the
// person may port-forward to it, by doing so once, and answers with a one-time ticket on
// the connect address. There the ticket becomes a session cookie, and every request is
// forwarded to the pod's port through the API server's port-forward, as the person.
//
// Each workload is served on an origin of its own, a host name of the connect URL
// (ConnectURL: https://*.apps.example.com, http://*.localhost:8081), never on the
// console's: a tool's pages run code of the workload's image, which on the console's
// origin could make changes as whoever opened it, and on a shared origin could read
// another person's workspace opened in the same browser. On its own host a tool also
// serves from "/", as it does by default (no base path to configure).

// connectCookie is the connect address's session cookie, one per workload host.
const connectCookie = "allot-connect"

// ticketFor and sessionFor are how long a ticket waits to be used, and how long a session
// lasts: a working day; opening the workload from the console again starts a new one.
const (
	ticketFor  = time.Minute
	sessionFor = 12 * time.Hour
)

// ParseConnectURL reads the connect address's URL pattern: http or https, a host whose
// first label is "*" (one workload each), an optional port, nothing else.
func ParseConnectURL(s string) (*url.URL, error) {
	bad := func(why string) error {
		return fmt.Errorf("--connect-url %q is not allowed: %s; want http(s)://*.DOMAIN[:PORT], e.g. https://*.apps.example.com or http://*.localhost:8081", s, why)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, bad(err.Error())
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("the scheme is not http or https")
	case !strings.HasPrefix(u.Host, "*.") || strings.Count(u.Host, "*") != 1 || len(u.Hostname()) < 3:
		return nil, bad("the host does not start with *. (each workload gets a host name of its own)")
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, bad("it has more than a scheme, a host and a port")
	}
	return &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host)}, nil
}

// connector keeps the connect address's tickets and sessions, in memory: a restart ends
// them, and people open their workloads from the console again.
type connector struct {
	base   *url.URL
	suffix string // the host after "*": ".apps.example.com", ".localhost:8081"
	now    func() time.Time

	mu       sync.Mutex
	tickets  map[string]*grant
	sessions map[string]*grant
}

// grant is what a ticket, then a session, lets a browser reach: one port of one pod, as
// one person.
type grant struct {
	host          string // the workload's host label
	namespace     string
	workload, pod string
	port          int
	path, token   string // the notebook's URL path and token, from its log
	user          string
	dialer        httpstream.Dialer
	expires       time.Time
	proxy         *httputil.ReverseProxy // a session's, made when the ticket is used
	transport     *http.Transport
}

func newConnector(base *url.URL, now func() time.Time) *connector {
	return &connector{base: base, suffix: strings.TrimPrefix(base.Host, "*"), now: now,
		tickets: map[string]*grant{}, sessions: map[string]*grant{}}
}

// hostLabel is the workload's host label: its name and namespace where they fit one DNS
// label (63 characters), with a short hash of both so that no two workloads share one.
func hostLabel(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	h := hex.EncodeToString(sum[:])
	if l := name + "--" + namespace + "-" + h[:8]; len(l) <= 63 && !strings.Contains(name+namespace, ".") {
		return l
	}
	return "w-" + h[:24]
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// issue keeps g under a new ticket and returns the URL that uses it.
func (c *connector) issue(g *grant) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep()
	id := randomID()
	g.expires = c.now().Add(ticketFor)
	c.tickets[id] = g
	u := *c.base
	u.Host = g.host + c.suffix
	u.Path = "/_allot/enter"
	u.RawQuery = url.Values{"ticket": {id}}.Encode()
	return u.String()
}

// sweep forgets what has expired; c.mu is held.
func (c *connector) sweep() {
	now := c.now()
	for id, g := range c.tickets {
		if now.After(g.expires) {
			delete(c.tickets, id)
		}
	}
	for id, g := range c.sessions {
		if now.After(g.expires) {
			delete(c.sessions, id)
			g.transport.CloseIdleConnections()
		}
	}
}

// openRequest is POST /api/connect's body.
type openRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Pod       string `json:"pod,omitempty"`
}

// open answers POST /api/connect: the URL that opens the workload's tool, or why not, in
// the words of the API server where it refused.
func (s *Server) open(ctx context.Context, w http.ResponseWriter, r *http.Request, id *Identity, a *actor) {
	if s.connect == nil {
		writeError(w, http.StatusNotFound, "this console has no connect address: allot dashboard --connect-url (the chart's dashboard.connect.url) serves workloads' tools through it")
		return
	}
	var req openRequest
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Namespace == "" || req.Name == "" {
		writeError(w, http.StatusBadRequest, "the body is not {namespace, name}")
		return
	}
	client := a.submit.Client
	wl, err := inspect.Find(ctx, client, req.Namespace, req.Name)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, submission.APIMessage(err))
		return
	}
	if wl.Status == "Suspended" {
		writeError(w, http.StatusConflict, fmt.Sprintf("%s is suspended: resume it, then open it", wl.Name))
		return
	}
	podName := connect.PickRunning(wl, req.Pod)
	if podName == "" {
		writeError(w, http.StatusConflict, fmt.Sprintf("%s is not running: %s", wl.Name, connect.PodStates(wl)))
		return
	}
	pod, err := client.CoreV1().Pods(wl.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, submission.APIMessage(err))
		return
	}
	port, err := connect.Port(wl.Name, pod)
	if err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	dialer, err := connect.Dialer(s.asPerson(r, id), client, pod.Namespace, pod.Name)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// Once now, as the person: RBAC's refusal (create on pods/portforward), or a tool not
	// listening yet, is said here rather than on a blank page of the tool's host.
	if err := connect.Check(ctx, dialer, pod.Namespace, pod.Name, port); err != nil {
		writeError(w, http.StatusUnprocessableEntity, submission.APIMessage(err))
		return
	}
	path, token := connect.NotebookToken(ctx, client, pod)
	g := &grant{host: hostLabel(wl.Namespace, wl.Name), namespace: wl.Namespace, workload: wl.Name, pod: pod.Name, port: port,
		path: path, token: token, dialer: dialer}
	if id != nil {
		g.user = id.User
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": s.connect.issue(g), "pod": pod.Name, "port": port,
		"message": fmt.Sprintf("%s opens in a new tab: pod %s port %d, through the API server", wl.Name, pod.Name, port)})
}

// ConnectHandler serves the connect address: tickets made into sessions, and every other
// request of a session forwarded to its pod's port. It is served on a listener of its own
// (ServeConnect), never the console's.
func (s *Server) ConnectHandler() http.Handler {
	return http.HandlerFunc(s.serveConnect)
}

func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	c := s.connect
	if c == nil {
		http.Error(w, "no connect address is configured", http.StatusNotFound)
		return
	}
	host := strings.ToLower(r.Host)
	label, ok := strings.CutSuffix(host, c.suffix)
	if !ok || label == "" || strings.Contains(label, ".") {
		connectPage(w, http.StatusNotFound, "This is Allot's connect address: a workload's tool opens here from the console's Open button.")
		return
	}
	if r.URL.Path == "/_allot/enter" {
		c.enter(w, r, label)
		return
	}
	g := c.session(r, label)
	if g == nil {
		connectPage(w, http.StatusUnauthorized, "No session for this workload in this browser, or it has expired: open the workload from Allot's console again.")
		return
	}
	// What was the console's, or this address's, stays here: the tool sees none of it.
	for _, h := range []string{s.opts.Auth.UserHeader, s.opts.Auth.GroupsHeader, s.opts.Auth.SecretHeader} {
		r.Header.Del(h)
	}
	dropCookies(r, connectCookie, CookieName)
	g.proxy.ServeHTTP(w, r)
}

// enter makes a ticket into a session: the cookie set on the workload's host, and the
// browser sent on to the tool's page, with the notebook's token where its log had one.
func (c *connector) enter(w http.ResponseWriter, r *http.Request, label string) {
	id := r.URL.Query().Get("ticket")
	c.mu.Lock()
	c.sweep()
	g := c.tickets[id]
	delete(c.tickets, id) // used once, whatever the outcome
	if g == nil || g.host != label {
		c.mu.Unlock()
		connectPage(w, http.StatusUnauthorized, "This link has been used or has expired (a minute): open the workload from Allot's console again.")
		return
	}
	sid := randomID()
	g.expires = c.now().Add(sessionFor)
	g.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return connect.Dial(ctx, g.dialer, g.namespace, g.pod, g.port)
		},
		MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 5 * time.Minute,
	}
	target := &url.URL{Scheme: "http", Host: fmt.Sprintf("%s.%s:%d", g.pod, g.namespace, g.port)}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The browser's Host, not the pod's: tools check that a websocket's Origin
			// is their own host (Jupyter does), which is the browser's.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: g.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			slog.Info("connect: forwarding failed", "workload", g.namespace+"/"+g.workload, "pod", g.pod, "user", g.user, "err", err)
			connectPage(w, http.StatusBadGateway, fmt.Sprintf("Could not reach %s's pod %s port %d: %v. If the pod was replaced, open the workload from Allot's console again.", g.workload, g.pod, g.port, err))
		},
	}
	c.sessions[sid] = g
	c.mu.Unlock()
	secure := r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") || c.base.Scheme == "https"
	// Lax: the browser comes from the console, another site, and the tool's own
	// navigations must carry it; its host is the workload's alone.
	http.SetCookie(w, &http.Cookie{Name: connectCookie, Value: sid, Path: "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(sessionFor / time.Second)})
	next := g.path
	if next == "" {
		next = "/"
	}
	if g.token != "" {
		next += "?" + url.Values{"token": {g.token}}.Encode()
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	seeOther(w, next)
}

// session is the grant of the request's session cookie on this host, or nil.
func (c *connector) session(r *http.Request, label string) *grant {
	ck, err := r.Cookie(connectCookie)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.sessions[ck.Value]
	if g == nil || g.host != label || c.now().After(g.expires) {
		return nil
	}
	return g
}

// dropCookies removes the named cookies from the request, keeping the tool's own.
func dropCookies(r *http.Request, names ...string) {
	all := r.Cookies()
	r.Header.Del("Cookie")
	for _, ck := range all {
		keep := true
		for _, n := range names {
			keep = keep && ck.Name != n
		}
		if keep {
			r.AddCookie(ck)
		}
	}
}

var connectTmpl = template.Must(template.New("connect").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Allot — connect</title>
<style>body{font:15px system-ui,sans-serif;margin:3em auto;max-width:40em;color:#222}</style></head>
<body><h1>Allot</h1><p class="msg">{{.}}</p></body></html>
`))

// connectPage answers the connect address's own refusals and failures as a short page.
func connectPage(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(status)
	_ = connectTmpl.Execute(w, msg)
}

// ServeConnect serves the connect address on ln until ctx ends.
func (s *Server) ServeConnect(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.ConnectHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard connect address: %w", err)
	}
	return nil
}
