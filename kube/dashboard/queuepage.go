package dashboard

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/kube/inspect"
)

// QueueDetail is /api/queues/NAME: what the state stream does not carry of one queue, the
// reclaims it made and those made from it, newest first.
type QueueDetail struct {
	Name string `json:"name"`
	// Took are pods stopped for the queue's jobs (reclaimed by it); Lost, its pods stopped
	// for other queues' (reclaimed from it). Both from the victims' Evicted Events, which
	// the scheduler writes with the rule that allowed each.
	Took []Event `json:"took"`
	Lost []Event `json:"lost"`
}

// maxReclaims bounds each list: a page, not an archive.
const maxReclaims = 50

// reclaimedBy reads the scheduler's reclaim message: "reclaimed by queue TAKER for job J:
// TAKER is below …, LOSER is above …".
var reclaimedBy = regexp.MustCompile(`^reclaimed by queue (\S+) for job \S+: .*, (\S+) is above its`)

// queueDetail serves /api/queues/NAME to those who may see the queue; of the Events, those
// of namespaces they may read.
func (s *Server) queueDetail(w http.ResponseWriter, r *http.Request, id *Identity, name string) {
	if name == "" || strings.Contains(name, "/") {
		http.Error(w, "want /api/queues/NAME", http.StatusBadRequest)
		return
	}
	type found struct {
		e    *corev1.Event
		took bool
	}
	var fs []found
	var namespaces []string
	for _, e := range typed[corev1.Event](s.events.GetStore().List()) {
		if e.Reason != "Evicted" {
			continue
		}
		if m := reclaimedBy.FindStringSubmatch(e.Message); m != nil && (m[1] == name || m[2] == name) {
			fs = append(fs, found{e, m[1] == name})
			namespaces = append(namespaces, e.Namespace)
		}
	}
	// As the state shows queues: one they may get, or one their namespaces' pods were
	// admitted to (view.go).
	st, _, _ := s.current()
	var members []string
	for _, w := range st.Workloads {
		if w.Queue == name && len(w.Pods) > 0 {
			members = append(members, w.Namespace)
		}
	}
	var v Viewer = Everyone{}
	if id != nil && s.access != nil {
		v = s.access.decide(r.Context(), id, append(namespaces, members...), []string{name})
	}
	sees := v.CanSeeQueue(name)
	for _, ns := range members {
		sees = sees || v.CanReadNamespace(ns)
	}
	if !sees {
		// As if there were none: 404, not 403, as for a workload.
		http.Error(w, "no queue "+name+" that you may see", http.StatusNotFound)
		return
	}
	d := QueueDetail{Name: name, Took: []Event{}, Lost: []Event{}}
	var took, lost []corev1.Event
	for _, f := range fs {
		switch {
		case !v.CanReadNamespace(f.e.Namespace):
		case f.took:
			took = append(took, *f.e)
		default:
			lost = append(lost, *f.e)
		}
	}
	for _, l := range []struct {
		in  []corev1.Event
		out *[]Event
	}{{took, &d.Took}, {lost, &d.Lost}} {
		sort.Slice(l.in, func(a, b int) bool { return inspect.EventTime(l.in[a]).After(inspect.EventTime(l.in[b])) })
		if len(l.in) > maxReclaims {
			l.in = l.in[:maxReclaims]
		}
		*l.out = showEvents(l.in)
		for i := range l.in { // across namespaces: each pod by its namespace too
			(*l.out)[i].Object = l.in[i].Namespace + "/" + l.in[i].InvolvedObject.Name
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(d)
}
