package deploy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/internal/cli"
)

// TestChartArgsAreTheBinarysFlags: every argument the chart gives Allot's containers (the
// scheduler, the agent and its sidecars, the dashboard, with the optional parts on) is a
// flag its command has, with a value it parses: a flag renamed or a value of the wrong
// kind fails here rather than in a pod that crash-loops on a real cluster.
func TestChartArgsAreTheBinarysFlags(t *testing.T) {
	objs := deploy.Render(t, "--set", "customMetrics.enabled=true", "--set", "customMetrics.warmup=5m",
		"--set", "dashboard.auth.mode=token", "--set", "dashboard.connect.url=https://*.apps.example.com")
	var checked []string
	for key, o := range objs {
		if !strings.HasPrefix(key, "Deployment/") && !strings.HasPrefix(key, "DaemonSet/") {
			continue
		}
		spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		var containers []any
		for _, f := range []string{"initContainers", "containers"} {
			if cs, ok := spec[f].([]any); ok {
				containers = append(containers, cs...)
			}
		}
		for _, c := range containers {
			c := c.(map[string]any)
			image, _ := c["image"].(string)
			rawArgs, _ := c["args"].([]any)
			if !strings.Contains(image, "allot") || len(rawArgs) == 0 {
				continue
			}
			var args []string
			for _, a := range rawArgs {
				args = append(args, a.(string))
			}
			cmd, rest, err := cli.NewRoot().Find(args)
			if err != nil || cmd.Name() == "allot" {
				t.Errorf("%s container %s: %v is no command of allot (%v)", key, c["name"], args, err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s container %s: allot %s %v: %v", key, c["name"], cmd.Name(), rest, err)
			}
			if cmd.Name() == "scheduler" {
				if v, err := cmd.Flags().GetDuration("gpu-utilization-warmup"); err != nil || v.String() != "5m0s" {
					t.Errorf("customMetrics.warmup=5m reached the scheduler as %s (%v)", v, err)
				}
			}
			checked = append(checked, key+"/"+c["name"].(string))
		}
	}
	for _, want := range []string{"Deployment/allot/allot", "Deployment/allot-dashboard/dashboard", "DaemonSet/allot-agent-gpu/agent", "DaemonSet/allot-agent-gpu/nri"} {
		if !slices.Contains(checked, want) {
			t.Errorf("%s was not checked; checked %v", want, checked)
		}
	}
}
