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
