package bench

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ChildReport is what the scheduler run by a Scenario writes when it stops.
type ChildReport struct {
	// Requests counts the scheduler's API requests by "verb resource[/subresource]".
	Requests map[string]int `json:"requests"`
	// MaxRSS is the process's peak resident memory (VmHWM), bytes.
	MaxRSS int64 `json:"maxRSS"`
	// HeapSys is the Go runtime's memory obtained from the OS (runtime.MemStats.Sys) at the
	// end, bytes.
	HeapSys uint64 `json:"heapSys"`
}

// WriteHeapProfile writes the heap profile to path, after a collection so that what it
// shows in use is live.
func WriteHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

// NewRequestCounter is a RequestCounter at zero.
func NewRequestCounter() *RequestCounter { return &RequestCounter{n: map[string]int{}} }

// RequestCounter counts the requests that pass through a client by verb and resource.
type RequestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *RequestCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		key := requestKey(r)
		c.mu.Lock()
		c.n[key]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *RequestCounter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// requestKey names a request as the API server's request metrics do: its verb (get, list,
// watch, create, update, patch, delete, deletecollection) and its resource, with the
// subresource after a slash (pods/binding, pods/eviction, queues/status).
func requestKey(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/... or /apis/GROUP/VERSION/...; shorter, the discovery documents.
	switch {
	case parts[0] == "api" && len(parts) <= 2, parts[0] == "apis" && len(parts) <= 3:
		return "get discovery"
	case parts[0] == "api":
		parts = parts[2:]
	case parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(r.Method) + " " + r.URL.Path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // a namespaced resource; "namespaces/NAME" alone is the namespace itself
	}
	resource, named := "", false
	switch len(parts) {
	case 1:
		resource = parts[0]
	case 2:
		resource, named = parts[0], true
	default:
		resource, named = parts[0]+"/"+parts[2], true
	}
	verb := ""
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb + " " + resource
}

// formatRequests lists the counts, the most first, as "N verb resource".
func formatRequests(n map[string]int) (string, int) {
	keys := make([]string, 0, len(n))
	total := 0
	for k, v := range n {
		keys = append(keys, k)
		total += v
	}
	sort.Slice(keys, func(a, b int) bool {
		if n[keys[a]] != n[keys[b]] {
			return n[keys[a]] > n[keys[b]]
		}
		return keys[a] < keys[b]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", n[k], k)
	}
	return strings.Join(parts, ", "), total
}

// PeakRSS is this process's peak resident memory, from /proc/self/status's VmHWM, in
// bytes; 0 where there is none. Not getrusage's: Linux carries the parent's peak into a
// child started as os/exec starts one (its memory shared until exec), and the bench's
// process holds the whole embedded control plane.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
