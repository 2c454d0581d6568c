package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/scheduler"
)

// promtool is Prometheus's own rule checker and tester, pinned and built from the Go module
// proxy as helm is (a first build takes a few minutes; the build cache keeps it).
var promtoolCmd = []string{"run", "github.com/prometheus/prometheus/cmd/promtool@v0.316.0"}

// exported names every series Allot's scheduler and agents export, with its labels.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(scheduler.NewMetrics().Registry)
	reg.MustRegister(agent.NewMetrics().Collectors()...)
	descs := make(chan *prometheus.Desc)
	go func() { reg.Describe(descs); close(descs) }()
	name := regexp.MustCompile(`fqName: "([A-Za-z_:]+)".*variableLabels: \{([^}]*)\}`)
	out := map[string][]string{}
	for d := range descs {
		if m := name.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == ' ' })
		}
	}
	return out
}

// rules is the chart's PrometheusRule's groups, as a Prometheus rule file.
func rules(t *testing.T, objs map[string]deploy.Rendered) []byte {
	t.Helper()
	pr := objs["PrometheusRule/allot"]
	if pr == nil {
		t.Fatal("alerts.enabled renders no PrometheusRule/allot")
	}
	b, err := yaml.Marshal(pr["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHelmAlerts: every series the chart's alerts read is one Allot's scheduler or agents
// export, with the labels their messages name; and promtool, given series shaped as Allot
// exports them, fires each alert where docs/cluster.md#alerts says, and not before.
func TestHelmAlerts(t *testing.T) {
	if objs := deploy.Render(t); objs["PrometheusRule/allot"] != nil {
		t.Error("a PrometheusRule by default: the kind need not exist on the cluster")
	}
	objs := deploy.Render(t, "--set", "alerts.enabled=true", "--set", "alerts.labels.release=prometheus")
	if l, _ := objs["PrometheusRule/allot"]["metadata"].(map[string]any)["labels"].(map[string]any); l["release"] != "prometheus" {
		t.Errorf("the rule's labels %v lack alerts.labels", l)
	}
	file := rules(t, objs)
	var parsed struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(file, &parsed); err != nil {
		t.Fatal(err)
	}
	have := exported(t)
	series := regexp.MustCompile(`\b(allot_[a-z_]+|DCGM_[A-Z_]+)\b`)
	label := regexp.MustCompile(`\$labels\.([A-Za-z_]+)`)
	alerts := 0
	for _, g := range parsed.Groups {
		for _, r := range g.Rules {
			alerts++
			names := series.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("%s reads no series of Allot's: %s", r.Alert, r.Expr)
			}
			for _, n := range names {
				labels, ok := have[n]
				if !ok {
					t.Errorf("%s reads %s, which Allot does not export", r.Alert, n)
					continue
				}
				for _, text := range r.Annotations {
					for _, m := range label.FindAllStringSubmatch(text, -1) {
						if !strings.Contains(","+strings.Join(labels, ",")+",", ","+m[1]+",") {
							t.Errorf("%s's message names $labels.%s, which %s has not (%v)", r.Alert, m[1], n, labels)
						}
					}
				}
			}
		}
	}
	if alerts != 6 {
		t.Errorf("%d alerts, want the 6 of docs/cluster.md#alerts", alerts)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(alertTests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append(append([]string(nil), promtoolCmd...), "test", "rules", "tests.yaml")...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out.String())
	}
	t.Logf("promtool test rules:\n%s", out.String())
}

// alertTests are promtool's unit tests of the alerts, on series labelled as Allot's
// scheduler (queue) and agents (DCGM exporter's gpu, UUID, device, modelName, Hostname)
// export them. One sample a minute.
const alertTests = `
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  # team-c waits with 0 of its quota of 2 while team-a holds 10 against 4: starved after
  # 10 minutes. team-b waits too, but within its quota: not starved.
  - interval: 1m
    input_series:
      - {series: 'allot_queue_pending_gpus{queue="team-c"}', values: '2x20'}
      - {series: 'allot_queue_allocated_gpus{queue="team-c"}', values: '0x20'}
      - {series: 'allot_queue_quota_gpus{queue="team-c"}', values: '2x20'}
      - {series: 'allot_queue_pending_gpus{queue="team-b"}', values: '1x20'}
      - {series: 'allot_queue_allocated_gpus{queue="team-b"}', values: '2x20'}
      - {series: 'allot_queue_quota_gpus{queue="team-b"}', values: '2x20'}
      - {series: 'allot_queue_pending_gpus{queue="team-a"}', values: '0x20'}
      - {series: 'allot_queue_allocated_gpus{queue="team-a"}', values: '10x20'}
      - {series: 'allot_queue_quota_gpus{queue="team-a"}', values: '4x20'}
    alert_rule_test:
      - {eval_time: 9m, alertname: AllotQueueStarvedWhileLending, exp_alerts: []}
      - eval_time: 11m
        alertname: AllotQueueStarvedWhileLending
        exp_alerts:
          - exp_labels: {severity: warning, queue: team-c}
            exp_annotations:
              summary: "Queue team-c waits below its quota while other queues borrow GPUs"
              description: "Queue team-c has work waiting and holds less than its quota, and GPUs are lent beyond other queues' quotas: reclaim is not giving them back (allot describe on its waiting jobs says why)."
  # The same wait with nobody borrowing: the GPUs are all in use within quotas.
  - interval: 1m
    input_series:
      - {series: 'allot_queue_pending_gpus{queue="team-c"}', values: '2x20'}
      - {series: 'allot_queue_allocated_gpus{queue="team-c"}', values: '0x20'}
      - {series: 'allot_queue_quota_gpus{queue="team-c"}', values: '2x20'}
      - {series: 'allot_queue_allocated_gpus{queue="team-a"}', values: '4x20'}
      - {series: 'allot_queue_quota_gpus{queue="team-a"}', values: '4x20'}
    alert_rule_test:
      - {eval_time: 15m, alertname: AllotQueueStarvedWhileLending, exp_alerts: []}
  # A job of team-d waiting since before the scrape, and a reclaim for it that does not end.
  - interval: 1m
    input_series:
      - {series: 'allot_queue_oldest_pending_seconds{queue="team-d"}', values: '3000+60x20'}
      - {series: 'allot_queue_reclaim_waiting_seconds{queue="team-d"}', values: '0+60x20'}
    alert_rule_test:
      - {eval_time: 10m, alertname: AllotWorkWaitingLong, exp_alerts: []}
      - {eval_time: 10m, alertname: AllotReclaimNotFinished, exp_alerts: []}
      - eval_time: 11m
        alertname: AllotWorkWaitingLong
        exp_alerts:
          - exp_labels: {severity: info, queue: team-d}
            exp_annotations:
              summary: "Queue team-d's oldest job has waited 1h 1m 0s"
              description: "allot list -p team-d -A -o wide gives each waiting job's reason."
      - eval_time: 11m
        alertname: AllotReclaimNotFinished
        exp_alerts:
          - exp_labels: {severity: warning, queue: team-d}
            exp_annotations:
              summary: "A reclaim for queue team-d has not let its job start for 11m 0s"
              description: "GPUs were taken back from other queues for a job of team-d, and it still waits: pods that do not stop (a finalizer, a long grace period), or a node gone."
  # GPU 2 of dgx-1 reports XID 79 at minute 5 and its agent fails it; dgx-1's agent goes
  # quiet at minute 10 (the scheduler counts its node without a live agent).
  - interval: 1m
    input_series:
      - {series: 'DCGM_FI_DEV_XID_ERRORS{gpu="2",UUID="GPU-2",device="nvidia2",modelName="NVIDIA A100-SXM4-80GB",Hostname="dgx-1"}', values: '0x4 79x20'}
      - {series: 'allot_agent_gpu_healthy{gpu="2",UUID="GPU-2",device="nvidia2",modelName="NVIDIA A100-SXM4-80GB",Hostname="dgx-1"}', values: '1x4 0x20'}
      - {series: 'allot_gpu_nodes_without_agent', values: '0x9 1x20'}
    alert_rule_test:
      - {eval_time: 4m, alertname: AllotGPUXIDError, exp_alerts: []}
      - eval_time: 6m
        alertname: AllotGPUXIDError
        exp_alerts:
          - exp_labels: {severity: warning, gpu: "2", UUID: GPU-2, device: nvidia2, modelName: NVIDIA A100-SXM4-80GB, Hostname: dgx-1}
            exp_annotations:
              summary: "GPU 2 of node dgx-1 reported a new XID error"
              description: "A new XID error on GPU-2: the agent fails the device where NVIDIA says the GPU is at fault (allot_agent_gpu_healthy), and the pods on it are restarted as its pool's onGPUFailure says."
      - {eval_time: 16m, alertname: AllotGPUXIDError, exp_alerts: []}
      - {eval_time: 5m, alertname: AllotGPUUnhealthy, exp_alerts: []}
      - eval_time: 6m
        alertname: AllotGPUUnhealthy
        exp_alerts:
          - exp_labels: {severity: critical, gpu: "2", UUID: GPU-2, device: nvidia2, modelName: NVIDIA A100-SXM4-80GB, Hostname: dgx-1}
            exp_annotations:
              summary: "GPU 2 of node dgx-1 is failed"
              description: "The agent took GPU-2 out of service (an XID error, a double-bit ECC error, off the bus); allot top nodes shows it. Drain and service the GPU."
      - {eval_time: 14m, alertname: AllotAgentMissing, exp_alerts: []}
      - eval_time: 15m
        alertname: AllotAgentMissing
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: "1 GPU node(s) without a live allot agent"
              description: "Their GPUs are neither measured nor checked, and slices there are placed by index only; kubectl -n allot-system get leases -l allot.dev/agent-node lists the agents' heartbeats."
`
