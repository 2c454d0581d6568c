package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// dashboardArgs are the dashboard container's args as rendered.
func dashboardArgs(t *testing.T, objs map[string]rendered) []string {
	t.Helper()
	d := objs["Deployment/allot-dashboard"]
	if d == nil {
		t.Fatal("no dashboard Deployment")
	}
	c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

// TestHelmDashboardAuth: dashboard.auth.mode none renders the dashboard as before (no
// --auth, no review rights); token and proxy pass the mode and the proxy's header names and
// bind the dashboard's account to system:auth-delegator; proxy refuses to install unless
// the dashboard is fenced to the proxy (a NetworkPolicy from its pods) or told a secret
// only the proxy sends (mounted from a Secret, never in the args); a mode the dashboard
// does not know is refused.
func TestHelmDashboardAuth(t *testing.T) {
	objs := render(t, "--set", "dashboard.auth.mode=none")
	if args := dashboardArgs(t, objs); fmt.Sprint(args) != "[dashboard --address=:8090]" {
		t.Errorf("mode none: args %v", args)
	}
	if objs["ClusterRoleBinding/allot-dashboard-auth-delegator"] != nil {
		t.Error("mode none binds review rights")
	}
	// No pod reaches a dashboard that shows everything to whoever reaches it: only
	// kubectl port-forward, or the peers the admin names.
	if np := objs["NetworkPolicy/allot-dashboard"]; np == nil || fmt.Sprint(np["spec"].(map[string]any)["ingress"]) != "[]" {
		t.Errorf("mode none: NetworkPolicy %v, want one letting no pod in", np)
	}
	objs = render(t, "--set", "dashboard.auth.mode=none", "--set", "dashboard.auth.allowFrom[0].podSelector.matchLabels.app=ingress-nginx")
	if np := objs["NetworkPolicy/allot-dashboard"]; np == nil || !strings.Contains(fmt.Sprint(np["spec"]), "app:ingress-nginx") {
		t.Errorf("mode none with allowFrom: NetworkPolicy %v, want the ingress controller let in", np)
	}

	objs = render(t, "--set", "dashboard.auth.mode=token")
	if args := dashboardArgs(t, objs); fmt.Sprint(args) != "[dashboard --address=:8090 --auth=token]" {
		t.Errorf("mode token: args %v", args)
	}
	crb := objs["ClusterRoleBinding/allot-dashboard-auth-delegator"]
	if crb == nil || crb.str("roleRef", "name") != "system:auth-delegator" || crb.str("roleRef", "kind") != "ClusterRole" {
		t.Fatalf("mode token: review rights %v", crb)
	}
	sub := rendered(crb["subjects"].([]any)[0].(map[string]any))
	if len(crb["subjects"].([]any)) != 1 || sub.str("kind") != "ServiceAccount" || sub.str("name") != "allot-dashboard" || sub.str("namespace") != "allot-system" {
		t.Errorf("system:auth-delegator bound to %v, want the dashboard's ServiceAccount alone", crb["subjects"])
	}
	for _, r := range objs["ClusterRole/allot-dashboard"]["rules"].([]any) {
		if verbs := fmt.Sprint(r.(map[string]any)["verbs"]); verbs != "[get list watch]" {
			t.Errorf("mode token: the dashboard's own role grants %s", verbs)
		}
	}

	out, err := helm(t, "template", "allot", chart, "--set", "dashboard.auth.mode=proxy")
	if err == nil || !strings.Contains(out, "dashboard.auth.proxy.from") || !strings.Contains(out, "dashboard.auth.proxy.secretName") {
		t.Errorf("mode proxy with nothing fencing the dashboard: %v\n%s", err, out)
	}
	objs = render(t, "--set", "dashboard.auth.mode=proxy", "--set", "dashboard.auth.proxy.userHeader=X-Auth-Request-User",
		"--set", "dashboard.auth.proxy.groupsHeader=X-Auth-Request-Groups", "--set", "dashboard.auth.proxy.secretName=proxy-secret",
		"--set", "dashboard.auth.proxy.from[0].podSelector.matchLabels.app=oauth2-proxy")
	args := dashboardArgs(t, objs)
	for _, want := range []string{"--auth=proxy", "--proxy-user-header=X-Auth-Request-User", "--proxy-groups-header=X-Auth-Request-Groups",
		"--proxy-secret-file=/etc/allot-dashboard-proxy/secret", "--proxy-secret-header=X-Allot-Proxy-Secret"} {
		if !slices.Contains(args, want) {
			t.Errorf("mode proxy: args %v lack %s", args, want)
		}
	}
	pod := objs["Deployment/allot-dashboard"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if vols := fmt.Sprint(pod["volumes"]); !strings.Contains(vols, "secretName:proxy-secret") || !strings.Contains(vols, "key:secret") {
		t.Errorf("mode proxy: volumes %s, want the proxy's Secret", vols)
	}
	np := objs["NetworkPolicy/allot-dashboard"]
	if np == nil {
		t.Fatal("mode proxy with proxy.from: no NetworkPolicy")
	}
	spec := fmt.Sprint(np["spec"])
	if !strings.Contains(spec, "app:oauth2-proxy") || !strings.Contains(spec, "app.kubernetes.io/name:allot-dashboard") || !strings.Contains(spec, "policyTypes:[Ingress]") {
		t.Errorf("NetworkPolicy %s: want ingress to the dashboard from the proxy's pods only", spec)
	}
	if objs["ClusterRoleBinding/allot-dashboard-auth-delegator"] == nil {
		t.Error("mode proxy: no review rights")
	}
	// A secret alone will do, without a NetworkPolicy.
	objs = render(t, "--set", "dashboard.auth.mode=proxy", "--set", "dashboard.auth.proxy.secretName=proxy-secret")
	if objs["NetworkPolicy/allot-dashboard"] != nil {
		t.Error("a NetworkPolicy without proxy.from")
	}

	// Writes on without sign-in would be the dashboard's own account's, which may change
	// nothing; a value outside the three is refused by the schema.
	out, err = helm(t, "template", "allot", chart, "--set", "dashboard.auth.mode=none", "--set", "dashboard.writes=on")
	if err == nil || !strings.Contains(out, "dashboard.writes=on with dashboard.auth.mode=none") {
		t.Errorf("writes on without sign-in: %v\n%s", err, out)
	}
	out, err = helm(t, "template", "allot", chart, "--set", "dashboard.writes=yes")
	if err == nil || !strings.Contains(out, "'auto', 'on', 'off'") {
		t.Errorf("writes=yes: %v\n%s", err, out)
	}

	// The connect address: its flags, container port and Service port where a URL is
	// given, nothing of it otherwise; fenced to the ingress controller where the
	// dashboard is fenced; refused where the person opening a tool is nobody.
	if args := dashboardArgs(t, render(t, "--set", "dashboard.auth.mode=token")); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--connect") }) {
		t.Errorf("no connect.url: args %v", args)
	}
	objs = render(t, "--set", "dashboard.auth.mode=proxy", "--set", "dashboard.auth.proxy.from[0].podSelector.matchLabels.app=oauth2-proxy",
		"--set", "dashboard.connect.url=https://*.apps.example.com", "--set", "dashboard.connect.from[0].podSelector.matchLabels.app=ingress-nginx")
	if args := dashboardArgs(t, objs); !slices.Contains(args, "--connect-address=:8091") || !slices.Contains(args, "--connect-url=https://*.apps.example.com") {
		t.Errorf("connect.url: args %v", args)
	}
	if ports := fmt.Sprint(objs["Service/allot-dashboard"]["spec"].(map[string]any)["ports"]); !strings.Contains(ports, "name:connect port:8091 targetPort:connect") {
		t.Errorf("connect.url: Service ports %s", ports)
	}
	if spec := fmt.Sprint(objs["NetworkPolicy/allot-dashboard"]["spec"]); !strings.Contains(spec, "app:ingress-nginx]]]] ports:[map[port:connect") || !strings.Contains(spec, "app:oauth2-proxy]]]] ports:[map[port:http") {
		t.Errorf("connect.from: NetworkPolicy %s, want the proxy to http and the ingress controller to connect", spec)
	}
	for _, set := range [][]string{{"dashboard.auth.mode=none"}, {"dashboard.auth.mode=token", "dashboard.writes=off"}} {
		args := []string{"template", "allot", chart, "--set", "dashboard.connect.url=https://*.apps.example.com"}
		for _, v := range set {
			args = append(args, "--set", v)
		}
		if out, err := helm(t, args...); err == nil || !strings.Contains(out, "dashboard.connect.url opens workloads' tools as the person signed in") {
			t.Errorf("connect.url with %v: %v\n%s", set, err, out)
		}
	}
	if out, err := helm(t, "template", "allot", chart, "--set", "dashboard.auth.mode=token", "--set", "dashboard.connect.url=https://apps.example.com"); err == nil || !strings.Contains(out, "/dashboard/connect/url") {
		t.Errorf("connect.url without *.: %v\n%s", err, out)
	}

	out, err = helm(t, "template", "allot", chart, "--set", "dashboard.auth.mode=oidc")
	if err == nil || !strings.Contains(out, "mode") || !strings.Contains(out, "'none', 'token', 'proxy'") {
		t.Errorf("mode oidc: %v\n%s", err, out)
	}
}

// The chart's consumption.prices become the ConfigMap allot report and the Consumption page
// read (kube/consumption.Prices); without prices there is none.
func TestHelmPrices(t *testing.T) {
	if objs := render(t); objs["ConfigMap/allot-prices"] != nil {
		t.Error("a prices ConfigMap without prices")
	}
	objs := render(t, "--set", "consumption.prices.h100=4.5", "--set", "consumption.prices.NVIDIA-A100-SXM4-80GB=2")
	cm := objs["ConfigMap/allot-prices"]
	if cm == nil {
		t.Fatal("no ConfigMap/allot-prices")
	}
	if got := fmt.Sprint(cm["data"]); got != "map[NVIDIA-A100-SXM4-80GB:2 h100:4.5]" {
		t.Errorf("allot-prices data %s", got)
	}
}
