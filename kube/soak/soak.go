// Package soak measures the scheduler over a long run: its heap, goroutines and the API
// server's open watches sampled at a steady beat, shown as a table and a plot, and a
// verdict on whether the heap grows. The run itself (soak_test.go, build tag soak) is
// `make soak`, not part of `make test`.
package soak

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"net/http"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Sample is one look at the scheduler and the API server.
type Sample struct {
	At         time.Duration // since the run began
	HeapBytes  float64       // the scheduler's go_memstats_heap_inuse_bytes
	Goroutines float64       // its go_goroutines
	Watches    float64       // the API server's open WATCH requests, every client's
	Pods       int           // pods in the cluster, and how many bound
	Bound      int
}

// Scrape reads metric families from a Prometheus text endpoint.
func Scrape(client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}

// Parse reads metric families in Prometheus's text format.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Sum adds up a family's gauges or counters whose labels include want (nil: all).
func Sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total, true
}

// Growth is how much the heap grew over the samples of the last window, as a share of
// its level at the window's start, read from a least-squares line through them (one GC
// cycle's swing does not decide it); ok is false with fewer than three samples there.
func Growth(samples []Sample, window time.Duration) (growth float64, ok bool) {
	if len(samples) == 0 {
		return 0, false
	}
	from := samples[len(samples)-1].At - window
	var xs, ys []float64
	for _, s := range samples {
		if s.At >= from {
			xs = append(xs, s.At.Minutes())
			ys = append(ys, s.HeapBytes)
		}
	}
	if len(xs) < 3 {
		return 0, false
	}
	slope, intercept := fit(xs, ys)
	start := intercept + slope*xs[0]
	if start <= 0 {
		return 0, false
	}
	return slope * (xs[len(xs)-1] - xs[0]) / start, true
}

// fit is the least-squares line through the points.
func fit(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / n
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n
}

// Table writes the samples as a table, one row a sample.
func Table(w io.Writer, samples []Sample) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "at\theap MiB\tgoroutines\twatches\tpods\tbound\t")
	for _, s := range samples {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%d\t%d\t\n", s.At.Round(time.Second), s.HeapBytes/(1<<20), s.Goroutines, s.Watches, s.Pods, s.Bound)
	}
	return tw.Flush()
}

// Verdict says whether the heap's growth over window stays within limit, in a line.
func Verdict(samples []Sample, window time.Duration, limit float64) (string, bool) {
	g, ok := Growth(samples, window)
	if !ok {
		return fmt.Sprintf("SOAK NO VERDICT: fewer than three samples in the last %s", window), false
	}
	pass := g <= limit
	word := "PASS"
	if !pass {
		word = "FAIL"
	}
	last := samples[len(samples)-1]
	return fmt.Sprintf("SOAK %s: heap trend %+.1f%% over the last %s (limit %+.0f%%); at the end heap %.1f MiB, %.0f goroutines, %.0f watches, %d pods",
		word, 100*g, window, 100*limit, last.HeapBytes/(1<<20), last.Goroutines, last.Watches, last.Pods), pass
}

// Plot writes heap (MiB) and goroutines against minutes to an SVG or PNG file.
func Plot(path string, samples []Sample) error {
	p := plot.New()
	p.Title.Text = "allot scheduler under churn"
	p.X.Label.Text = "minutes"
	p.Y.Label.Text = "heap in use (MiB) · goroutines ÷ 10"
	p.Add(plotter.NewGrid())
	heap, gor := make(plotter.XYs, len(samples)), make(plotter.XYs, len(samples))
	for i, s := range samples {
		heap[i] = plotter.XY{X: s.At.Minutes(), Y: s.HeapBytes / (1 << 20)}
		gor[i] = plotter.XY{X: s.At.Minutes(), Y: s.Goroutines / 10}
	}
	for i, series := range []struct {
		name string
		pts  plotter.XYs
		c    color.RGBA
	}{{"heap in use (MiB)", heap, color.RGBA{0, 114, 178, 255}}, {"goroutines ÷ 10", gor, color.RGBA{213, 94, 0, 255}}} {
		line, err := plotter.NewLine(series.pts)
		if err != nil {
			return err
		}
		line.Color = series.c
		line.Width = vg.Points(1.5)
		if i == 1 {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(series.name, line)
	}
	p.Y.Min = 0
	p.Y.Max = math.Max(p.Y.Max*1.1, 1)
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
