package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// AuthMode is how the dashboard learns who asks.
type AuthMode string

const (
	// AuthNone serves everything the dashboard's own identity reads to whoever reaches
	// it: allot dashboard on a laptop with one's own kubeconfig, allot up.
	AuthNone AuthMode = "none"
	// AuthToken takes a Kubernetes token (a ServiceAccount's, or an OIDC id token the API
	// server accepts) from the Authorization header or the sign-in page's cookie, and asks
	// the API server whose it is (TokenReview).
	AuthToken AuthMode = "token"
	// AuthProxy trusts a proxy in front (oauth2-proxy) to name the user and their groups in
	// headers; nothing else may reach the dashboard.
	AuthProxy AuthMode = "proxy"
)

// AuthModes are the modes, for flags and their help.
var AuthModes = []AuthMode{AuthNone, AuthToken, AuthProxy}

// ParseAuthMode reads a mode's name.
func ParseAuthMode(s string) (AuthMode, error) {
	if m := AuthMode(s); slices.Contains(AuthModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("unknown auth mode %q: one of none, token, proxy", s)
}

// Auth says who may see what. With token or proxy, each request needs an identity, and
// what it is shown is what that identity may read (view.go, access.go).
type Auth struct {
	Mode AuthMode
	// UserHeader and GroupsHeader name the proxy's headers (X-Forwarded-User and
	// X-Forwarded-Groups, groups comma-separated).
	UserHeader, GroupsHeader string
	// Secret, when set, must come in SecretHeader (X-Allot-Proxy-Secret) on every request:
	// the proxy adds it, so that a request that went around the proxy is refused.
	Secret, SecretHeader string
	// CacheFor is how long a token's review and a person's access answers are kept (30 s).
	CacheFor time.Duration
}

func (a *Auth) defaults() {
	if a.Mode == "" {
		a.Mode = AuthNone
	}
	if a.UserHeader == "" {
		a.UserHeader = "X-Forwarded-User"
	}
	if a.GroupsHeader == "" {
		a.GroupsHeader = "X-Forwarded-Groups"
	}
	if a.SecretHeader == "" {
		a.SecretHeader = "X-Allot-Proxy-Secret"
	}
	if a.CacheFor <= 0 {
		a.CacheFor = 30 * time.Second
	}
}

// CookieName is the sign-in page's cookie: the token itself, HttpOnly and SameSite=Strict.
const CookieName = "allot-dashboard-token"

// maxCookieToken is the longest token the sign-in page keeps in a cookie (browsers keep
// about 4 KiB per cookie); a longer one goes in the Authorization header.
const maxCookieToken = 3800

// refusal is why a request has no identity, with the status to answer.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func unauthorized(msg string) error { return &refusal{status: http.StatusUnauthorized, msg: msg} }

// authenticator finds who asks.
type authenticator struct {
	cfg    Auth
	client kubernetes.Interface
	clock  clock.PassiveClock

	mu     sync.Mutex
	tokens map[[sha256.Size]byte]reviewed // by the token's hash: no token is kept
}

type reviewed struct {
	id   *Identity // nil: not a valid token
	msg  string
	when time.Time
}

func newAuthenticator(cfg Auth, client kubernetes.Interface, clk clock.PassiveClock) *authenticator {
	return &authenticator{cfg: cfg, client: client, clock: clk, tokens: map[[sha256.Size]byte]reviewed{}}
}

// identify is who asks: nil without authentication (AuthNone), else their identity or a
// *refusal.
func (a *authenticator) identify(r *http.Request) (*Identity, error) {
	switch a.cfg.Mode {
	case AuthToken:
		tok := a.credential(r)
		if tok == "" {
			return nil, unauthorized("sign in: send a Kubernetes token (kubectl create token, or an OIDC id token the API server accepts) as Authorization: Bearer TOKEN, or enter it at /login")
		}
		return a.token(r.Context(), tok)
	case AuthProxy:
		if a.cfg.Secret != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(a.cfg.SecretHeader)), []byte(a.cfg.Secret)) != 1 {
			return nil, unauthorized("this request did not come through the dashboard's sign-in proxy")
		}
		// A proxy sets its header; one that appended instead of replacing would pass on a
		// client's own. Two user headers are refused rather than one of them believed.
		if len(r.Header.Values(a.cfg.UserHeader)) > 1 {
			return nil, unauthorized("more than one " + a.cfg.UserHeader + " header: the proxy in front must replace what a client sends, not add to it")
		}
		user := strings.TrimSpace(r.Header.Get(a.cfg.UserHeader))
		if user == "" {
			return nil, unauthorized("no user: sign in through the proxy in front of the dashboard (it names the user in " + a.cfg.UserHeader + ")")
		}
		id := &Identity{User: user}
		for _, v := range r.Header.Values(a.cfg.GroupsHeader) {
			for _, g := range strings.Split(v, ",") {
				if g = strings.TrimSpace(g); g != "" && !slices.Contains(id.Groups, g) {
					id.Groups = append(id.Groups, g)
				}
			}
		}
		// As the API server adds it to everyone it authenticates.
		if !slices.Contains(id.Groups, "system:authenticated") {
			id.Groups = append(id.Groups, "system:authenticated")
		}
		return id, nil
	}
	return nil, nil
}

// credential is the token the person signed in with (AuthToken), to act as them.
func (a *authenticator) credential(r *http.Request) string {
	if tok := bearer(r); tok != "" {
		return tok
	}
	if c, err := r.Cookie(CookieName); err == nil {
		return c.Value
	}
	return ""
}

func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// token asks the API server whose token it is, keeping the answer (valid or not) for
// CacheFor under the token's hash.
func (a *authenticator) token(ctx context.Context, tok string) (*Identity, error) {
	key := sha256.Sum256([]byte(tok))
	now := a.clock.Now()
	a.mu.Lock()
	r, ok := a.tokens[key]
	a.mu.Unlock()
	if !ok || now.Sub(r.when) >= a.cfg.CacheFor {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			// Not the token's fault: say so, and keep nothing.
			return nil, &refusal{status: http.StatusServiceUnavailable, msg: "could not check the token with the API server (TokenReview): " + err.Error()}
		}
		r = reviewed{when: now, msg: "the API server does not accept this token"}
		if tr.Status.Authenticated {
			u := tr.Status.User
			id := &Identity{User: u.Username, UID: u.UID, Groups: u.Groups}
			if len(u.Extra) > 0 {
				id.Extra = map[string]authorizationv1.ExtraValue{}
				for k, v := range u.Extra {
					id.Extra[k] = authorizationv1.ExtraValue(v)
				}
			}
			r.id = id
		} else if tr.Status.Error != "" {
			r.msg += ": " + tr.Status.Error
		}
		a.mu.Lock()
		if len(a.tokens) >= 4096 {
			for k, old := range a.tokens {
				if now.Sub(old.when) >= a.cfg.CacheFor {
					delete(a.tokens, k)
				}
			}
			if len(a.tokens) >= 4096 {
				clear(a.tokens)
			}
		}
		a.tokens[key] = r
		a.mu.Unlock()
	}
	if r.id == nil {
		return nil, unauthorized(r.msg)
	}
	return r.id, nil
}

// refuse answers a request without an identity: JSON under /api/, else a short page (the
// sign-in form with AuthToken).
func (a *authenticator) refuse(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusUnauthorized, err.Error()
	var rf *refusal
	if errors.As(err, &rf) {
		status = rf.status
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized && a.cfg.Mode == AuthToken {
		h.Set("WWW-Authenticate", `Bearer realm="allot-dashboard"`)
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": msg, "status": status})
		return
	}
	a.page(w, r, status, msg)
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Allot: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:16px system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em;color:#222}
textarea{width:100%;font:12px monospace}button{font:inherit;padding:.4em 1.2em}.msg{color:#a00}code{background:#eee;padding:0 .2em}</style>
</head><body><h1>Allot dashboard</h1>
{{if .Msg}}<p class="msg" role="alert" data-auth-message>{{.Msg}}</p>{{end}}
{{if .Form}}<form method="post" action="{{.Base}}login">
<p><label for="token">Your Kubernetes token</label> (from <code>kubectl create token NAME</code>, or your OIDC id token): the dashboard shows what it may read.</p>
<textarea id="token" name="token" rows="6" required autocomplete="off"></textarea>
<p><button type="submit">Sign in</button></p></form>
{{else if .SignedIn}}<form method="post" action="{{.Base}}logout"><p><button type="submit">Sign out</button></p></form>
{{else}}<p>Open the dashboard through its sign-in proxy.</p>{{end}}
</body></html>`))

// page writes the short page: the message, and with AuthToken the sign-in form.
func (a *authenticator) page(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	_ = pageTmpl.Execute(w, map[string]any{"Msg": msg, "Form": a.cfg.Mode == AuthToken && !strings.HasSuffix(r.URL.Path, "/logout"),
		"SignedIn": false, "Base": base(r.URL.Path)})
}

// base is the relative way from a path back to the dashboard's root, so that the pages
// work under a prefix a proxy or an Ingress adds ("/login" and "/" give "./").
func base(p string) string {
	n := strings.Count(strings.TrimPrefix(p, "/"), "/")
	if n == 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

// login serves /login and /logout with AuthToken: the form, the token it posts checked
// and kept in a cookie, and signing out.
func (a *authenticator) login(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	out := r.URL.Path == "/logout"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if out {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_ = pageTmpl.Execute(w, map[string]any{"SignedIn": true, "Base": "./", "Msg": "Signing out forgets the token in this browser."})
			return
		}
		a.page(w, r, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		h.Set("Allow", "GET, HEAD, POST")
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
		return
	}
	// A form posted from another site (login CSRF) is refused.
	if !sameOrigin(r) {
		http.Error(w, "sign-in refused: the form was posted from another site", http.StatusForbidden)
		return
	}
	secure := r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
	// No Path: the browser scopes the cookie to the directory of /login as it was asked
	// for, so that behind an ingress at /allot/ the token goes to the dashboard only, not
	// to every other application of the host.
	cookie := &http.Cookie{Name: CookieName, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure}
	if out {
		cookie.MaxAge = -1
		http.SetCookie(w, cookie)
		seeOther(w, "login")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	switch {
	case tok == "":
		a.page(w, r, http.StatusUnauthorized, "Enter a token.")
		return
	case len(tok) > maxCookieToken || strings.ContainsAny(tok, " ;,\"\\\t\r\n"):
		a.page(w, r, http.StatusUnauthorized, "This token cannot be kept in a cookie: send it in the Authorization header instead.")
		return
	}
	if _, err := a.token(r.Context(), tok); err != nil {
		status := http.StatusUnauthorized
		var rf *refusal
		if errors.As(err, &rf) {
			status = rf.status
		}
		a.page(w, r, status, err.Error()+".")
		return
	}
	cookie.Value = tok
	http.SetCookie(w, cookie)
	seeOther(w, "./")
}

// seeOther redirects to a path relative to the request's, as the browser asked it (with
// any prefix a proxy in front strips), which http.Redirect would make absolute.
func seeOther(w http.ResponseWriter, rel string) {
	w.Header().Set("Location", rel)
	w.WriteHeader(http.StatusSeeOther)
}

// sameOrigin is whether a POST came from the dashboard's own page, as the browser says
// (Sec-Fetch-Site, Origin); a client that says neither (curl) is let through.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin" || s == "none"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}
