// Package consumption keeps how many GPU-hours each queue, user, node pool and GPU model
// was given and used, day by day, where a restart loses none of it: in a ConfigMap per UTC
// day in Allot's namespace (allot-usage-YYYY-MM-DD). The idle controller, which already
// reads every workload, its pods and its GPUs' utilisation every 30 seconds, hands each
// look to a Recorder; allot report reads the days back (Read, Sum).
//
// What is counted, and how a gap is: each look counts the time since the last one counted
// (the days' countedUntil, whoever wrote it: this replica, another leader before it, or
// this process before a restart) for every pod that runs GPUs now, from when it started
// where that is later. A pod that started and ended while no scheduler ran is not counted:
// nothing of it is left to read.
package consumption

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
)

const (
	// LabelDay marks the ConfigMaps of the days (its value: the date).
	LabelDay = "allot.dev/usage-day"
	// dataKey is the key of a day's figures in its ConfigMap.
	dataKey = "usage.json"
	// maxGap bounds how far back a look counts: a scheduler that was away for longer counts
	// the last month of what runs now, not years of ConfigMaps.
	maxGap = 31 * 24 * time.Hour
	// Unknown stands for a user, pool or model that cannot be told.
	Unknown = "(unknown)"
)

// Key is what the figures are kept by.
type Key struct {
	Queue string `json:"queue"`
	User  string `json:"user"`
	Pool  string `json:"pool"`
	Model string `json:"model"`
}

// Figures are GPU-seconds: given (allocated), of those the ones whose utilisation was read
// (measured), and busy (used: measured × utilisation).
type Figures struct {
	Allocated float64 `json:"allocatedGPUSeconds"`
	Measured  float64 `json:"measuredGPUSeconds"`
	Used      float64 `json:"usedGPUSeconds"`
}

func (f *Figures) add(o Figures) {
	f.Allocated += o.Allocated
	f.Measured += o.Measured
	f.Used += o.Used
}

// Row is one key's figures of a day.
type Row struct {
	Key
	Figures
}

// Day is what a day's ConfigMap holds.
type Day struct {
	Date string `json:"date"`
	// CountedUntil is the end of the last look counted into this day.
	CountedUntil time.Time `json:"countedUntil"`
	Rows         []Row     `json:"rows"`
}

// Use is one running pod's GPUs at a look.
type Use struct {
	Key
	GPUs    float64   // whole or a share of one
	Started time.Time // when the pod started running
	// Util is its GPUs' utilisation in percent, where Measured.
	Util     float64
	Measured bool
}

// Recorder adds looks to the days.
type Recorder struct {
	Client    kubernetes.Interface
	Namespace string // "" is Allot's
	// Metrics, when set, are given what each look adds once it is written.
	Metrics *Metrics
}

func (r *Recorder) ns() string {
	if r.Namespace == "" {
		return v1alpha1.SystemNamespace
	}
	return r.Namespace
}

// Name is the ConfigMap of a date.
func Name(date string) string { return "allot-usage-" + date }

func dateOf(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Observe counts the time since the last look counted for what runs now, into the days
// it spans, and records now as counted. The first look ever counts nothing.
func (r *Recorder) Observe(ctx context.Context, now time.Time, uses []Use) error {
	var err error
	for range 3 { // another writer between our read and write: read again
		if err = r.observe(ctx, now.UTC(), uses); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

func (r *Recorder) observe(ctx context.Context, now time.Time, uses []Use) error {
	today, cmToday, err := r.get(ctx, dateOf(now))
	if err != nil {
		return err
	}
	from := today.CountedUntil
	if from.IsZero() {
		// A day's first look: the last one counted may be in the days before.
		for back := 1; back <= 31 && from.IsZero(); back++ {
			d, _, err := r.get(ctx, dateOf(now.AddDate(0, 0, -back)))
			if err != nil {
				return err
			}
			from = d.CountedUntil
		}
	}
	switch {
	case from.IsZero():
		// Nothing was ever counted (in the last month): start here.
		today.CountedUntil = now
		return r.put(ctx, today, cmToday)
	case now.Sub(from) > maxGap:
		from = now.Add(-maxGap)
	}
	if !now.After(from) {
		return nil
	}
	// Every day the look spans, read first: a day's own countedUntil is where it was last
	// counted up to, so a look that wrote the days before today and failed on today (an
	// error, another writer) counts none of them twice when it is tried again.
	days := map[string]*Day{today.Date: today}
	cms := map[string]*corev1.ConfigMap{today.Date: cmToday}
	for t := from; dateOf(t) < today.Date; t = midnightAfter(t) {
		d := dateOf(t)
		if days[d], cms[d], err = r.get(ctx, d); err != nil {
			return err
		}
	}
	add := map[string]map[Key]Figures{}
	for _, u := range uses {
		start := from
		if u.Started.After(start) {
			start = u.Started.UTC() // days are UTC days, whatever zone the pod's time came in
		}
		for start.Before(now) {
			end := midnightAfter(start)
			if end.After(now) {
				end = now
			}
			d := dateOf(start)
			if floor := days[d].CountedUntil; floor.After(start) {
				start = floor
				if start.After(end) {
					start = end
				}
			}
			secs := end.Sub(start).Seconds() * u.GPUs
			if secs > 0 {
				f := Figures{Allocated: secs}
				if u.Measured {
					f.Measured, f.Used = secs, secs*u.Util/100
				}
				if add[d] == nil {
					add[d] = map[Key]Figures{}
				}
				g := add[d][u.Key]
				g.add(f)
				add[d][u.Key] = g
			}
			start = end
		}
	}
	// The earlier days first, each counted up to its midnight, today last: its countedUntil
	// is what the next look starts from.
	dates := make([]string, 0, len(days))
	for d := range days {
		if d != today.Date {
			dates = append(dates, d)
		}
	}
	sort.Strings(dates)
	for _, date := range dates {
		d := days[date]
		merge(d, add[date])
		if end, _ := time.Parse(time.DateOnly, date); end.AddDate(0, 0, 1).After(d.CountedUntil) {
			d.CountedUntil = end.AddDate(0, 0, 1)
		}
		if err := r.put(ctx, d, cms[date]); err != nil {
			return err
		}
	}
	merge(today, add[today.Date])
	today.CountedUntil = now
	if err := r.put(ctx, today, cmToday); err != nil {
		return err
	}
	for _, keys := range add {
		for k, f := range keys {
			r.Metrics.add(k, f)
		}
	}
	return nil
}

// midnightAfter is the UTC midnight that ends t's day.
func midnightAfter(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
}

func merge(d *Day, add map[Key]Figures) {
	at := map[Key]int{}
	for i, row := range d.Rows {
		at[row.Key] = i
	}
	for k, f := range add {
		if i, ok := at[k]; ok {
			d.Rows[i].add(f)
			continue
		}
		d.Rows = append(d.Rows, Row{Key: k, Figures: f})
	}
	sort.Slice(d.Rows, func(a, b int) bool { return less(d.Rows[a].Key, d.Rows[b].Key) })
}

func less(a, b Key) bool {
	return strings.Join([]string{a.Queue, a.User, a.Pool, a.Model}, "\x00") < strings.Join([]string{b.Queue, b.User, b.Pool, b.Model}, "\x00")
}

// get reads a date's day; a day not written yet is empty (cm nil).
func (r *Recorder) get(ctx context.Context, date string) (*Day, *corev1.ConfigMap, error) {
	cm, err := r.Client.CoreV1().ConfigMaps(r.ns()).Get(ctx, Name(date), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &Day{Date: date}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading GPU consumption of %s: %w", date, err)
	}
	d, err := decode(cm)
	return d, cm, err
}

func decode(cm *corev1.ConfigMap) (*Day, error) {
	d := &Day{}
	if err := json.Unmarshal([]byte(cm.Data[dataKey]), d); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %s is not the figures of a day: %w", cm.Namespace, cm.Name, dataKey, err)
	}
	return d, nil
}

// put writes a day: created, or updated from the copy read (a conflict says another writer
// came between).
func (r *Recorder) put(ctx context.Context, d *Day, cm *corev1.ConfigMap) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	cms := r.Client.CoreV1().ConfigMaps(r.ns())
	if cm == nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name(d.Date), Namespace: r.ns(), Labels: map[string]string{LabelDay: d.Date}},
			Data: map[string]string{dataKey: string(b)}}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			// No Allot namespace yet (an embedded cluster before its first reservation: the
			// chart installs into it, and there the scheduler may not create namespaces).
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns()}}
			if _, nerr := r.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); nerr != nil && !apierrors.IsAlreadyExists(nerr) {
				return fmt.Errorf("writing GPU consumption: namespace %s: %w", r.ns(), err)
			}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		if apierrors.IsAlreadyExists(err) {
			return apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, err)
		}
		return err
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[dataKey] = string(b)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
