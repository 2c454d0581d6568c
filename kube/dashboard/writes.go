package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/control"
	"github.com/allot-dev/allot/kube/submission"
)

// Writes says whether the console changes the cluster (submits, suspends, resumes and
// deletes workloads), and as whom. Every change is sent as the person signed in, so that
// Kubernetes' RBAC, Allot's webhooks and the API server's validation decide, and the
// console shows their refusal in their words.
type Writes string

const (
	// WritesAuto (the default) writes as the person where there is one: with AuthToken
	// their own token, with AuthProxy impersonating them (the dashboard's identity needs
	// the right to impersonate, which the chart grants only then). With AuthNone, where
	// nobody is asked who they are, the console is read-only.
	WritesAuto Writes = "auto"
	// WritesOn also writes with AuthNone, as the dashboard's own identity: allot up on a
	// laptop, or allot dashboard with one's own kubeconfig.
	WritesOn Writes = "on"
	// WritesOff keeps the console read-only in every mode.
	WritesOff Writes = "off"
)

// WritesModes are the values, for flags and their help.
var WritesModes = []Writes{WritesAuto, WritesOn, WritesOff}

// ParseWrites reads a Writes value.
func ParseWrites(s string) (Writes, error) {
	if w := Writes(s); slices.Contains(WritesModes, w) {
		return w, nil
	}
	return "", fmt.Errorf("--writes %q is not allowed: auto (as the person signed in; read-only with --auth none), on (also with --auth none, as the dashboard's own identity) or off", s)
}

// writable is whether this server takes changes at all.
func (s *Server) writable() bool {
	switch s.opts.Writes {
	case WritesOn:
		return true
	case WritesOff:
		return false
	}
	return s.opts.Auth.Mode != AuthNone
}

// asPerson is the API server's configuration for acting as the person who asks: their own
// token (AuthToken), the dashboard's identity impersonating them (AuthProxy: user, UID,
// groups and extra, as the proxy named them), or the dashboard's own (AuthNone).
func (s *Server) asPerson(r *http.Request, id *Identity) *rest.Config {
	switch s.opts.Auth.Mode {
	case AuthToken:
		cfg := rest.AnonymousClientConfig(s.rc)
		cfg.BearerToken = s.auth.credential(r)
		return cfg
	case AuthProxy:
		cfg := rest.CopyConfig(s.rc)
		imp := rest.ImpersonationConfig{UserName: id.User, UID: id.UID}
		for _, g := range id.Groups {
			// Kubernetes' own groups are not the proxy's to name: the API server adds
			// system:authenticated to everyone itself, and a proxy that named
			// system:masters would make anyone signed in an admin.
			if !strings.HasPrefix(g, "system:") {
				imp.Groups = append(imp.Groups, g)
			}
		}
		if len(id.Extra) > 0 {
			imp.Extra = map[string][]string{}
			for k, v := range id.Extra {
				imp.Extra[k] = v
			}
		}
		cfg.Impersonate = imp
		return cfg
	}
	return s.rc
}

// actor is what acts for one request: the person's clients.
type actor struct {
	submit  submission.Clients
	control control.Clients
}

func (s *Server) actorFor(r *http.Request, id *Identity) (*actor, error) {
	cfg := s.asPerson(r, id)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	allot, err := allotclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &actor{submit: submission.Clients{Client: client, Allot: allot, Nodes: s.client},
		control: control.Clients{Client: client, Allot: allot, Dyn: dyn, Mapper: s.mapper}}, nil
}

// newMapper finds the resource of a workload's kind (any an operator defines) from the
// API server's discovery, asked as the dashboard: what kinds exist is not the person's.
func newMapper(client kubernetes.Interface) *restmapper.DeferredDiscoveryRESTMapper {
	var d discovery.DiscoveryInterface = client.Discovery()
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(d))
}

// acceptWrite refuses what the console must not take: changes while it is read-only, and
// a request a page of another site could make a browser send with the person's cookie
// (the pages send JSON with a header of their own, which another site's form cannot, and
// a script of another origin cannot without the dashboard's leave, which it never gives).
func (s *Server) acceptWrite(w http.ResponseWriter, r *http.Request) bool {
	if !s.writable() {
		writeError(w, http.StatusForbidden, "the console is read-only: allot dashboard --writes on (or the chart's dashboard.writes) lets it change the cluster, as the person signed in")
		return false
	}
	if r.Header.Get(writeHeader) == "" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeError(w, http.StatusForbidden, "a change must come from the console's pages: a JSON body and the "+writeHeader+" header")
		return false
	}
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "a change from another site is refused")
		return false
	}
	return true
}

// change makes one of the console's changes with the person's clients, within a deadline.
func (s *Server) change(w http.ResponseWriter, r *http.Request, id *Identity, path string) {
	a, err := s.actorFor(r, id)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	switch path {
	case "/api/submit":
		s.submit(ctx, w, r, id, a)
	case "/api/queue":
		s.queue(ctx, w, r, a)
	case "/api/connect":
		s.open(ctx, w, r, id, a)
	default:
		s.act(ctx, w, r, a)
	}
}

// writeHeader is the header the console's pages send with every change.
const writeHeader = "X-Allot-Console"

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with {"error", "status"}, as a refused sign-in is answered.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg, "status": status})
}
