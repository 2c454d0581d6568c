package deploy_test

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/admission"
)

// The chart's defaults send other schedulers' GPU pods and system-class pods of tenants'
// namespaces to the webhooks, with the same conditions the scheduler registers itself
// (admission.Peers), and tell the scheduler the same rule: a hole in the chart's copy would
// be a hole on every cluster it installs. With the rule off, only the priority check stays.
func TestHelmForeignGPUPodRule(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   []string
		peers admission.Peers
		args  []string
	}{
		{"defaults", nil, admission.Peers{ForeignGPUPods: admission.ForeignAdopt, ForeignExempt: []string{"gpu-operator", "nvidia-gpu-operator"}},
			[]string{"--foreign-gpu-pods=adopt", "--foreign-gpu-pods-exempt=gpu-operator,nvidia-gpu-operator"}},
		{"off, one namespace exempt", []string{"--set", "webhook.foreignGPUPods=off", "--set", "webhook.foreignGPUPodsExempt={infra}"},
			admission.Peers{ForeignGPUPods: admission.ForeignOff, ForeignExempt: []string{"infra"}},
			[]string{"--foreign-gpu-pods=off", "--foreign-gpu-pods-exempt=infra"}},
		{"refuse, adopting KAI's pods", []string{"--set", "webhook.foreignGPUPods=refuse", "--set", "webhook.adoptSchedulerNames={kai-scheduler}"},
			admission.Peers{ForeignGPUPods: admission.ForeignRefuse, AdoptSchedulers: []string{"kai-scheduler"}, ForeignExempt: []string{"gpu-operator", "nvidia-gpu-operator"}},
			[]string{"--foreign-gpu-pods=refuse"}},
	} {
		objs := deploy.Render(t, c.set...)
		norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
		mut := as[admissionregistrationv1.MutatingWebhookConfiguration](t, objs["MutatingWebhookConfiguration/allot"])
		val := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs["ValidatingWebhookConfiguration/allot"])
		// The tenants' webhooks ignore their own failure (a pod of another scheduler must
		// not wait on Allot) and come last, the one taking GPU pods first (each pod mutated
		// once, then told which containers have no device).
		n := len(mut.Webhooks)
		for i, w := range []struct{ name, cond string }{{"tenants.mutate.allot.dev", c.peers.TenantMutateCondition()}, {"devices.mutate.allot.dev", c.peers.DevicesCondition()}} {
			got := mut.Webhooks[n-2+i]
			if got.Name != w.name || *got.FailurePolicy != admissionregistrationv1.Ignore || len(got.MatchConditions) != 1 {
				t.Fatalf("%s: mutating webhook %d of %d is %s (failure policy %v), want %s ignoring failures", c.name, n-1+i, n, got.Name, *got.FailurePolicy, w.name)
			}
			if got, want := norm(got.MatchConditions[0].Expression), norm(w.cond); got != want {
				t.Errorf("%s: the chart's %s condition differs from the scheduler's:\nchart: %s\ngo:    %s", c.name, w.name, got, want)
			}
		}
		i := slices.IndexFunc(val.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return w.Name == "tenants.validate.allot.dev" })
		if i < 0 || *val.Webhooks[i].FailurePolicy != admissionregistrationv1.Ignore {
			t.Fatalf("%s: no tenants.validate.allot.dev ignoring failures", c.name)
		}
		if got, want := norm(val.Webhooks[i].MatchConditions[0].Expression), norm(c.peers.TenantValidateCondition()); got != want {
			t.Errorf("%s: the chart's tenants' validating condition differs from the scheduler's:\nchart: %s\ngo:    %s", c.name, got, want)
		}
		d := as[appsv1.Deployment](t, objs["Deployment/allot"])
		for _, want := range c.args {
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, want) {
				t.Errorf("%s: the scheduler's args %v lack %s", c.name, d.Spec.Template.Spec.Containers[0].Args, want)
			}
		}
	}
}

// The chart's defaults are safe for a cluster of several teams: the dashboard asks each
// person to sign in and shows what their own identity may read, the metrics (every queue's
// figures) reach no pod the admin did not name, and other schedulers' GPU pods in tenants'
// namespaces are Allot's, and the default pool, which holds no slice to its share, takes
// none unless the admin says slices there are on trust.
func TestHelmDefaultsAreSafe(t *testing.T) {
	objs := deploy.Render(t)
	dash := as[appsv1.Deployment](t, objs["Deployment/allot-dashboard"])
	if args := dash.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--auth=token") {
		t.Errorf("the dashboard's args %v: want token sign-in by default", args)
	}
	if objs["ClusterRoleBinding/allot-dashboard-auth-delegator"] == nil {
		t.Error("token sign-in without the rights to review tokens")
	}
	np := as[networkingv1.NetworkPolicy](t, objs["NetworkPolicy/allot"])
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.String() == "metrics" {
				t.Errorf("the metrics port is open by default to %v", rule.From)
			}
		}
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "webhook" {
		t.Errorf("the scheduler's NetworkPolicy lets in %+v, want only the webhook port (for the API server)", np.Spec.Ingress)
	}
	d := as[appsv1.Deployment](t, objs["Deployment/allot"])
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--foreign-gpu-pods=adopt") {
		t.Errorf("the scheduler's args %v: want the scheduler-name rule on", d.Spec.Template.Spec.Containers[0].Args)
	}
	// The default pool enforces no sharing: it takes no slice unless its admin says so.
	agentArgs := func(objs map[string]deploy.Rendered) []string {
		return as[appsv1.DaemonSet](t, objs["DaemonSet/allot-agent-gpu"]).Spec.Template.Spec.Containers[0].Args
	}
	if args := agentArgs(objs); !slices.Contains(args, "--sharing=none") || slices.Contains(args, "--fractions-on-trust") {
		t.Errorf("the default pool's agent args %v: want sharing none and no slices on trust", args)
	}
	trusted := deploy.Render(t, "--set", "agent.pools[0].name=gpu", "--set", "agent.pools[0].sharing=none",
		"--set", "agent.pools[0].nodeSelector.a=b", "--set", "agent.pools[0].fractionsOnTrust=true")
	if args := agentArgs(trusted); !slices.Contains(args, "--fractions-on-trust") {
		t.Errorf("fractionsOnTrust: the agent's args %v lack --fractions-on-trust", args)
	}
	objs = deploy.Render(t, "--set", "metrics.allowFrom[0].namespaceSelector.matchLabels.team=monitoring")
	np = as[networkingv1.NetworkPolicy](t, objs["NetworkPolicy/allot"])
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[1].Ports[0].Port.String() != "metrics" || np.Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels["team"] != "monitoring" {
		t.Errorf("metrics.allowFrom: ingress %+v, want the monitoring namespace let in on the metrics port", np.Spec.Ingress)
	}
}
