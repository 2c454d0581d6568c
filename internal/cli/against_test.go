package cli

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestBenchAgainstKubeScheduler builds upstream kube-scheduler from the k8s.io/kubernetes
// module of go.mod and allot, as make bench-kube does, and runs the comparison on a small
// cluster: each scheduler on its own fresh API server binds every pod, and the table and
// the ratio are printed.
func TestBenchAgainstKubeScheduler(t *testing.T) {
	dir := t.TempDir()
	for pkg, out := range map[string]string{"k8s.io/kubernetes/cmd/kube-scheduler": "kube-scheduler", "github.com/allot-dev/allot/cmd/allot": "allot"} {
		if b, err := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	var out, progress bytes.Buffer
	runs, err := benchAgainst(context.Background(), &out, &progress, filepath.Join(dir, "allot"), filepath.Join(dir, "kube-scheduler"), 5, 40, 1)
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
