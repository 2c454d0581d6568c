package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
)

var (
	binariesOnce sync.Once
	binariesDir  string
	binariesErr  error
)

// TestMain removes the binaries againstBinaries built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binariesDir != "" {
		os.RemoveAll(binariesDir)
	}
	os.Exit(code)
}

// againstBinaries builds upstream kube-scheduler and allot once for the tests of this file.
func againstBinaries(t *testing.T) string {
	binariesOnce.Do(func() {
		if binariesDir, binariesErr = os.MkdirTemp("", "allot-against-"); binariesErr != nil {
			return
		}
		for pkg, out := range map[string]string{"k8s.io/kubernetes/cmd/kube-scheduler": "kube-scheduler", "github.com/allot-dev/allot/cmd/allot": "allot"} {
			if b, err := exec.Command("go", "build", "-o", filepath.Join(binariesDir, out), pkg).CombinedOutput(); err != nil {
				binariesErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if binariesErr != nil {
		t.Fatal(binariesErr)
	}
	return binariesDir
}

// compareOnSmallClusters runs the comparison in the mode on 5 nodes with 40 pods, one
// round, and checks that every run bound every pod; it gives the runs and the output.
func compareOnSmallClusters(t *testing.T, mode string) ([]AgainstRun, string) {
	t.Helper()
	dir := againstBinaries(t)
	var out, progress bytes.Buffer
	runs, err := Against(context.Background(), &out, &progress, filepath.Join(dir, "allot"), filepath.Join(dir, "kube-scheduler"), mode, 5, 40, 1)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	for _, r := range runs {
		if r.Bound != 40 || r.PodsPerSecond <= 0 || r.Submitted <= 0 || r.FirstBind <= 0 || r.FirstBind > r.Elapsed || r.Binding <= 0 {
			t.Errorf("%s bound %d of 40 pods at %.0f pods/s (first after %s, %.0f pods/s from then)", r.Scheduler, r.Bound, r.PodsPerSecond, r.FirstBind, r.Binding)
		}
	}
	return runs, out.String()
}

// TestBenchAgainstKubeScheduler builds upstream kube-scheduler from the k8s.io/kubernetes
// module of go.mod and allot, as make bench-kube does, and runs the comparison on a small
// cluster: each scheduler on its own fresh API server binds every pod as do the bench's
// own binds as the pods arrive (the API server's ceiling), and the table, the ratio and
// each scheduler's part of the ceiling are printed, in sentences and in the last table.
func TestBenchAgainstKubeScheduler(t *testing.T) {
	runs, out := compareOnSmallClusters(t, Stream)
	if len(runs) != 3 || runs[0].Scheduler != "kube-scheduler" || runs[1].Scheduler != "allot" || runs[2].Scheduler != direct {
		t.Fatalf("runs %+v, want kube-scheduler, allot and direct binds", runs)
	}
	for _, re := range []string{`(?m)^kube-scheduler +\d+ .* 40/40 `, `(?m)^allot +\d+ .* 40/40 `, `(?m)^direct binds +\d+ .* 40/40 `,
		`allot ÷ kube-scheduler: \d+\.\d\d× \(mean pods/s over 1 round\(s\), 5 nodes × 8 GPUs, 40 one-GPU pods, creation to binding`,
		`(?m)^direct binds ÷ kube-scheduler: \d+\.\d\d× \(the most a scheduler could show on this API server\)`,
		`(?m)^allot binds at \d+% of the bench's own binds as the pods arrive \(\d+ against \d+ pods/s\)`,
		`(?m)^MODE +CEILING PODS/S +ALLOT PODS/S +ALLOT ÷ CEILING `, `(?m)^stream +\d+ +\d+ +\d+% +\d+ +\d+% +\d+% +\d+%$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("output lacks %s:\n%s", re, out)
		}
	}
}

// TestBenchAgainstKubeSchedulerBacklog: the pods are made before either scheduler starts,
// both bind all of them, as do the bench's own binds (the API server's ceiling), and the
// ratio and each scheduler's part of the creation and bind rates are printed.
func TestBenchAgainstKubeSchedulerBacklog(t *testing.T) {
	runs, out := compareOnSmallClusters(t, Backlog)
	if len(runs) != 3 {
		t.Fatalf("runs %+v, want kube-scheduler, allot and direct binds", runs)
	}
	for _, re := range []string{`allot ÷ kube-scheduler: \d+\.\d\d× \(mean pods/s over 1 round\(s\), 5 nodes × 8 GPUs, 40 one-GPU pods, created first`,
		`(?m)^allot drains at \d+% of the API server's creation rate \(\d+ pods/s, mean of the runs\) and at \d+% of its bind rate`,
		`(?m)^kube-scheduler drains at \d+% of the API server's creation rate`, `(?m)^direct binds +\d+ .* 40/40 `,
		`(?m)^direct binds ÷ kube-scheduler: \d+\.\d\d×`,
		`(?m)^allot binds at \d+% of the bench's own binds from its first binding to its last \(\d+ against \d+ pods/s\)`,
		`(?m)^backlog +\d+ +\d+ +\d+% +\d+ +\d+% +\d+% +\d+%$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("output lacks %s:\n%s", re, out)
		}
	}
}
