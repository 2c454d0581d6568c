package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseConnectURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://*.localhost:8091":     "http://*.localhost:8091",
		"https://*.Apps.Example.com/": "https://*.apps.example.com",
	} {
		u, err := ParseConnectURL(in)
		if err != nil || u.String() != want {
			t.Errorf("ParseConnectURL(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for in, why := range map[string]string{
		"https://apps.example.com":      "does not start with *.",
		"https://a.*.example.com":       "does not start with *.",
		"ftp://*.example.com":           "scheme",
		"https://*.example.com/console": "more than a scheme",
		"https://*.example.com?x=1":     "more than a scheme",
		"https://*.":                    "does not start with *.",
	} {
		if _, err := ParseConnectURL(in); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "--connect-url") {
			t.Errorf("ParseConnectURL(%q): %v, want it refused (%s)", in, err, why)
		}
	}
}

// Each workload has a host label of its own, one DNS label long at most, readable where
// its names fit.
func TestHostLabel(t *testing.T) {
	a, b := hostLabel("b--c", "a"), hostLabel("c", "a--b")
	if a == b {
		t.Errorf("a in b--c and a--b in c share the host label %s", a)
	}
	if l := hostLabel("team-a", "nb"); !strings.HasPrefix(l, "nb--team-a-") || len(l) != len("nb--team-a-")+8 {
		t.Errorf("hostLabel(team-a, nb) = %s", l)
	}
	long := hostLabel(strings.Repeat("n", 63), strings.Repeat("w", 63))
	if len(long) > 63 || !strings.HasPrefix(long, "w-") {
		t.Errorf("a long name's label: %s (%d)", long, len(long))
	}
	if l := hostLabel("ns", "dotted.name"); strings.Contains(l, ".") {
		t.Errorf("a dotted name's label: %s", l)
	}
}

// A ticket works once and for a minute; a session for its workload's host and its hours.
func TestConnectTicketsAndSessions(t *testing.T) {
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	base, _ := ParseConnectURL("http://*.localhost:8091")
	s := &Server{connect: newConnector(base, func() time.Time { return now })}
	s.opts.defaults()
	get := func(host, path string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://"+host+path, nil)
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		s.ConnectHandler().ServeHTTP(w, r)
		return w
	}
	enterURL := func() (host, path string) {
		u := s.connect.issue(&grant{host: hostLabel("team-a", "nb"), namespace: "team-a", workload: "nb", pod: "nb-0", port: 8888, path: "/lab", token: "t0k"})
		rest := strings.TrimPrefix(u, "http://")
		i := strings.Index(rest, "/")
		return rest[:i], rest[i:]
	}

	host, path := enterURL()
	now = now.Add(61 * time.Second)
	if w := get(host, path); w.Code != http.StatusUnauthorized {
		t.Errorf("a ticket a minute and a second old: %d", w.Code)
	}
	host, path = enterURL()
	if w := get("other--team-a-00000000.localhost:8091", path); w.Code != http.StatusUnauthorized {
		t.Errorf("a ticket on another workload's host: %d", w.Code)
	}
	host, path = enterURL()
	w := get(host, path)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/lab?token=t0k" {
		t.Fatalf("the ticket: %d %v", w.Code, w.Header())
	}
	ck := w.Result().Cookies()[0]
	if ck.Name != connectCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" {
		t.Errorf("the session cookie: %+v", ck)
	}
	if g := s.connect.session(httptest.NewRequest("GET", "http://"+host+"/lab", nil), strings.Split(host, ".")[0]); g != nil {
		t.Error("a session without the cookie")
	}
	r := httptest.NewRequest("GET", "http://"+host+"/lab", nil)
	r.AddCookie(ck)
	if g := s.connect.session(r, strings.Split(host, ".")[0]); g == nil || g.pod != "nb-0" {
		t.Errorf("the session on its host: %+v", g)
	}
	now = now.Add(sessionFor + time.Second)
	if g := s.connect.session(r, strings.Split(host, ".")[0]); g != nil {
		t.Error("a session past its hours")
	}
	if w := get(host, "/lab", ck); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "open the workload from Allot&#39;s console again") {
		t.Errorf("an expired session: %d %s", w.Code, w.Body)
	}
	if w := get("localhost:8091", "/"); w.Code != http.StatusNotFound {
		t.Errorf("the bare connect address: %d", w.Code)
	}
}
