package soak

import (
	"math"
	"strings"
	"testing"
	"time"
)

// A heap that swings with each GC cycle but holds its level passes; one that creeps up by
// a MiB a minute from 100 MiB fails, and its growth is read from the trend, not from the
// last swing.
func TestHeapVerdict(t *testing.T) {
	var flat, creeping []Sample
	for m := 0; m <= 30; m++ {
		swing := 8.0 * math.Sin(float64(m)) // MiB, a GC cycle's
		flat = append(flat, Sample{At: time.Duration(m) * time.Minute, HeapBytes: (100 + swing) * (1 << 20)})
		creeping = append(creeping, Sample{At: time.Duration(m) * time.Minute, HeapBytes: (100 + float64(m) + swing) * (1 << 20)})
	}
	if line, pass := Verdict(flat, 20*time.Minute, 0.10); !pass || !strings.HasPrefix(line, "SOAK PASS") {
		t.Errorf("a level heap: %s", line)
	}
	g, _ := Growth(creeping, 20*time.Minute)
	if g < 0.15 || g > 0.25 { // 20 MiB on about 110
		t.Errorf("a heap creeping 1 MiB a minute grew %.1f%% over 20 minutes by the trend, want about 18%%", 100*g)
	}
	if line, pass := Verdict(creeping, 20*time.Minute, 0.10); pass || !strings.HasPrefix(line, "SOAK FAIL") {
		t.Errorf("a creeping heap: %s", line)
	}
	if _, pass := Verdict(flat[:2], 20*time.Minute, 0.10); pass {
		t.Error("two samples gave a verdict")
	}
}

// The API server's and the scheduler's metrics read as Prometheus writes them.
func TestParseAndSum(t *testing.T) {
	text := `# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="GET",version="v1"} 1
# TYPE go_goroutines gauge
go_goroutines 412
`
	fams, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := Sum(fams, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH"}); w != 5 {
		t.Errorf("watches %v, want 5", w)
	}
	if g, ok := Sum(fams, "go_goroutines", nil); !ok || g != 412 {
		t.Errorf("goroutines %v %v", g, ok)
	}
	if _, ok := Sum(fams, "absent", nil); ok {
		t.Error("an absent family summed")
	}
}
