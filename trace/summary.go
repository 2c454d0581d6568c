package trace

import (
	"math"
	"path/filepath"
	"strings"
)

// Summary is one policy over all seeds.
type Summary struct {
	Policy     string  `json:"policy"`
	Seeds      int     `json:"seeds"`
	At100Mean  float64 `json:"allocAt100Mean"`
	At100SD    float64 `json:"allocAt100SD"`
	AtEndMean  float64 `json:"allocAtEndMean"`
	AtEndSD    float64 `json:"allocAtEndSD"`
	Stranded   float64 `json:"strandedAtEndMean"`
	Curve      []Point `json:"curve"` // mean over seeds
	Published  float64 `json:"publishedFGDAt130,omitempty"`
	PodList    string  `json:"podList,omitempty"`
	BeatsPaper *bool   `json:"beatsPublishedFGD,omitempty"`
}

// PublishedFGD is the mean allocation ratio at 130% arrived demand that the FGD paper's
// authors report for each openb pod list (Weng et al., USENIX ATC'23; see
// traces/README.md at the repository root), as a fraction.
var PublishedFGD = map[string]float64{
	"default": .9539, "gpushare40": .9415, "gpushare60": .9140, "multigpu20": .9565, "multigpu30": .9646,
	"gpuspec10": .9495, "gpuspec20": .9484, "cpu050": .9521, "cpu100": .9535,
}

// PodListName is the variant name of an openb pod list file: "default" for
// openb_pod_list_default.csv; empty if the file is not one.
func PodListName(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".csv")
	if !strings.HasPrefix(base, "openb_pod_list_") {
		return ""
	}
	return strings.TrimPrefix(base, "openb_pod_list_")
}

// Summarize groups runs by policy, in the order the policies first appear.
func Summarize(runs []Run, podList string) []Summary {
	var order []string
	by := map[string][]Run{}
	for _, r := range runs {
		if _, ok := by[r.Policy]; !ok {
			order = append(order, r.Policy)
		}
		by[r.Policy] = append(by[r.Policy], r)
	}
	var out []Summary
	for _, p := range order {
		rs := by[p]
		s := Summary{Policy: p, Seeds: len(rs), PodList: podList}
		var a100, aEnd []float64
		for _, r := range rs {
			a100 = append(a100, r.At100)
			aEnd = append(aEnd, r.AtEnd)
			s.Stranded += r.Stranded / float64(len(rs))
		}
		s.At100Mean, s.At100SD = meanSD(a100)
		s.AtEndMean, s.AtEndSD = meanSD(aEnd)
		s.Curve = meanCurve(rs)
		if pub, ok := PublishedFGD[podList]; ok {
			s.Published = pub
			beats := s.AtEndMean >= pub
			s.BeatsPaper = &beats
		}
		out = append(out, s)
	}
	return out
}

func meanSD(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var m float64
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return m, math.Sqrt(v)
}

// meanCurve averages the runs' curves point by point (they share the arrival grid).
func meanCurve(rs []Run) []Point {
	n := math.MaxInt
	for _, r := range rs {
		n = min(n, len(r.Curve))
	}
	if n == math.MaxInt {
		return nil
	}
	out := make([]Point, n)
	for i := range out {
		out[i].Arrived = rs[0].Curve[i].Arrived
		for _, r := range rs {
			out[i].Allocated += r.Curve[i].Allocated / float64(len(rs))
		}
	}
	return out
}
