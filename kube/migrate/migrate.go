// Package migrate turns other schedulers' queues into Allot's: KAI-Scheduler's (and so
// Run:ai's) scheduling.run.ai/v2 Queues and Volcano's scheduling.volcano.sh/v1beta1
// Queues, read from a cluster or from exported YAML, become v1alpha1 Queues. Every field
// read is accounted for in a Note: what it became, or why Allot cannot honour it. allot
// import prints the result and, with --apply, writes it (Apply).
package migrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Kind is a peer scheduler's queue kind that allot import reads.
type Kind struct {
	Scheduler string // "KAI-Scheduler"
	Short     string // "kai": --from and the table's QUEUE column
	Resource  schema.GroupVersionResource
	convert   func(*converter, *unstructured.Unstructured) *Imported
	// api, for a kind that no cluster serves (Run:ai's projects live in its control plane),
	// says where a file of them comes from; such a kind is read from files only.
	api string
	// kinds are the object kinds of the kind; nil: Queue.
	kinds []string
}

// GroupVersionKind is the kind's apiVersion and kind as they appear in YAML.
func (k *Kind) GroupVersionKind() schema.GroupVersionKind {
	return k.Resource.GroupVersion().WithKind("Queue")
}

// FileOnly tells whether the kind is read from files only (no cluster serves it).
func (k *Kind) FileOnly() bool { return k.api != "" }

func (k *Kind) String() string {
	if k.api != "" {
		return fmt.Sprintf("%s projects and departments (%s)", k.Scheduler, k.api)
	}
	return fmt.Sprintf("%s Queue (%s)", k.Scheduler, k.Resource.GroupVersion())
}

// holds tells whether u is an object of this kind.
func (k *Kind) holds(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	if gvk.GroupVersion() != k.Resource.GroupVersion() {
		return false
	}
	if k.kinds == nil {
		return gvk.Kind == "Queue"
	}
	return slices.Contains(k.kinds, gvk.Kind)
}

// The kinds allot import reads, in the order it reads them.
var (
	KAI = &Kind{Scheduler: "KAI-Scheduler", Short: "kai",
		Resource: schema.GroupVersionResource{Group: "scheduling.run.ai", Version: "v2", Resource: "queues"}}
	Volcano = &Kind{Scheduler: "Volcano", Short: "volcano",
		Resource: schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "queues"}}
	// RunAI is Run:ai's control plane: its projects and departments, with their quotas per
	// node pool, as its REST API returns them. Its Resource is only a tag ReadFile gives
	// them; no cluster serves it.
	RunAI = &Kind{Scheduler: "Run:ai", Short: "runai",
		Resource: schema.GroupVersionResource{Group: "org-unit.run.ai", Version: "v1", Resource: "projects"},
		api:      "GET /api/v1/org-unit/departments and /api/v1/org-unit/projects, saved to a file",
		kinds:    []string{runaiDepartment, runaiProject}}
	Kinds = []*Kind{KAI, Volcano, RunAI}
)

func init() {
	KAI.convert = convertKAI
	Volcano.convert = convertVolcano
	RunAI.convert = convertRunAI
}

// KindNamed finds a kind by its short name ("kai", "volcano").
func KindNamed(short string) (*Kind, error) {
	var names []string
	for _, k := range Kinds {
		if k.Short == short {
			return k, nil
		}
		names = append(names, k.Short)
	}
	return nil, fmt.Errorf("%q is not a kind allot import reads: %s", short, strings.Join(names, ", "))
}

// Note is one field of a source queue and what became of it.
type Note struct {
	Queue string `json:"queue"`           // the source queue, "kai/research"
	Field string `json:"field"`           // "spec.resources.gpu.quota"
	Value string `json:"value"`           // as read; "(unset)" where a default was written out
	Allot string `json:"allot,omitempty"` // what it became, "spec.gpu.quota: 6"; empty: not carried
	Why   string `json:"why,omitempty"`   // why it was not carried, or how Allot differs
}

// Carried tells whether the field made it into the Allot queue.
func (n Note) Carried() bool { return n.Allot != "" }

// Imported is one Allot queue and where it came from.
type Imported struct {
	Queue *v1alpha1.Queue
	From  *Kind
	// Owns lists the spec fields the source decides: Apply overwrites these on a queue
	// that exists and leaves the rest (namespaces, node pools, …) as an admin set them.
	Owns []string
	// Pool is the node pool the source queue schedules in alone (KAI's shard of a pool):
	// its GPU quota is that pool's.
	Pool string
}

// Result is what a set of source queues becomes.
type Result struct {
	Queues []*Imported // parents before their children
	Notes  []Note      // in the order of Queues, then field by field
}

// NotCarried counts the notes of fields that did not make it.
func (r *Result) NotCarried() int {
	n := 0
	for _, note := range r.Notes {
		if !note.Carried() {
			n++
		}
	}
	return n
}

// Convert turns source queues into Allot's. existing names the Allot queues already in the
// cluster, which a source queue may name as its parent; nil when no cluster was asked, and
// a parent that is not among the queues read is then left for the cluster to check. Every
// problem of the input is
// returned at once, each naming the queue, the field and what is allowed; nothing is
// converted then.
func Convert(objs []*unstructured.Unstructured, existing map[string]bool) (*Result, error) {
	c := &converter{weights: map[string]float64{}, weightNote: map[string]int{}, departments: runaiDepartments(objs)}
	seen := map[string]string{}
	var out []*Imported
	for _, u := range objs {
		k := kindOf(u)
		if k == nil {
			c.errs = append(c.errs, fmt.Errorf("%s %s: not a queue allot import reads (%s)", u.GetAPIVersion(), u.GetKind(), kindList()))
			continue
		}
		name := u.GetName()
		if name == "" {
			c.errs = append(c.errs, fmt.Errorf("a %s without metadata.name", k))
			continue
		}
		if other, dup := seen[name]; dup {
			c.errs = append(c.errs, fmt.Errorf("%s/%s and %s/%s would both be Allot queue %s: import one kind at a time (--from %s)", other, name, k.Short, name, name, k.Short))
			continue
		}
		seen[name] = k.Short
		if im := k.convert(c, u); im != nil {
			out = append(out, im)
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	c.scaleWeights(out)
	intoPools(out)
	ordered, err := parentsFirst(out, existing)
	if err != nil {
		return nil, err
	}
	// Notes follow the queues' order, each queue's in the order its fields were read.
	// Those of a source queue that became none (Volcano's root) come last.
	var notes []Note
	placed := map[string]bool{}
	for _, im := range ordered {
		src := im.From.Short + "/" + im.Queue.Name
		placed[src] = true
		for _, n := range c.notes {
			if n.Queue == src {
				notes = append(notes, n)
			}
		}
	}
	for _, n := range c.notes {
		if !placed[n.Queue] {
			notes = append(notes, n)
		}
	}
	return &Result{Queues: ordered, Notes: notes}, nil
}

func kindOf(u *unstructured.Unstructured) *Kind {
	for _, k := range Kinds {
		if k.holds(u) {
			return k
		}
	}
	return nil
}

func kindList() string {
	var s []string
	for _, k := range Kinds {
		if k.FileOnly() {
			s = append(s, k.Scheduler+"'s projects and departments as its API returns them")
			continue
		}
		gvk := k.GroupVersionKind()
		s = append(s, gvk.GroupVersion().String()+" "+gvk.Kind)
	}
	return "it reads " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// parentsFirst orders the queues so that a parent is written before its children (Allot's
// webhook refuses a queue whose parent does not exist), and refuses a parent that is
// neither imported nor already in Allot, and a cycle.
func parentsFirst(qs []*Imported, existing map[string]bool) ([]*Imported, error) {
	byName := map[string]*Imported{}
	for _, im := range qs {
		byName[im.Queue.Name] = im
	}
	var errs []error
	for _, im := range qs {
		p := im.Queue.Spec.Parent
		// existing is nil when no cluster was asked (a file, read without --apply).
		if p != "" && byName[p] == nil && existing != nil && !existing[p] {
			errs = append(errs, fmt.Errorf("%s/%s: its parent %q is not among the queues read nor an Allot queue: import it too, or create it first (allot queue create %s --quota N)", im.From.Short, im.Queue.Name, p, p))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.SliceStable(qs, func(a, b int) bool { return qs[a].Queue.Name < qs[b].Queue.Name })
	var out []*Imported
	state := map[string]int{} // 1: on the path being walked, 2: placed
	var visit func(im *Imported, path []string) error
	visit = func(im *Imported, path []string) error {
		switch state[im.Queue.Name] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("the queues' parents form a cycle: %s → %s", strings.Join(path, " → "), im.Queue.Name)
		}
		state[im.Queue.Name] = 1
		if p := byName[im.Queue.Spec.Parent]; p != nil {
			if err := visit(p, append(path, im.Queue.Name)); err != nil {
				return err
			}
		}
		state[im.Queue.Name] = 2
		out = append(out, im)
		return nil
	}
	for _, im := range qs {
		if err := visit(im, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// converter collects what the conversion of a set of queues finds.
type converter struct {
	notes []Note
	errs  []error
	// GPU over-quota weights as read, by Allot queue, and the note that shows each: Allot's
	// weights are whole numbers, so fractional ones are scaled with their siblings.
	weights    map[string]float64
	weightNote map[string]int
	// departments names Run:ai's departments by id, for its projects' parentId.
	departments map[string]string
}

func (c *converter) note(n Note) int {
	c.notes = append(c.notes, n)
	return len(c.notes) - 1
}

// setWeight records a queue's GPU over-quota weight as read; scaleWeights writes it.
func (c *converter) setWeight(q *v1alpha1.Queue, w float64, n Note) {
	c.weights[q.Name] = w
	c.weightNote[q.Name] = c.note(n)
}

// scaleWeights writes the GPU over-quota weights. Only their ratio among siblings counts,
// so where one of a family is fractional all of the family are multiplied by the same
// power of ten, the smallest that makes them whole (at most 1000, then rounded).
func (c *converter) scaleWeights(qs []*Imported) {
	families := map[string][]*v1alpha1.Queue{}
	for _, im := range qs {
		if _, ok := c.weights[im.Queue.Name]; ok {
			families[im.Queue.Spec.Parent] = append(families[im.Queue.Spec.Parent], im.Queue)
		}
	}
	for _, fam := range families {
		scale := 1.0
		for _, m := range []float64{1, 10, 100, 1000} {
			scale = m
			whole := true
			for _, q := range fam {
				v := c.weights[q.Name] * m
				if math.Abs(v-math.Round(v)) > 1e-9 {
					whole = false
				}
			}
			if whole {
				break
			}
		}
		for _, q := range fam {
			w := int32(min(math.Round(c.weights[q.Name]*scale), math.MaxInt32))
			q.Spec.GPU.OverQuotaWeight = &w
			n := &c.notes[c.weightNote[q.Name]]
			n.Allot = fmt.Sprintf("spec.gpu.overQuotaWeight: %d", w)
			if scale != 1 && float64(w) != c.weights[q.Name] {
				n.Why = join(n.Why, fmt.Sprintf("×%g with its siblings: Allot's weights are whole numbers, and only their ratio among siblings counts", scale))
			}
		}
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// fields reads a source queue's spec, field by field, taking each out as it is read so
// that what is left at the end (a field of a newer version, a misspelling) is listed as
// not carried rather than silently dropped.
type fields struct {
	c     *converter
	queue string // "kai/research"
	spec  map[string]any
	// top: the fields are the object's own (Run:ai's API), not under spec; base is where
	// they sit in it ("resources[nodePool=h100].").
	top  bool
	base string
}

func (f *fields) path(p string) string {
	if f.top {
		return f.base + p
	}
	return "spec." + p
}

func (f *fields) errorf(path, format string, args ...any) {
	f.c.errs = append(f.c.errs, fmt.Errorf("%s: %s: %s", f.queue, f.path(path), fmt.Sprintf(format, args...)))
}

func (f *fields) note(path, value, allot, why string) {
	f.c.note(Note{Queue: f.queue, Field: f.path(path), Value: value, Allot: allot, Why: why})
}

// take removes a value from the spec; path is dotted ("resources.gpu.quota").
func (f *fields) take(path string) (any, bool) {
	parts := strings.Split(path, ".")
	m := f.spec
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	v, ok := m[parts[len(parts)-1]]
	if ok {
		delete(m, parts[len(parts)-1])
	}
	return v, ok && v != nil
}

// number reads a number; allowed says what is, for the error.
func (f *fields) number(path, allowed string) (float64, bool) {
	v, ok := f.take(path)
	if !ok {
		return 0, false
	}
	n, good := toFloat(v)
	if !good || math.IsNaN(n) || math.IsInf(n, 0) {
		f.errorf(path, "%s is not allowed: %s", show(v), allowed)
		return 0, false
	}
	return n, true
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	case string:
		// A quoted number ("4") is still a number; anything else is refused by the caller.
		x, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return x, err == nil
	}
	return 0, false
}

// integer reads a whole number within int32.
func (f *fields) integer(path, allowed string, lo int64) (int32, bool) {
	v, ok := f.take(path)
	if !ok {
		return 0, false
	}
	n, good := toFloat(v)
	if !good || n != math.Trunc(n) || n < float64(lo) || n > math.MaxInt32 {
		f.errorf(path, "%s is not allowed: %s", show(v), allowed)
		return 0, false
	}
	return int32(n), true
}

func (f *fields) str(path string) (string, bool) {
	v, ok := f.take(path)
	if !ok {
		return "", false
	}
	s, good := v.(string)
	if !good {
		f.errorf(path, "%s is not allowed: a string", show(v))
		return "", false
	}
	return s, true
}

func (f *fields) boolean(path string) (bool, bool) {
	v, ok := f.take(path)
	if !ok {
		return false, false
	}
	b, good := v.(bool)
	if !good {
		f.errorf(path, "%s is not allowed: true or false", show(v))
		return false, false
	}
	return b, true
}

// object reads a map, refusing anything else there.
func (f *fields) object(path string) (map[string]any, bool) {
	parts := strings.Split(path, ".")
	m := f.spec
	for _, p := range parts {
		v, ok := m[p]
		if !ok || v == nil {
			return nil, false
		}
		next, good := v.(map[string]any)
		if !good {
			f.errorf(path, "%s is not allowed: an object", show(v))
			delete(m, p)
			return nil, false
		}
		m = next
	}
	return m, true
}

// leftovers lists what was not read, each leaf once, as not carried.
func (f *fields) leftovers(kind string) {
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
				walk(prefix+k+".", sub)
				continue
			}
			if sub, ok := m[k].(map[string]any); ok && len(sub) == 0 {
				continue // an empty object says nothing
			}
			f.note(prefix+k, show(m[k]), "", fmt.Sprintf("not a field of %s that allot import knows: check it by hand", kind))
		}
	}
	walk("", f.spec)
}

// show prints a value as it was written.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case map[string]any, []any:
		s := fmt.Sprint(x)
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		return s
	}
	return fmt.Sprint(v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
