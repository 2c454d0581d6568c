package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/consumption"
)

// history is what writeHistory records: two queues' workloads, team-a's on 2 GPUs
// measured 80% busy, team-b's on 1 GPU unmeasured, looked at at 23:00, 23:30 and (by a
// recorder started anew, as after a scheduler restart) 00:30 the next day.
var history = struct {
	uses  []consumption.Use
	looks []time.Time
}{
	uses: []consumption.Use{
		{Key: consumption.Key{Queue: "team-a", User: "ann", Pool: "default", Model: "A100"}, GPUs: 2, Started: historyAt(20, 0), Util: 80, Measured: true},
		{Key: consumption.Key{Queue: "team-b", User: "bob", Pool: "h100", Model: "H100"}, GPUs: 1, Started: historyAt(20, 0)},
	},
	looks: []time.Time{historyAt(23, 0), historyAt(23, 30), historyAt(24, 30)},
}

func historyAt(h, m int) time.Time { return time.Date(2026, 11, 2, h, m, 0, 0, time.UTC) }

// writeHistory records history into the cluster's ConfigMaps through the scheduler's own
// recorder, the last look by a new one: a restart loses none of what was counted.
func writeHistory(t *testing.T, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	r := &consumption.Recorder{Client: client}
	for i, when := range history.looks {
		if i == len(history.looks)-1 {
			r = &consumption.Recorder{Client: client} // the scheduler restarted
		}
		if err := r.Observe(ctx, when, history.uses); err != nil {
			t.Fatal(err)
		}
	}
}

// allot report against a history the test writes itself, as the scheduler's recorder writes
// it (writeHistory: three looks, the last across midnight and after a scheduler restart):
// the sums by queue, by user and pool with prices, a narrower range, and bad input refused
// with the flag named.
func TestReport(t *testing.T) {
	e := startEmpty(t)
	writeHistory(t, e.Ctx, e.Client)
	report := func(args ...string) string {
		return e.must(t, append([]string{"report", "--from", "2026-11-01", "--to", "2026-11-30"}, args...)...)
	}
	if out, want := report("-o", "csv"), "QUEUE,GPU-HOURS,MEASURED,USED,UTIL\nteam-a,3.00,3.00,2.40,80%\nteam-b,1.50,0.00,0.00,-\n"; out != want {
		t.Errorf("allot report -o csv:\n%s\nwant\n%s", out, want)
	}
	if out, want := report("--by", "user,pool", "--price", "h100=4,A100=2", "-o", "csv"), "USER,POOL,GPU-HOURS,MEASURED,USED,UTIL,COST\nann,default,3.00,3.00,2.40,80%,6.00\nbob,h100,1.50,0.00,0.00,-,6.00\n"; out != want {
		t.Errorf("allot report --by user,pool with prices:\n%s\nwant\n%s", out, want)
	}
	if out := e.must(t, "report", "--from", "2026-11-01", "--to", "2026-11-02"); !strings.Contains(out, "(UTC days; 1 with figures)") ||
		!regexpMatch(`(?m)^team-a\s+2\.00\s+2\.00\s+1\.60\s+80%$`, out) {
		t.Errorf("allot report up to the day before midnight:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--by", "team"}, `--by "team" is not allowed: one or more of day, queue, department, user, pool, model`},
		{[]string{"--price", "h100"}, `--price "h100" is not allowed: POOL_OR_MODEL=PRICE`},
		{[]string{"--price", "h100=4"}, "--price: no price for pool/model default/A100"},
		{[]string{"-o", "yaml"}, `-o "yaml" is not allowed: table, csv or json`},
	} {
		if _, err := e.run(t, append([]string{"report", "--from", "2026-11-01", "--to", "2026-11-30"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allot report %v: %v, want %q", c.args, err, c.want)
		}
	}
	// Day by day, in order: the second look crossed midnight.
	if out, want := report("--by", "day,queue", "-o", "csv"), "DAY,QUEUE,GPU-HOURS,MEASURED,USED,UTIL\n2026-11-02,team-a,2.00,2.00,1.60,80%\n2026-11-02,team-b,1.00,0.00,0.00,-\n2026-11-03,team-a,1.00,1.00,0.80,80%\n2026-11-03,team-b,0.50,0.00,0.00,-\n"; out != want {
		t.Errorf("allot report --by day,queue:\n%s\nwant\n%s", out, want)
	}
	// Departments: a queue's top-level ancestor, as the queue tree is now.
	e.must(t, "queue", "create", "research", "--quota", "0")
	e.must(t, "queue", "create", "team-a", "--quota", "0", "--parent", "research")
	if out, want := report("--by", "department,queue", "-o", "csv"), "DEPARTMENT,QUEUE,GPU-HOURS,MEASURED,USED,UTIL\nresearch,team-a,3.00,3.00,2.40,80%\nteam-b,team-b,1.50,0.00,0.00,-\n"; out != want {
		t.Errorf("allot report --by department,queue:\n%s\nwant\n%s", out, want)
	}
	// The chart's prices (consumption.prices, the ConfigMap allot-prices) when no --price.
	prices := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: consumption.PricesName, Namespace: v1alpha1.SystemNamespace},
		Data: map[string]string{"h100": "4", "A100": "2"}}
	if _, err := e.Client.CoreV1().ConfigMaps(v1alpha1.SystemNamespace).Create(e.Ctx, prices, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, want := report("--by", "queue", "-o", "csv"), "QUEUE,GPU-HOURS,MEASURED,USED,UTIL,COST\nteam-a,3.00,3.00,2.40,80%,6.00\nteam-b,1.50,0.00,0.00,-,6.00\n"; out != want {
		t.Errorf("allot report with the chart's prices:\n%s\nwant\n%s", out, want)
	}
	if _, err := e.run(t, "report", "--from", "2026-11-05", "--to", "2026-11-01"); err == nil || !strings.Contains(err.Error(), "--from 2026-11-05 is after --to 2026-11-01") {
		t.Errorf("a range backwards: %v", err)
	}
}
