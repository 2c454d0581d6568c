package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/allot-dev/allot/internal/browsertest"
	"github.com/allot-dev/allot/kube/inspect"
)

// The dashboard's face: what a new user met in the first hour with `allot up --demo`
// (issue 37): the charts' time axis, an 8-GPU node's row at 1280 px, one 24-hour clock.

// faceUp starts `allot up --demo` and returns it with its dashboard's address (ending in /).
func faceUp(t *testing.T) (*upRun, string) {
	t.Helper()
	up := startUp(t, "--demo")
	m := regexp.MustCompile(`dashboard: (http://\S+)`).FindStringSubmatch(up.out.String())
	if m == nil {
		t.Fatalf("allot up printed no dashboard address:\n%s", up.out.String())
	}
	return up, strings.TrimSuffix(m[1], "/") + "/"
}

// faceTicks reads every chart's time labels as the chart drew them (it keeps them on its
// element, joined by |), with the chart's width: "WIDTH=a|b|c".
const faceTicks = `Array.from(document.querySelectorAll("figure.chart [data-xticks]")).map(e => e.clientWidth + "=" + e.dataset.xticks)`

// faceLabel is one time label: a 24-hour time (with seconds where the ticks are seconds
// apart), a date ("26 Nov", with the year where the axis spans years), or a time over its
// date on two lines.
var faceLabel = regexp.MustCompile(`^(\d{2}:\d{2}(:\d{2})?)?\n?(\d{1,2} [A-Z][a-z]{2}( \d{4})?)?$`)

// faceCheckAxis says what is wrong with one chart's time axis ("" if nothing): at least
// two labels, none empty, each a 24-hour time or a date, no two the same (so never two
// alike side by side), each with its 80 px.
func faceCheckAxis(axis string) string {
	width, list, _ := strings.Cut(axis, "=")
	if list == "" {
		return fmt.Sprintf("no time labels at all (%q)", axis)
	}
	labels := strings.Split(list, "|")
	var bad []string
	if len(labels) < 2 {
		bad = append(bad, fmt.Sprintf("%d time label(s), want at least two", len(labels)))
	}
	seen := map[string]bool{}
	for i, l := range labels {
		switch {
		case l == "" || !faceLabel.MatchString(l):
			bad = append(bad, fmt.Sprintf("label %q is neither a 24-hour time nor a date", l))
		case i > 0 && l == labels[i-1]:
			bad = append(bad, fmt.Sprintf("%q twice side by side", l))
		case seen[l]:
			bad = append(bad, fmt.Sprintf("%q twice", l))
		}
		seen[l] = true
	}
	if px, _ := strconv.Atoi(width); len(labels)*80 > px {
		bad = append(bad, fmt.Sprintf("%d labels on %d px: closer than 80 px", len(labels), px))
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("labels %q: %s", labels, strings.Join(bad, "; "))
}

// faceStream stands in for the dashboard's state stream: the page is the real server's
// (its pages, its state and its workloads' details, through a proxy), but /api/stream
// sends the states the test sets, so that the charts can be shown any history.
type faceStream struct {
	mu      sync.Mutex
	state   []byte
	changed chan struct{}
}

func (f *faceStream) set(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = b
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *faceStream) current() ([]byte, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.changed
}

func faceProxy(t *testing.T, real string) (*faceStream, string) {
	t.Helper()
	u, err := url.Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	f := &faceStream{changed: make(chan struct{})}
	stop := make(chan struct{})
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/stream" {
			proxy.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		for {
			b, changed := f.current()
			if b != nil {
				if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
			select {
			case <-r.Context().Done():
				return
			case <-stop:
				return
			case <-changed:
			}
		}
	}))
	// The browser still holds the stream open when the server closes.
	t.Cleanup(func() { close(stop); srv.CloseClientConnections(); srv.Close() })
	return f, srv.URL + "/"
}

// faceState is the real server's state now, its history replaced by n samples spread
// over span and ending now (one sample where n is 1), numbered version.
func faceState(t *testing.T, real string, span time.Duration, n int, version int) []byte {
	t.Helper()
	resp, err := http.Get(real + "api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("api/state: %v\n%s", err, body)
	}
	hist, _ := st["history"].([]any)
	if len(hist) == 0 {
		t.Fatalf("api/state has no history: %s", body)
	}
	last := hist[len(hist)-1].(map[string]any)
	now := time.Now()
	var out []any
	for i := range n {
		s := map[string]any{}
		for k, v := range last {
			s[k] = v
		}
		at := now
		if n > 1 {
			at = now.Add(-span + time.Duration(float64(span)*float64(i)/float64(n-1)))
		}
		s["time"] = at.Format(time.RFC3339Nano)
		out = append(out, s)
	}
	st["history"] = out
	st["time"] = now.Format(time.RFC3339Nano)
	st["version"] = version
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDashboardFaceTimeAxis: the charts' time axis shows at least two labels, no two
// alike, 24-hour, for any span of history: right after `allot up --demo` starts (a history
// of one point, then of less than a second: the axis read "12:50:11 | 12:50:11"), and for
// histories of under a second up to weeks, shown through the real page.
func TestDashboardFaceTimeAxis(t *testing.T) {
	b := browsertest.Start(t, 1280, 800)
	_, real := faceUp(t)

	// Right after the start, live: every axis the Queues and Overview pages draw while the
	// demo's work is placed.
	checkLive := func(page string, d time.Duration) {
		t.Helper()
		b.Open(t, real+page)
		seen := map[string]bool{}
		var readings int
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			for _, a := range browsertest.Eval[[]string](t, b, faceTicks) {
				readings++
				if seen[a] {
					continue
				}
				seen[a] = true
				if msg := faceCheckAxis(a); msg != "" {
					t.Errorf("%s, live: %s", page, msg)
				}
			}
		}
		if readings == 0 {
			t.Errorf("%s: no chart drew a time axis in %v", page, d)
		}
		t.Logf("%s, live: %d distinct axes read", page, len(seen))
	}
	checkLive("#/queues", 6*time.Second)
	checkLive("#/", 2*time.Second)
	b.Screenshot(t, "queues-live")

	// Any span: the same page and state, the history made to span from nothing to weeks.
	stream, proxied := faceProxy(t, real)
	spans := []struct {
		span time.Duration
		n    int
	}{
		{0, 1}, {300 * time.Millisecond, 2}, {2 * time.Second, 3}, {10 * time.Second, 3}, {45 * time.Second, 10},
		{90 * time.Second, 19}, {10 * time.Minute, 60}, {time.Hour, 720}, {6 * time.Hour, 720}, {23 * time.Hour, 720},
		{36 * time.Hour, 720}, {3 * 24 * time.Hour, 720}, {20 * 24 * time.Hour, 720}, {200 * 24 * time.Hour, 720},
	}
	for i, page := range []string{"#/queues", "#/"} {
		for j, s := range spans {
			version := 1_000_000 + 100*i + j
			stream.set(faceState(t, real, s.span, s.n, version))
			if j == 0 {
				b.Open(t, proxied+page)
			}
			b.WaitText(t, "main", fmt.Sprintf("the state of a %v history", s.span), func(string) bool {
				return browsertest.Eval[string](t, b, `document.querySelector("main").dataset.version`) == strconv.Itoa(version)
			})
			time.Sleep(300 * time.Millisecond) // the chart redraws on the next frame
			axes := browsertest.Eval[[]string](t, b, faceTicks)
			if len(axes) == 0 {
				t.Errorf("%s, history of %v: no chart drew a time axis", page, s.span)
			}
			for _, a := range axes {
				if msg := faceCheckAxis(a); msg != "" {
					t.Errorf("%s, history of %v in %d points: %s", page, s.span, s.n, msg)
					break // the page's charts share the axis
				}
			}
			if i == 0 && (s.span == 0 || s.span == 23*time.Hour || s.span == 36*time.Hour || s.span == 3*24*time.Hour) {
				b.Screenshot(t, fmt.Sprintf("queues-%dmin", int(s.span.Minutes())))
			}
		}
	}
}

// TestDashboardFaceNodeRow: at 1280 px an 8-GPU node's GPUs stand on one row (they
// wrapped 7 + 1); narrower, they wrap into even rows (4 + 4, 3 + 3 + 2, …), never with
// one GPU alone under the others, and never past the node's card.
func TestDashboardFaceNodeRow(t *testing.T) {
	b := browsertest.Start(t, 1280, 800)
	_, real := faceUp(t)
	b.Open(t, real+"#/nodes")
	b.WaitText(t, "article.node", "two nodes of 8 GPUs", browsertest.Contains("dgx-1", "dgx-2"))
	rows := func() map[string][]int {
		t.Helper()
		return browsertest.Eval[map[string][]int](t, b, `Object.fromEntries(Array.from(document.querySelectorAll("article.node")).map(n => {
			const tops = Array.from(n.querySelectorAll(".gpu")).map(g => g.offsetTop);
			const right = n.getBoundingClientRect().right;
			const over = Array.from(n.querySelectorAll(".gpu")).filter(g => g.getBoundingClientRect().right > right + 0.5).length;
			const rows = [...new Set(tops)].map(t => tops.filter(x => x === t).length);
			return [n.dataset.node, over > 0 ? [-over] : rows] }))`)
	}
	width := browsertest.Eval[int](t, b, `document.documentElement.clientWidth`)
	t.Logf("window 1280x800: page %d px wide", width)
	for node, r := range rows() {
		if len(r) != 1 || r[0] != 8 {
			t.Errorf("at 1280 px, %s's 8 GPUs stand in rows of %v, want one row of 8", node, r)
		}
	}
	b.Screenshot(t, "nodes-1280")
	for _, w := range []int{1440, 1100, 1000, 900, 800, 700, 600, 500, 400, 340} {
		if err := chromedp.Do(b.Ctx, chromedp.EmulateViewport(int64(w), 800)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		for node, r := range rows() {
			least, most := r[0], r[0]
			for _, n := range r {
				least, most = min(least, n), max(most, n)
			}
			switch {
			case least < 0:
				t.Errorf("at %d px, %d of %s's GPUs stand past its card", w, -least, node)
			case w >= 1280 && len(r) != 1:
				t.Errorf("at %d px, %s's 8 GPUs stand in rows of %v, want one row", w, node, r)
			case most-least > 1:
				t.Errorf("at %d px, %s's 8 GPUs stand in rows of %v: uneven", w, node, r)
			}
		}
		if w == 900 || w == 500 {
			b.Screenshot(t, fmt.Sprintf("nodes-%d", w))
		}
	}
}

// TestDashboardFaceClock: a workload's timeline and events say their times on the same
// 24-hour clock as the charts (they used the browser's 12-hour default: "1:05:07 PM").
func TestDashboardFaceClock(t *testing.T) {
	b := browsertest.Start(t, 1280, 800)
	up, real := faceUp(t)
	var job string
	deadline := time.Now().Add(90 * time.Second)
	for job == "" {
		out, err := runAllot(up.ctx, up.kubeconfig, "list", "-o", "json")
		var ws []inspect.Workload
		if err == nil && json.Unmarshal([]byte(out), &ws) == nil {
			for _, w := range ws {
				if strings.HasPrefix(w.Name, "team-a-") && w.Status == "Running" {
					job = w.Name
					break
				}
			}
		}
		if job == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no team-a job runs: %s %v", out, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	b.Open(t, real+"#/workloads/default/"+job)
	b.WaitText(t, ".timeline", job+"'s timeline", browsertest.Contains("Submitted", "Started"))
	clock := regexp.MustCompile(`^(\d{1,2} [A-Z][a-z]{2} )?(\d{2}:\d{2}:\d{2})$`)
	check := func(what, sel string) int {
		t.Helper()
		got := browsertest.Eval[[]string](t, b, `Array.from(document.querySelectorAll(`+strconv.Quote(sel)+`)).map(e =>
			((e.querySelector("time") || e).getAttribute("datetime") || "") + "=" + e.textContent)`)
		for _, g := range got {
			iso, text, _ := strings.Cut(g, "=")
			m := clock.FindStringSubmatch(text)
			if m == nil {
				t.Errorf("%s time %q: want a 24-hour HH:MM:SS (no AM/PM)", what, text)
				continue
			}
			if iso == "" {
				continue
			}
			at, err := time.Parse(time.RFC3339, iso)
			if err != nil {
				t.Errorf("%s time's datetime %q: %v", what, iso, err)
			} else if want := at.Local().Format("15:04:05"); m[2] != want {
				t.Errorf("%s time %q for %s: want %s", what, text, iso, want)
			}
		}
		return len(got)
	}
	if n := check("timeline", ".timeline time"); n < 2 {
		t.Errorf("%d times on the timeline, want Submitted's and Started's", n)
	}
	check("event", "table.events tbody tr > td:first-child")
	b.Screenshot(t, "timeline")
}
