package sim

import (
	"strings"
	"testing"
)

const validHead = `cluster:
  nodes:
    - {name: n1, gpus: 8, gpuMemory: 40Gi}
queues:
  - {name: dept}
  - {name: team-a, parent: dept, quota: 4}
steps:
`

// TestInvalidScenarios: bad input gets an error naming the file, the line and the field,
// and the allowed values; nothing panics.
func TestInvalidScenarios(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown level", "topology:\n  levels: [{name: rack, nodeLabel: example.com/rack}]\n" + validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 1, topologyRequired: row}\n",
			[]string{"bad.yaml:11:", "steps[0].submit[0].topologyRequired", `unknown level "row"; levels: rack`}},
		{"level without topology", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 1, topologyPreferred: rack}\n",
			[]string{"steps[0].submit[0].topologyPreferred", `"rack" names a level, but the scenario has no topology`}},
		{"usage without history", strings.Replace(validHead, "quota: 4}", "quota: 4, usage: 10}", 1) + "  - advance: 1m\n",
			[]string{"queues[1].usage", "usage counts only with fairShareHistory set"}},
		{"negative strength", "fairShareHistory: {strength: -1}\n" + validHead + "  - advance: 1m\n",
			[]string{"fairShareHistory.strength", "-1 is not allowed: a number 0 or more"}},
		{"no strength", "fairShareHistory: {halfLife: 24h}\n" + validHead + "  - advance: 1m\n",
			[]string{"fairShareHistory.strength", "a number 0 or more is required"}},
		{"fraction above one", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 1.5}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0].gpu", "1.5 is not allowed", "fraction between 0 and 1"}},
		{"negative quota", strings.Replace(validHead, "quota: 4", "quota: -2", 1) + "  - advance: 1m\n",
			[]string{"bad.yaml:6:", "queues[1].quota", "-2 is not allowed", "0 or more"}},
		{"unknown queue", validHead + "  - submit:\n      - {name: j, queue: team-z, gpu: 1}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0].queue", `unknown queue "team-z"`, "team-a"}},
		{"parent queue", validHead + "  - submit:\n      - {name: j, queue: dept, gpu: 1}\n",
			[]string{"bad.yaml:9:", `queue "dept" has child queues`}},
		{"job bigger than any node", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 16}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0].gpu", "needs 16 GPUs", "largest node it may use has 8"}},
		{"gang bigger than the cluster", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 4, pods: 3}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0].pods", "needs 12 GPUs at once", "have 8"}},
		{"memory bigger than any GPU", validHead + "  - submit:\n      - {name: j, queue: team-a, gpuMemory: 80Gi}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0].gpuMemory", "80Gi is more than the largest GPU", "40Gi"}},
		{"fraction and memory", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 0.5, gpuMemory: 8Gi}\n",
			[]string{"steps[0].submit[0].gpuMemory", "set gpu or gpuMemory, not both"}},
		{"unknown class", validHead + "  - submit:\n      - {name: j, queue: team-a, class: batch}\n",
			[]string{"steps[0].submit[0].class", `unknown class "batch"`, "train, interactive, inference"}},
		{"unknown field", validHead + "  - submit:\n      - {name: j, queue: team-a, gpus: 1}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0]", `unknown field "gpus"`, "allowed fields:", "gpu,"}},
		{"claim without DRA nodes", validHead + "  - submit:\n      - {name: j, queue: team-a, claim: {deviceClass: gpu.nvidia.com}}\n",
			[]string{"bad.yaml:9:", "steps[0].submit[0].claim", "no node of the cluster is a DRA node (dra: true)"}},
		{"claim and gpu", strings.Replace(validHead, "gpuMemory: 40Gi}", "gpuMemory: 40Gi, dra: true}", 1) + "  - submit:\n      - {name: j, queue: team-a, gpu: 1, claim: {deviceClass: gpu.nvidia.com}}\n",
			[]string{"steps[0].submit[0].claim", "set claim, or gpu/gpuMemory, not both"}},
		{"unknown device class", strings.Replace(validHead, "gpuMemory: 40Gi}", "gpuMemory: 40Gi, dra: true}", 1) + "  - submit:\n      - {name: j, queue: team-a, claim: {deviceClass: tpu.example.com}}\n",
			[]string{"steps[0].submit[0].claim.deviceClass", `"tpu.example.com" is not allowed: gpu.nvidia.com or mig.nvidia.com`}},
		{"claim bigger than any node", strings.Replace(validHead, "gpuMemory: 40Gi}", "gpuMemory: 40Gi, dra: true}", 1) + "  - submit:\n      - {name: j, queue: team-a, claim: {deviceClass: gpu.nvidia.com, count: 9}}\n",
			[]string{"steps[0].submit[0].claim", "needs 9 GPUs", "largest node it may use has 8"}},
		{"MIG without DRA", strings.Replace(validHead, "gpuMemory: 40Gi}", "gpuMemory: 40Gi, migGPUs: 1}", 1) + "  - advance: 1m\n",
			[]string{"cluster.nodes[0].migGPUs", "migGPUs needs dra: true"}},
		{"minPods above pods", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 1, pods: 2, minPods: 3}\n",
			[]string{"steps[0].submit[0].minPods", "between 1 and pods (2)"}},
		{"maxPods below pods", validHead + "  - submit:\n      - {name: j, queue: team-a, gpu: 1, pods: 2, maxPods: 1}\n",
			[]string{"steps[0].submit[0].maxPods", "between pods (2) and"}},
		{"bad duration", validHead + "  - advance: soon\n",
			[]string{"bad.yaml:8:", "steps[0].advance", `"soon" is not a duration`}},
		{"delete unknown", validHead + "  - delete: [ghost]\n",
			[]string{"steps[0].delete[0]", `job "ghost" was not submitted`}},
		{"duplicate job", validHead + "  - submit:\n      - {name: j, queue: team-a}\n      - {name: j, queue: team-a}\n",
			[]string{"bad.yaml:10:", `job "j" already exists`}},
		{"parent cycle", "cluster:\n  nodes: [{name: n, gpus: 1}]\nqueues:\n  - {name: a, parent: b}\n  - {name: b, parent: a}\nsteps:\n  - advance: 1m\n",
			[]string{"queues[0].parent", "its own ancestor"}},
		{"bad quantity", "cluster:\n  nodes: [{name: n, gpus: 1, gpuMemory: lots}]\nqueues: [{name: a}]\nsteps: [{advance: 1m}]\n",
			[]string{"bad.yaml:2:", "cluster.nodes[0].gpuMemory", `"lots" is not a quantity`}},
		{"wrong type", validHead + "  - submit:\n      - {name: j, queue: team-a, pods: many}\n",
			[]string{"bad.yaml:", "line 9", "many"}},
		{"no pool on a pooled cluster", "cluster:\n  nodes: [{name: n, gpus: 1, labels: {allot.dev/node-pool: p1}}]\nqueues: [{name: a}]\nsteps:\n  - submit:\n      - {name: j, queue: a, gpu: 1}\n",
			[]string{"bad.yaml:6:", "steps[0].submit[0]", "jobs without a node pool run only on nodes without the allot.dev/node-pool label; pools here: p1", "set nodePool"}},
		{"unknown placement", "placement: pack\n" + validHead + "  - advance: 1m\n",
			[]string{"bad.yaml:1:", "placement", "binpack, spread"}},
		{"unknown status in expect", validHead + "  - submit:\n      - {name: j, queue: team-a}\n    expect:\n      jobs:\n        j: {status: Done}\n",
			[]string{"expect.jobs.j.status", "Running, Pending, Completed"}},
		{"empty", "", []string{"bad.yaml", "empty"}},
		{"not yaml", "cluster: [", []string{"bad.yaml"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestExpectationFailureIsReported: a scenario whose expectation does not hold fails,
// naming the step and what differed.
func TestExpectationFailureIsReported(t *testing.T) {
	sc, err := Parse("exp.yaml", []byte(validHead+"  - name: s1\n    submit:\n      - {name: j, queue: team-a, gpu: 1}\n    expect:\n      jobs:\n        j: {status: Pending}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reports, err := Run(sc)
	if err == nil || !strings.Contains(err.Error(), "step s1: job j: status Running, want Pending") {
		t.Fatalf("got %v", err)
	}
	if len(reports) != 1 || reports[0].Jobs["j"].Status != StatusRunning {
		t.Fatalf("reports %+v", reports)
	}
}

// TestEveryProblemListed: a file with several mistakes gets all of them in one answer, each
// with its line, not only the first.
func TestEveryProblemListed(t *testing.T) {
	yaml := strings.Replace(validHead, "quota: 4", "quota: -2", 1) +
		"  - submit:\n      - {name: a, queue: team-z, gpu: 1}\n      - {name: b, queue: team-a, gpu: 1.5}\n  - advance: soon\n  - delete: [ghost]\n"
	_, err := Parse("bad.yaml", []byte(yaml))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"5 problems:", "bad.yaml:6: queues[1].quota", "bad.yaml:9: steps[0].submit[0].queue",
		"bad.yaml:10: steps[0].submit[1].gpu", "bad.yaml:11: steps[1].advance", "steps[2].delete[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("lacks %q:\n%v", want, err)
		}
	}
}
