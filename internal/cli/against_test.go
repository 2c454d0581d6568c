package cli

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

// TestBenchAgainstKubeScheduler builds upstream kube-scheduler from the k8s.io/kubernetes
// module of go.mod and allot, as make bench-kube does, and runs the comparison on a small
// cluster: each scheduler on its own fresh API server binds every pod, and the table and
// the ratio are printed.
func TestBenchAgainstKubeScheduler(t *testing.T) {
	dir := againstBinaries(t)
	var out, progress bytes.Buffer
	runs, err := benchAgainst(context.Background(), &out, &progress, filepath.Join(dir, "allot"), filepath.Join(dir, "kube-scheduler"), benchStream, 5, 40, 1)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(runs) != 2 || runs[0].Scheduler != "kube-scheduler" || runs[1].Scheduler != "allot" {
		t.Fatalf("runs %+v", runs)
	}
	for _, r := range runs {
		if r.Bound != 40 || r.PodsPerSecond <= 0 {
			t.Errorf("%s bound %d of 40 pods at %.0f pods/s", r.Scheduler, r.Bound, r.PodsPerSecond)
		}
	}
	if !regexp.MustCompile(`(?m)^kube-scheduler +\d+ .* 40/40 `).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^allot +\d+ .* 40/40 `).MatchString(out.String()) ||
		!regexp.MustCompile(`allot ÷ kube-scheduler: \d+\.\d\d× \(mean pods/s over 1 round\(s\), 5 nodes × 8 GPUs, 40 one-GPU pods`).MatchString(out.String()) {
		t.Fatalf("output:\n%s", out.String())
	}
}

// TestBenchAgainstKubeSchedulerBacklog: the pods are made before either scheduler starts,
// both bind all of them, as do the bench's own binds (the API server's ceiling), and the
// ratio and each scheduler's part of the creation and bind rates are printed.
func TestBenchAgainstKubeSchedulerBacklog(t *testing.T) {
	dir := againstBinaries(t)
	var out, progress bytes.Buffer
	runs, err := benchAgainst(context.Background(), &out, &progress, filepath.Join(dir, "allot"), filepath.Join(dir, "kube-scheduler"), benchBacklog, 5, 40, 1)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	for _, r := range runs {
		if r.Bound != 40 || r.PodsPerSecond <= 0 || r.Submitted <= 0 {
			t.Errorf("%s bound %d of 40 pods at %.0f pods/s", r.Scheduler, r.Bound, r.PodsPerSecond)
		}
	}
	for _, re := range []string{`allot ÷ kube-scheduler: \d+\.\d\d× \(mean pods/s over 1 round\(s\), 5 nodes × 8 GPUs, 40 one-GPU pods, created first`,
		`(?m)^allot drains at \d+% of the API server's creation rate \(\d+ pods/s, mean of the runs\) and at \d+% of its bind rate`,
		`(?m)^kube-scheduler drains at \d+% of the API server's creation rate`, `(?m)^direct binds +\d+ .* 40/40 `} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Fatalf("output lacks %s:\n%s", re, out.String())
		}
	}
}
