package consumption

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Dimensions are what a report may group by. A queue's department is its top-level
// ancestor (itself at the top): read from parents, a queue's parent by name, as the
// Queues are now; a queue since deleted is its own department.
var Dimensions = []string{"day", "queue", "department", "user", "pool", "model"}

// department is q's top-level ancestor.
func department(q string, parents map[string]string) string {
	for seen := 0; parents[q] != "" && seen < 64; seen++ { // 64: a cycle of parents ends
		q = parents[q]
	}
	return q
}

// Read lists the days from first to last (dates, inclusive) that were written, oldest first.
func Read(ctx context.Context, client kubernetes.Interface, first, last string) ([]Day, error) {
	l, err := client.CoreV1().ConfigMaps(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelDay})
	if err != nil {
		return nil, fmt.Errorf("reading GPU consumption (ConfigMaps labelled %s in %s): %w", LabelDay, v1alpha1.SystemNamespace, err)
	}
	var out []Day
	for i := range l.Items {
		cm := &l.Items[i]
		date := cm.Labels[LabelDay]
		if date < first || date > last || cm.Name != Name(date) {
			continue
		}
		d, err := decode(cm)
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Date < out[b].Date })
	return out, nil
}

// value is the row's value of a dimension (of Dimensions), in the day date.
func (row Row) value(dim, date string, parents map[string]string) string {
	switch dim {
	case "day":
		return date
	case "department":
		return department(row.Queue, parents)
	case "user":
		return row.User
	case "pool":
		return row.Pool
	case "model":
		return row.Model
	}
	return row.Queue
}

// Group is a report's line: the values of the dimensions grouped by, and their figures.
type Group struct {
	By []string
	Figures
}

// Sum adds the days' figures up by the dimensions given (of Dimensions), largest
// allocation first (by day first: the days in order); parents (each queue's parent by
// name) give the departments.
func Sum(days []Day, by []string, parents map[string]string) ([]Group, error) {
	for _, d := range by {
		if !slices.Contains(Dimensions, d) {
			return nil, fmt.Errorf("--by %q is not allowed: one or more of day, queue, department, user, pool, model, comma-separated", d)
		}
	}
	sums := map[string]*Group{}
	for _, d := range days {
		for _, row := range d.Rows {
			var vals []string
			for _, dim := range by {
				vals = append(vals, row.value(dim, d.Date, parents))
			}
			k := fmt.Sprintf("%q", vals)
			g := sums[k]
			if g == nil {
				g = &Group{By: vals}
				sums[k] = g
			}
			g.add(row.Figures)
		}
	}
	out := make([]Group, 0, len(sums))
	for _, g := range sums {
		out = append(out, *g)
	}
	sort.Slice(out, func(a, b int) bool {
		if len(by) > 0 && by[0] == "day" && out[a].By[0] != out[b].By[0] {
			return out[a].By[0] < out[b].By[0] // by day: the days in order
		}
		if out[a].Allocated != out[b].Allocated {
			return out[a].Allocated > out[b].Allocated
		}
		return fmt.Sprint(out[a].By) < fmt.Sprint(out[b].By)
	})
	return out, nil
}

// Dates reads a report's range: dates as 2026-12-01, both inclusive; last defaults to
// today and first to the first of last's month.
func Dates(first, last string, now time.Time) (string, string, error) {
	if last == "" {
		last = dateOf(now)
	}
	l, err := time.Parse(time.DateOnly, last)
	if err != nil {
		return "", "", fmt.Errorf("--to %q is not allowed: a date such as 2026-12-31", last)
	}
	if first == "" {
		first = time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
	}
	f, err := time.Parse(time.DateOnly, first)
	if err != nil {
		return "", "", fmt.Errorf("--from %q is not allowed: a date such as 2026-12-01", first)
	}
	if f.After(l) {
		return "", "", fmt.Errorf("--from %s is after --to %s", first, last)
	}
	return first, last, nil
}
