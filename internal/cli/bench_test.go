package cli

import (
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestBenchModes runs allot bench's three measurements on a small allot up: every pod binds
// (streamed, and from a closed queue once it opens, none before: bench fails otherwise),
// the creation-only run reports its rate, and no run leaves pods behind.
func TestBenchModes(t *testing.T) {
	up := startUp(t, "--nodes", "4", "--gpus-per-node", "8")
	for mode, want := range map[string]*regexp.Regexp{
		"stream":  regexp.MustCompile(`^30 of 30 pods bound in \S+: \d+ pods/s; creation to binding p50 \S+, p99 \S+`),
		"backlog": regexp.MustCompile(`^30 of 30 pods bound in \S+: \d+ pods/s; the queue opening to binding p50 \S+, p99 \S+`),
		"create":  regexp.MustCompile(`^30 pods created in \S+: \d+ pods/s \(no scheduler, no webhook`),
	} {
		out, err := runAllot(up.ctx, up.kubeconfig, "bench", "--pods", "30", "--mode", mode)
		line := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
		if err != nil || !want.MatchString(line) {
			t.Errorf("bench --mode %s: %v\n%s", mode, err, out)
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", up.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	left, err := kubernetes.NewForConfigOrDie(rc).CoreV1().Pods("default").List(up.ctx, metav1.ListOptions{LabelSelector: "allot.dev/bench"})
	if err != nil || len(left.Items) != 0 {
		t.Errorf("bench left %d pods behind (%v)", len(left.Items), err)
	}
	if _, err := runAllot(up.ctx, up.kubeconfig, "bench", "--mode", "fast"); err == nil || !strings.Contains(err.Error(), "stream, backlog or create") {
		t.Errorf("--mode fast: %v, want an error naming the modes", err)
	}
}

// TestBenchAgainstRefusesWhatMeasuresNothing checks that flags which cannot give a
// comparison are refused before any cluster starts, naming the flag and what is allowed.
func TestBenchAgainstRefusesWhatMeasuresNothing(t *testing.T) {
	for want, args := range map[string][]string{
		"--pods 1 is not allowed with --against: 2 or more":    {"--pods", "1"},
		"--mode create is not allowed with --against":          {"--mode", "create"},
		"--nodes 0 is not allowed: 1 to 5000":                  {"--nodes", "0"},
		"--rounds 0 is not allowed: 1 or more":                 {"--rounds", "0"},
		"--pods 81 is not allowed with --nodes 10: at most 80": {"--nodes", "10", "--pods", "81"},
	} {
		_, err := run(append([]string{"bench", "--against", "/nonexistent/kube-scheduler"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bench --against %v: %v, want an error with %q", args, err, want)
		}
	}
}

// TestBenchScenarioFlags: an unknown Scenario and sizes that cannot run are refused before
// any cluster starts, naming the flag and what is allowed.
func TestBenchScenarioFlags(t *testing.T) {
	for want, args := range map[string][]string{
		`--scenario "fast" is not allowed: one of fill, big-gang, reclaim-one, reclaim-all, reclaim-big, restart`: {"--scenario", "fast"},
		"--nodes 0 is not allowed with --scenario: 1 to 10000":                                                    {"--scenario", "fill", "--nodes", "0"},
		"--gpus-per-node 0 is not allowed: 1 to 64":                                                               {"--scenario", "fill", "--gpus-per-node", "0"},
		"--stop-after 1m0s is not allowed: 0 to 30s":                                                              {"--scenario", "reclaim-one", "--stop-after", "1m"},
	} {
		_, err := run(append([]string{"bench"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bench %v: %v, want an error with %q", args, err, want)
		}
	}
}
