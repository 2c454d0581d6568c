package deploy

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/internal/helmtool"
)

const chart = "helm/allot"

// TestMain removes the helm built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	helmtool.Cleanup()
	os.Exit(code)
}

// helm runs the pinned helm (internal/helmtool) with args.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return helmtool.Run(t.TempDir(), args...)
}

func TestHelmLint(t *testing.T) {
	out, err := helm(t, "lint", chart, "--strict")
	if err != nil || !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
}

// rendered is one object of helm template's output.
type rendered map[string]any

func (r rendered) str(path ...string) string {
	var v any = map[string]any(r)
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func render(t *testing.T, args ...string) map[string]rendered {
	t.Helper()
	out, err := helm(t, append([]string{"template", "allot", chart, "--namespace", "allot-system"}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs := map[string]rendered{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var o rendered
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if len(o) == 0 {
			continue
		}
		key := o.str("kind") + "/" + o.str("metadata", "name")
		if ns := o.str("metadata", "namespace"); ns == "kube-system" {
			key = ns + "/" + key
		}
		objs[key] = o
	}
	return objs
}

// TestHelmTemplateRendersAnInstall: the rendered chart runs replicated scheduling with
// leader election and the chosen placement, serves webhooks behind a Service whose
// certificate the registered CA signs, and grants no wildcard permission.
func TestHelmTemplateRendersAnInstall(t *testing.T) {
	objs := render(t, "--set", "placement=spread", "--set", "replicas=3", "--set", "fairShareHistory.strength=0.5")
	for _, want := range []string{"Deployment/allot", "Service/allot-webhook", "Secret/allot-webhook-cert", "ServiceAccount/allot",
		"ClusterRole/allot", "ClusterRoleBinding/allot", "kube-system/Role/allot-leader-election",
		"MutatingWebhookConfiguration/allot", "ValidatingWebhookConfiguration/allot", "Service/allot-metrics",
		"Deployment/allot-dashboard", "Service/allot-dashboard", "ServiceAccount/allot-dashboard", "ClusterRole/allot-dashboard",
		"ClusterRoleBinding/allot-dashboard"} {
		if objs[want] == nil {
			t.Errorf("missing %s", want)
		}
	}
	d := objs["Deployment/allot"]
	spec := d["spec"].(map[string]any)
	if spec["replicas"] != float64(3) {
		t.Errorf("replicas %v, want 3", spec["replicas"])
	}
	container := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range container["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, want := range []string{"scheduler", "--leader-elect", "--placement=spread", "--webhook-port=9443", "--metrics-port=8080",
		"--usage-strength=0.5", "--usage-half-life=24h", "--accelerators=amd", "--accelerators=intel", "--accelerators=ascend",
		"--accelerators=cambricon", "--accelerators=hygon", "--accelerators=neuron"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}

	secret := objs["Secret/allot-webhook-cert"]
	crtPEM, _ := base64.StdEncoding.DecodeString(secret.str("data", "tls.crt"))
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatal("the webhook Secret holds no certificate")
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"MutatingWebhookConfiguration/allot", "ValidatingWebhookConfiguration/allot"} {
		for _, w := range objs[kind]["webhooks"].([]any) {
			hook := rendered(w.(map[string]any))
			if hook.str("clientConfig", "service", "name") != "allot-webhook" || hook.str("clientConfig", "service", "namespace") != "allot-system" {
				t.Errorf("%s %s calls %v", kind, hook.str("name"), hook["clientConfig"])
			}
			caPEM, _ := base64.StdEncoding.DecodeString(hook.str("clientConfig", "caBundle"))
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caPEM) {
				t.Fatalf("%s %s: no CA bundle", kind, hook.str("name"))
			}
			if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, DNSName: "allot-webhook.allot-system.svc"}); err != nil {
				t.Errorf("%s %s: the API server would not trust the webhook: %v", kind, hook.str("name"), err)
			}
			// Every webhook on pods or Jobs sees only what Allot schedules; the one on
			// Queues sees Allot's own resource.
			onQueues := strings.Contains(string(mustJSON(t, hook["rules"])), "queues")
			if !onQueues && !strings.Contains(string(mustJSON(t, hook["matchConditions"])), "allot") {
				t.Errorf("%s %s is sent pods other schedulers own", kind, hook.str("name"))
			}
		}
	}

	var bindsPods bool
	for _, r := range objs["ClusterRole/allot"]["rules"].([]any) {
		rule := r.(map[string]any)
		for _, field := range []string{"apiGroups", "resources", "verbs", "nonResourceURLs"} {
			values, _ := rule[field].([]any) // a rule has resources or nonResourceURLs
			for _, v := range values {
				if v == "*" {
					t.Errorf("ClusterRole grants %s *", field)
				}
			}
		}
		if res, _ := rule["resources"].([]any); slices.Contains(res, any("pods/binding")) && slices.Contains(rule["verbs"].([]any), any("create")) {
			bindsPods = true
		}
	}
	if !bindsPods {
		t.Error("ClusterRole cannot bind pods")
	}
}

// TestHelmDashboard: the dashboard runs as its own read-only account behind a ClusterIP
// Service, listens on every interface inside its pod, and goes away when turned off.
// TestDashboardRoleIsEnoughAndReadOnly runs it with that role on a real API server.
func TestHelmDashboard(t *testing.T) {
	objs := render(t, "--set", "dashboard.port=9000")
	svc := objs["Service/allot-dashboard"]
	if svc.str("spec", "type") != "ClusterIP" {
		t.Errorf("dashboard Service type %q, want ClusterIP (reached by port-forward)", svc.str("spec", "type"))
	}
	pod := objs["Deployment/allot-dashboard"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if pod["serviceAccountName"] != "allot-dashboard" {
		t.Errorf("the dashboard runs as %v", pod["serviceAccountName"])
	}
	args := fmt.Sprint(pod["containers"].([]any)[0].(map[string]any)["args"])
	if args != "[dashboard --address=:9000 --auth=token]" {
		t.Errorf("dashboard args %s", args)
	}
	for _, r := range objs["ClusterRole/allot-dashboard"]["rules"].([]any) {
		rule := r.(map[string]any)
		if verbs := fmt.Sprint(rule["verbs"]); verbs != "[get list watch]" {
			t.Errorf("dashboard role grants %s on %v", verbs, rule["resources"])
		}
		if slices.Contains(rule["resources"].([]any), any("secrets")) {
			t.Error("dashboard role reads Secrets")
		}
	}
	for key := range render(t, "--set", "dashboard.enabled=false") {
		if strings.Contains(key, "dashboard") {
			t.Errorf("dashboard.enabled=false still renders %s", key)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHelmValuesAreChecked: a placement the scheduler does not know is refused at install,
// naming the allowed values.
func TestHelmValuesAreChecked(t *testing.T) {
	out, err := helm(t, "template", "allot", chart, "--set", "placement=tetris")
	if err == nil || !strings.Contains(out, "placement") || !strings.Contains(out, "'allot', 'binpack', 'spread'") {
		t.Fatalf("placement=tetris: %v\n%s", err, out)
	}
	for _, bad := range []string{"fairShareHistory.strength=-1", "fairShareHistory.halfLife=a week"} {
		out, err := helm(t, "template", "allot", chart, "--set", bad)
		if field, _, _ := strings.Cut(bad, "="); err == nil || !strings.Contains(out, strings.TrimPrefix(field, "fairShareHistory.")) {
			t.Errorf("%s: %v\n%s", bad, err, out)
		}
	}
}

// TestHelmAccelerators: the chart's accelerators are the scheduler's --accelerators, one
// flag each (a kind's definition holds commas and semicolons), --accelerators=none when
// empty; a value that is no kind's name or definition is refused at install.
func TestHelmAccelerators(t *testing.T) {
	args := func(set ...string) []string {
		d := render(t, set...)["Deployment/allot"]
		c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		var out []string
		for _, a := range c["args"].([]any) {
			if strings.HasPrefix(a.(string), "--accelerators") {
				out = append(out, a.(string))
			}
		}
		return out
	}
	def := "tpu=google.com/tpu;model-label=cloud.google.com/gke-tpu-accelerator"
	if got := args("--set-json", `accelerators=["ascend","`+def+`"]`); !slices.Equal(got, []string{"--accelerators=ascend", "--accelerators=" + def}) {
		t.Errorf("ascend and tpu: %v", got)
	}
	if got := args("--set-json", "accelerators=[]"); !slices.Equal(got, []string{"--accelerators=none"}) {
		t.Errorf("none: %v", got)
	}
	if out, err := helm(t, "template", "allot", chart, "--set-json", `accelerators=["Ascend 910"]`); err == nil || !strings.Contains(out, "accelerators") {
		t.Errorf(`"Ascend 910" installed: %v\n%s`, err, out)
	}
}

// TestChartCRDsMatchGenerated: the chart installs the CRDs make generate writes.
func TestChartCRDsMatchGenerated(t *testing.T) {
	files, err := filepath.Glob("crds/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(chart, "crds", filepath.Base(f)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the chart differs from %s: run make generate", filepath.Base(f), f)
		}
	}
}

// TestHelmAgent: one agent DaemonSet per pool of GPU nodes, declaring its pool's sharing,
// with the kubelet's PodResources socket and the sharing root mounted; the webhook mounts
// the root into sharing pods only where some pool enforces sharing; a sharing mode the
// agent does not know is refused at install.
func TestHelmAgent(t *testing.T) {
	objs := render(t, "--set", "agent.pools[0].name=a100", "--set", "agent.pools[0].nodeSelector.pool=a100", "--set", "agent.pools[0].sharing=mps",
		"--set", "agent.pools[1].name=l4", "--set", "agent.pools[1].nodeSelector.pool=l4", "--set", "agent.pools[1].sharing=hami-core")
	for pool, sharing := range map[string]string{"a100": "mps", "l4": "hami-core"} {
		ds := objs["DaemonSet/allot-agent-"+pool]
		if ds == nil {
			t.Fatalf("no agent DaemonSet for pool %s", pool)
		}
		pod := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		if fmt.Sprint(pod["nodeSelector"]) != "map[pool:"+pool+"]" || pod["serviceAccountName"] != "allot-agent" {
			t.Errorf("pool %s: nodeSelector %v, account %v", pool, pod["nodeSelector"], pod["serviceAccountName"])
		}
		c := pod["containers"].([]any)[0].(map[string]any)
		args := fmt.Sprint(c["args"])
		if !strings.Contains(args, "--sharing="+sharing) || !strings.Contains(args, "--sharing-root=/run/allot/sharing") {
			t.Errorf("pool %s: args %s", pool, args)
		}
		if (sharing == "hami-core") != strings.Contains(args, "--hami-core-library=/host-hami-core/libvgpu.so") {
			t.Errorf("pool %s: args %s", pool, args)
		}
		vols := fmt.Sprint(pod["volumes"])
		if !strings.Contains(vols, "/var/lib/kubelet/pod-resources") || !strings.Contains(vols, "/run/allot/sharing") {
			t.Errorf("pool %s: volumes %s", pool, vols)
		}
	}
	schedArgs := func(objs map[string]rendered) string {
		pod := objs["Deployment/allot"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		return fmt.Sprint(pod["containers"].([]any)[0].(map[string]any)["args"])
	}
	if !strings.Contains(schedArgs(objs), "--sharing-root=/run/allot/sharing") {
		t.Errorf("scheduler args %s: pools enforce sharing, the webhook must mount the root", schedArgs(objs))
	}
	if args := schedArgs(render(t)); strings.Contains(args, "--sharing-root") {
		t.Errorf("scheduler args %s: the default pool shares without enforcement, no hostPath is needed", args)
	}
	out, err := helm(t, "template", "allot", chart, "--set", "agent.pools[0].sharing=mig")
	if err == nil || !strings.Contains(out, "sharing") || !strings.Contains(out, "'mps', 'hami-core', 'none'") {
		t.Errorf("sharing=mig: %v\n%s", err, out)
	}
}

// TestHelmAgentReadsTheHostsProc: the agent tells whose each GPU process is from the
// process's cgroup in the host's /proc (NVML names host PIDs): the host's /proc is mounted
// read-only where --proc-root points, in the agent's container only, and the pod stays
// out of the host's PID namespace.
func TestHelmAgentReadsTheHostsProc(t *testing.T) {
	objs := render(t, "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true",
		"--set", "agent.pools[0].sharing=mps")
	ds := objs["DaemonSet/allot-agent-gpu"]
	if ds == nil {
		t.Fatal("no agent DaemonSet")
	}
	pod := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if pod["hostPID"] == true {
		t.Error("the agent's pod is in the host's PID namespace: it needs only to read /proc")
	}
	var procVolume string
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if hp, ok := v["hostPath"].(map[string]any); ok && hp["path"] == "/proc" {
			procVolume = v["name"].(string)
		}
	}
	if procVolume == "" {
		t.Fatalf("no hostPath volume of /proc among %v", pod["volumes"])
	}
	for i, c := range pod["containers"].([]any) {
		c := c.(map[string]any)
		var at string
		for _, m := range c["volumeMounts"].([]any) {
			m := m.(map[string]any)
			if m["name"] == procVolume {
				if m["readOnly"] != true {
					t.Errorf("container %s mounts the host's /proc writable", c["name"])
				}
				at = m["mountPath"].(string)
			}
		}
		if args := c["args"].([]any); i == 0 && (at == "" || !slices.Contains(args, any("--proc-root="+at))) {
			t.Errorf("the agent mounts the host's /proc at %q, and its args %v do not point --proc-root there", at, args)
		}
		if i > 0 && at != "" {
			t.Errorf("container %s mounts the host's /proc, which only the agent reads", c["name"])
		}
	}
}

// A pool of dynamic MIG nodes gives its agent what the driver asks of whoever makes MIG
// instances (SYS_ADMIN and the MIG configuration capability); every other pool's agent
// keeps no capability at all.
func TestHelmDynamicMIGPoolOnly(t *testing.T) {
	objs := render(t, "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true",
		"--set", "agent.pools[0].sharing=none", "--set", "agent.pools[1].sharing=none",
		"--set", "agent.pools[1].name=mig", "--set-string", "agent.pools[1].nodeSelector.allot\\.dev/mig-dynamic=true",
		"--set", "agent.pools[1].dynamicMIG=true")
	agentOf := func(pool string) map[string]any {
		ds := objs["DaemonSet/allot-agent-"+pool]
		if ds == nil {
			t.Fatalf("no agent DaemonSet for pool %s", pool)
		}
		pod := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		return pod["containers"].([]any)[0].(map[string]any)
	}
	caps := func(c map[string]any) string {
		return fmt.Sprint(c["securityContext"].(map[string]any)["capabilities"])
	}
	env := func(c map[string]any) string { return fmt.Sprint(c["env"]) }
	if c := agentOf("gpu"); strings.Contains(caps(c), "SYS_ADMIN") || strings.Contains(env(c), "NVIDIA_MIG_CONFIG_DEVICES") {
		t.Errorf("an ordinary pool's agent may make MIG instances: %s %s", caps(c), env(c))
	}
	if c := agentOf("mig"); !strings.Contains(caps(c), "SYS_ADMIN") || !strings.Contains(env(c), "NVIDIA_MIG_CONFIG_DEVICES") {
		t.Errorf("the dynamic MIG pool's agent cannot make MIG instances: %s %s", caps(c), env(c))
	}
	// With SYS_ADMIN a read-only mount is no bound: the host's /proc stays out of that pool.
	if c := agentOf("mig"); strings.Contains(fmt.Sprint(c["volumeMounts"]), "/host/proc") || strings.Contains(fmt.Sprint(c["args"]), "--proc-root") {
		t.Errorf("the dynamic MIG pool's agent, with SYS_ADMIN, mounts the host's /proc: %v %v", c["volumeMounts"], c["args"])
	}
}

// TestHelmResearcherRole: the role every researcher is bound to reads and never writes, and
// reads nothing of any namespace (pods, events, Secrets); it is bound to the groups named
// in researchers.groups, and to none when the list is empty. TestResearcherCLISession runs
// the CLI under it.
func TestHelmResearcherRole(t *testing.T) {
	objs := render(t, "--set", "researchers.groups={ml-researchers,interns}")
	role := objs["ClusterRole/allot-researcher"]
	if role == nil {
		t.Fatal("no ClusterRole/allot-researcher")
	}
	b, _ := role["rules"].([]any)
	for _, r := range b {
		rule := r.(map[string]any)
		for _, v := range rule["verbs"].([]any) {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("the researcher role may %s %v", v, rule["resources"])
			}
		}
		for _, res := range rule["resources"].([]any) {
			if res == "pods" || res == "events" || res == "secrets" || res == "configmaps" || res == "*" {
				t.Errorf("the researcher role reads %s at the cluster scope", res)
			}
		}
	}
	binding := objs["ClusterRoleBinding/allot-researcher"]
	if binding == nil {
		t.Fatal("no ClusterRoleBinding/allot-researcher")
	}
	var groups []string
	for _, s := range binding["subjects"].([]any) {
		groups = append(groups, s.(map[string]any)["name"].(string))
	}
	if fmt.Sprint(groups) != "[ml-researchers interns]" {
		t.Errorf("bound to %v, want the groups of researchers.groups", groups)
	}
	if def := render(t)["ClusterRoleBinding/allot-researcher"]; def == nil || fmt.Sprint(def["subjects"]) != "[map[apiGroup:rbac.authorization.k8s.io kind:Group name:system:authenticated]]" {
		t.Errorf("by default bound to %v, want every signed-in user", def)
	}
	leases := objs["Role/allot-researcher"]
	if leases == nil || fmt.Sprint(leases["rules"]) != "[map[apiGroups:[coordination.k8s.io] resources:[leases] verbs:[get list watch]]]" ||
		leases.str("metadata", "namespace") != "allot-system" || objs["RoleBinding/allot-researcher"] == nil {
		t.Errorf("the researcher's Role in the release's namespace: %v", leases)
	}
	none := render(t, "--set", "researchers.groups=null")
	if _, ok := none["ClusterRoleBinding/allot-researcher"]; ok {
		t.Error("researchers.groups empty still binds the researcher role")
	}
	if _, ok := none["RoleBinding/allot-researcher"]; ok {
		t.Error("researchers.groups empty still binds the researcher's Role")
	}
	if none["ClusterRole/allot-edit"] == nil || none["ClusterRole/allot-view"] == nil {
		t.Error("Allot's kinds are not aggregated into edit and view")
	}
}
