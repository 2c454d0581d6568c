package deploy_test

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"

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
		condition := func(webhooks []admissionregistrationv1.MatchCondition) string {
			for _, m := range webhooks {
				if m.Name == "scheduled-by-allot" {
					return norm(m.Expression)
				}
			}
			return ""
		}
		mut := as[admissionregistrationv1.MutatingWebhookConfiguration](t, objs["MutatingWebhookConfiguration/allot"])
		val := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs["ValidatingWebhookConfiguration/allot"])
		if got, want := condition(mut.Webhooks[0].MatchConditions), norm(c.peers.MutateSchedulerCondition()); got != want {
			t.Errorf("%s: the chart's mutating condition differs from the scheduler's:\nchart: %s\ngo:    %s", c.name, got, want)
		}
		if got, want := condition(val.Webhooks[0].MatchConditions), norm(c.peers.ValidateCondition()); got != want {
			t.Errorf("%s: the chart's validating condition differs from the scheduler's:\nchart: %s\ngo:    %s", c.name, got, want)
		}
		d := as[appsv1.Deployment](t, objs["Deployment/allot"])
		for _, want := range c.args {
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, want) {
				t.Errorf("%s: the scheduler's args %v lack %s", c.name, d.Spec.Template.Spec.Containers[0].Args, want)
			}
		}
	}
}
