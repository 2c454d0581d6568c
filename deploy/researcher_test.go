package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/internal/cli"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// researcherKubeconfig writes a kubeconfig that acts as user in namespace ns: the cluster's
// address and CA, the admin's token only to impersonate (client-go's `as`), so that every
// request is authorised as the user alone.
func researcherKubeconfig(t *testing.T, e *kubetest.Env, user, ns string) string {
	t.Helper()
	admin := filepath.Join(e.Dir, "admin.kubeconfig")
	if err := e.Cluster.WriteKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = user, []string{"system:authenticated"}
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(e.Dir, user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientConfig is the client configuration of a kubeconfig.
func clientConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// allotAs runs one allot command with kubeconfig, as its user types it.
func allotAs(t *testing.T, e *kubetest.Env, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	at := len(args)
	for i, a := range args {
		if a == "--" {
			at = i
			break
		}
	}
	full := append(append(append([]string(nil), args[:at]...), "--kubeconfig", kubeconfig), args[at:]...)
	root.SetArgs(full)
	err := root.ExecuteContext(e.Ctx)
	return out.String(), err
}

// TestResearcherCLISession runs the README's CLI session as researchers hold a real
// cluster: Kubernetes' edit role in their team's namespace, and the read-only role the chart
// binds to every signed-in user, nothing more. Each command works, or says which right is
// missing and who grants it.
func TestResearcherCLISession(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 2, 8)
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALLOT_CONFIG", filepath.Join(e.Dir, "allot.yaml"))
	// As the demo: team-a borrows beyond its quota of 4 while c and d are idle.
	kubetest.Tenant(t, e.Ctx, e.Cluster.Config, "team-a", "ann")
	kubetest.Tenant(t, e.Ctx, e.Cluster.Config, "team-c", "alice")
	kubetest.Tenant(t, e.Ctx, e.Cluster.Config, "team-d", "dave")
	for q, quota := range map[string]int64{"team-a": 4, "team-c": 2, "team-d": 8} {
		e.Queue(t, q, quota, map[string]any{"namespaces": []string{q}})
	}
	for i := range 10 {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("team-a-train-%d", i), Namespace: "team-a", Queue: "team-a", GPUs: 1})
	}
	e.WaitFor(t, "team-a's 10 pods running", func() (bool, string) {
		n := e.Count(t, "team-a", kubetest.Bound)
		return n == 10, fmt.Sprint(n, " bound")
	})
	alice, dave := researcherKubeconfig(t, e, "alice", "team-c"), researcherKubeconfig(t, e, "dave", "team-d")
	as := func(kc string, args ...string) string {
		t.Helper()
		out, err := allotAs(t, e, kc, args...)
		if err != nil {
			t.Fatalf("allot %s (%s): %v\n%s", strings.Join(args, " "), filepath.Base(kc), err, out)
		}
		return out
	}
	refused := func(kc string, want []string, args ...string) {
		t.Helper()
		out, err := allotAs(t, e, kc, args...)
		if err == nil {
			t.Fatalf("allot %s (%s) was not refused:\n%s", strings.Join(args, " "), filepath.Base(kc), out)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("allot %s (%s): %v\nwant %q", strings.Join(args, " "), filepath.Base(kc), err, w)
			}
		}
	}

	// Without the chart's roles, edit alone: the command names the right and who grants it.
	refused(alice, []string{`User "alice" cannot list resource "queues" in API group "allot.dev" at the cluster scope`,
		"only a cluster admin grants", "researchers.groups"}, "queues")

	install(t, e, objs, "ClusterRole/allot-researcher", "ClusterRoleBinding/allot-researcher", "Role/allot-researcher", "RoleBinding/allot-researcher",
		"ClusterRole/allot-edit", "ClusterRole/allot-view")
	e.WaitFor(t, "allot queues as alice: team-a holding 10, the bars on the cluster's 16 GPUs", func() (bool, string) {
		out, err := allotAs(t, e, alice, "queues")
		return err == nil && strings.Contains(out, "(bar width: the cluster's 16 GPUs)") && regexp.MustCompile(`team-a\s+4\s.*\b10\b`).MatchString(out),
			fmt.Sprint(err, out)
	})
	if out := as(alice, "queue", "describe", "team-a"); !regexp.MustCompile(`(?m)^all pools\s+4\s+-\s+\(quota\)\s+\S+\s+10\s+10\s`).MatchString(out) ||
		!strings.Contains(out, "Namespaces:            team-a") {
		t.Errorf("allot queue describe team-a as alice: its quota of 4, 10 allocated of 10 requested, its namespace:\n%s", out)
	}
	// Workspace templates: the admins' offered to every researcher (the researcher role), a
	// team's own made by its member (edit) and read by the team (view).
	tpl := v1alpha1.WorkspaceTemplateSpec{Environment: v1alpha1.WorkspaceEnvironment{Image: "jupyter/base", Tool: v1alpha1.ToolJupyter}}
	admin := allotclient.NewForConfigOrDie(e.Cluster.Config).AllotV1alpha1().RESTClient()
	if err := admin.Post().Resource("clusterworkspacetemplates").Body(&v1alpha1.ClusterWorkspaceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "notebook"}, Spec: tpl}).Do(e.Ctx).Error(); err != nil {
		t.Fatal(err)
	}
	tpl.Environment.Image = "team-c/notebook"
	asAlice := allotclient.NewForConfigOrDie(clientConfig(t, alice)).AllotV1alpha1().RESTClient()
	if err := asAlice.Post().Namespace("team-c").Resource("workspacetemplates").Body(&v1alpha1.WorkspaceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: "team-c"}, Spec: tpl}).Do(e.Ctx).Error(); err != nil {
		t.Fatalf("alice making her team's template: %v", err)
	}
	for name, image := range map[string]string{"notebook": "jupyter/base", "ours": "team-c/notebook"} {
		if out := as(alice, "submit", "nb-"+name, "-p", "team-c", "--template", name, "--dry-run"); !strings.Contains(out, "image: "+image) || !strings.Contains(out, "containerPort: 8888") {
			t.Errorf("alice's dry run from template %s:\n%s", name, out)
		}
	}
	as(alice, "submit", "nb-alice", "-p", "team-c", "-i", "jupyter/base", "-g", "0.5", "--interactive")
	as(dave, "submit", "llm-pretrain", "-p", "team-d", "-i", "pytorch/pytorch", "-g", "4", "--workers", "2", "--", "torchrun", "train.py")
	running := func(kc, name string, pods int) {
		t.Helper()
		e.WaitFor(t, name+" running", func() (bool, string) {
			out := as(kc, "list", "-o", "json")
			var ws []inspect.Workload
			if err := json.Unmarshal([]byte(out), &ws); err != nil {
				return false, err.Error()
			}
			for _, w := range ws {
				if w.Name == name {
					return w.Status == "Running" && w.Running == pods, out
				}
			}
			return false, out
		})
	}
	running(alice, "nb-alice", 1)
	running(dave, "llm-pretrain", 2)
	if out := as(dave, "list", "-o", "wide"); !regexp.MustCompile(`llm-pretrain\s+Job\s+team-d\s+distributed\s+Running\s+8/8`).MatchString(out) ||
		strings.Contains(out, "nb-alice") || strings.Contains(out, "team-a-train") {
		t.Errorf("allot list -o wide as dave: his job running on 8 GPUs, and no other team's:\n%s", out)
	}
	if out := as(dave, "describe", "llm-pretrain"); !strings.Contains(out, "GPUs:       8 allocated of 8 requested") ||
		!strings.Contains(out, "only namespace team-d shown: you may not list Events in others") || !strings.Contains(out, "Created by: dave\n") || !strings.Contains(out, "Running:    for ") {
		t.Errorf("allot describe llm-pretrain as dave:\n%s", out)
	}
	// How busy its GPUs are, as the simulated nodes report it (95% for training), to the
	// researcher who may read the nodes but no other team's pods.
	e.WaitFor(t, "llm-pretrain's GPU use for dave", func() (bool, string) {
		out := as(dave, "describe", "llm-pretrain")
		return strings.Contains(out, "GPU use:    95% busy (mean of its 8 whole GPUs), GPU memory not reported"), out
	})
	if out := as(dave, "list", "-o", "wide"); !regexp.MustCompile(`llm-pretrain\s.*\s95%\s+dave\s`).MatchString(out) {
		t.Errorf("allot list -o wide as dave has no UTIL of llm-pretrain:\n%s", out)
	}
	if out := as(alice, "list", "-o", "wide"); !regexp.MustCompile(`nb-alice\s.*\salice\s+-\s`).MatchString(out) {
		t.Errorf("allot list -o wide as alice does not say she made nb-alice:\n%s", out)
	}
	// Nobody writes another name: the webhook writes the requester's over it at creation
	// (TestCreatorPolicyHoldsWithoutTheWebhook: the policy refuses it where the webhook did
	// not answer), and the policy refuses any change after.
	aliceClient := kubernetes.NewForConfigOrDie(clientConfig(t, alice))
	forged := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "forged", Annotations: map[string]string{v1alpha1.AnnotationCreatedBy: "dave"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}}
	if j, err := aliceClient.BatchV1().Jobs("team-c").Create(e.Ctx, forged, metav1.CreateOptions{}); err != nil || j.Annotations[v1alpha1.AnnotationCreatedBy] != "alice" {
		t.Errorf("alice's Job claiming dave made it: %v, created by %q", err, j.Annotations[v1alpha1.AnnotationCreatedBy])
	}
	sts := aliceClient.AppsV1().StatefulSets("team-c")
	patch := []byte(`{"metadata":{"annotations":{"allot.dev/created-by":"dave"}}}`)
	if _, err := sts.Patch(e.Ctx, "nb-alice", types.MergePatchType, patch, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "metadata.annotations[allot.dev/created-by]: fixed once the object exists") {
		t.Errorf("alice rewriting who made nb-alice: %v", err)
	}
	// An update that drops it (a server-side apply of her manifest) keeps it.
	if st, err := sts.Patch(e.Ctx, "nb-alice", types.MergePatchType, []byte(`{"metadata":{"annotations":{"allot.dev/created-by":null}}}`), metav1.PatchOptions{}); err != nil ||
		st.Annotations[v1alpha1.AnnotationCreatedBy] != "alice" {
		t.Errorf("an update dropping who made nb-alice: %v, %v", err, st.Annotations)
	}
	e.WaitFor(t, "allot top queues as alice", func() (bool, string) {
		out := as(alice, "top", "queues")
		return regexp.MustCompile(`team-d\s+8\s`).MatchString(out), out
	})
	as(dave, "suspend", "llm-pretrain")
	as(dave, "resume", "llm-pretrain")
	as(alice, "config", "queue", "team-c")

	// What stays out of a researcher's reach says so, in the API server's words.
	refused(alice, []string{`User "alice" cannot list resource "pods" in API group "" at the cluster scope`, "only a cluster admin grants"}, "top", "nodes")
	refused(alice, []string{`User "alice" cannot`, `in the namespace "team-d"`,
		"granted in namespace team-d by its admins"}, "submit", "nb-2", "-n", "team-d", "-p", "team-d", "-i", "jupyter/base", "-g", "0.5", "--interactive")
	refused(alice, []string{`User "alice" cannot list resource "pods" in API group "" in the namespace "team-d"`}, "delete", "llm-pretrain", "-n", "team-d")

	// Allot's PodGroups are in edit's rights, in the researcher's own namespace only.
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "sweep"}, "spec": map[string]any{"minMember": int64(2), "queue": "team-c"}}}
	pgs := dynamic.NewForConfigOrDie(clientConfig(t, alice)).Resource(kubetest.PodGroups)
	if _, err := pgs.Namespace("team-c").Create(e.Ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Errorf("alice's PodGroup in team-c: %v", err)
	}
	if _, err := pgs.Namespace("team-d").Create(e.Ctx, pg, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice's PodGroup in team-d: %v, want forbidden", err)
	}
	as(dave, "delete", "llm-pretrain")
}
