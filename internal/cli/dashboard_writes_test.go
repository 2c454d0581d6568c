package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/browsertest"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/dashboard"
)

// fill sets the Submit page's fields by name, as typing would (an input event each).
func fill(t *testing.T, b *browsertest.Browser, fields map[string]string) {
	t.Helper()
	js, _ := json.Marshal(fields)
	browsertest.Eval[bool](t, b, fmt.Sprintf(`(() => {
		for (const [k, v] of Object.entries(%s)) {
			const e = document.querySelector("[name=" + k + "]");
			if (!e) throw new Error("no field " + k);
			e.value = v;
			e.dispatchEvent(new Event(e.tagName === "SELECT" ? "change" : "input", {bubbles: true}));
		}
		return true;
	})()`, js))
}

// click clicks the first element sel matches.
func click(t *testing.T, b *browsertest.Browser, sel string) {
	t.Helper()
	browsertest.Eval[bool](t, b, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error("nothing matches %s"); e.click(); return true; })()`, sel, sel))
}

// TestConsoleWritesAsThePerson runs `allot dashboard --auth=proxy` (writes as the person,
// by impersonation) and, in Chromium as alice of team-a: previews a submission (its Job,
// queue-a's room), submits it, sees it made as her (the webhook's created-by is alice),
// is refused submitting into team-b in the API server's words, suspends, resumes and
// deletes her workload on its page, and opens a notebook made from a workspace template
// through the console's connect address (openWorkspace). Then `--auth=token`: bob's own token submits into his
// namespace and is refused in alice's; and `--auth=none` stays read-only.
func TestConsoleWritesAsThePerson(t *testing.T) {
	b := browsertest.Start(t, 1280, 1000)
	c := startAuthCluster(t)
	url := c.dashboard(t, "--auth=proxy", "--proxy-user-header=X-Auth-Request-User", "--connect-address=127.0.0.1:0")
	connectURL := regexp.MustCompile(`connect: (http://\*\.localhost:\d+) `).FindStringSubmatch(c.out.String())
	if connectURL == nil {
		t.Fatalf("allot dashboard printed no connect address:\n%s", c.out.String())
	}
	// The preview's room reads the queue's status, which the scheduler writes at most
	// once a second: wait until the dashboard has queue-a's 3 GPUs.
	c.WaitFor(t, "queue-a's 3 GPUs in the dashboard's state", func() (bool, string) {
		req, _ := http.NewRequest("GET", url+"api/state", nil)
		req.Header.Set("X-Auth-Request-User", "admin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var st dashboard.State
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return false, err.Error()
		}
		for _, q := range st.Queues {
			if q.Name == "queue-a" {
				return q.Allocated == 3, fmt.Sprintf("queue-a: %v", q.Allocated)
			}
		}
		return false, "no queue-a"
	})

	headers(t, b, map[string]any{"X-Auth-Request-User": "alice"})
	b.Open(t, url+"#/submit")
	b.WaitText(t, "nav", "the Submit page offered", browsertest.Contains("Submit"))
	b.WaitText(t, ".submit", "the Submit form", browsertest.Contains("Submit a workload", "-g"))
	fill(t, b, map[string]string{"name": "alpha-new", "namespace": "team-a", "queue": "queue-a", "image": "busybox", "command": `sh -c "sleep 1000"`, "gpu": "1"})
	click(t, b, "button.preview")
	b.WaitText(t, ".outcome", "the preview", browsertest.Contains("kind: Job", "name: alpha-new", "- sleep 1000", "Queue queue-a", "3 of 4 GPUs held", "within the queue's quota"))
	b.Screenshot(t, "alice-preview")
	if n := c.Count(t, "team-a", func(*corev1.Pod) bool { return true }); n != 2 {
		t.Errorf("the preview made something: %d pods in team-a", n)
	}
	click(t, b, "button.send")
	b.WaitText(t, ".outcome .done", "the submission made", browsertest.Contains("train alpha-new submitted to queue queue-a in namespace team-a"))
	job, err := c.Client.BatchV1().Jobs("team-a").Get(c.Ctx, "alpha-new", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if by := job.Annotations[v1alpha1.AnnotationCreatedBy]; by != "alice" {
		t.Errorf("the Job was made as %q, want alice (the person, impersonated)", by)
	}

	// From a workspace template of her team's namespace, read as her (edit, with what the
	// chart's allot-view role aggregates into it).
	view := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "allot-view", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"allot.dev"}, Resources: []string{"workspacetemplates"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(c.Ctx, view, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tpl := &v1alpha1.WorkspaceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "notebook", Namespace: "team-a"}, Spec: v1alpha1.WorkspaceTemplateSpec{
		Description: "Jupyter on half a GPU, with the team's notebooks",
		Environment: v1alpha1.WorkspaceEnvironment{Image: "jupyter/base", Tool: v1alpha1.ToolJupyter},
		Compute:     v1alpha1.WorkspaceCompute{GPU: "0.5"},
		Data:        []v1alpha1.WorkspaceData{{Git: &v1alpha1.GitSource{Repository: "https://example.org/team-a/notebooks.git"}, MountPath: "/home/jovyan/work"}}}}
	if err := c.Allot.AllotV1alpha1().RESTClient().Post().Namespace("team-a").Resource("workspacetemplates").Body(tpl).Do(c.Ctx).Error(); err != nil {
		t.Fatal(err)
	}
	asAlice := rest.CopyConfig(c.Cluster.Config)
	asAlice.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}
	c.WaitFor(t, "the edit role aggregating workspace templates for alice", func() (bool, string) {
		var l v1alpha1.WorkspaceTemplateList
		err := allotclient.NewForConfigOrDie(asAlice).AllotV1alpha1().RESTClient().Get().Namespace("team-a").Resource("workspacetemplates").Do(c.Ctx).Into(&l)
		return err == nil && len(l.Items) == 1, fmt.Sprint(err)
	})
	b.Open(t, url+"#/workloads") // the Submit page anew: it lists the templates as it opens
	b.Open(t, url+"#/submit")
	b.WaitText(t, ".submit select[name=template]", "team-a's template offered to alice", browsertest.Contains("notebook — Jupyter on half a GPU"))
	fill(t, b, map[string]string{"name": "nb-tpl", "namespace": "team-a", "queue": "queue-a", "template": "notebook", "command": ""})
	click(t, b, "button.preview")
	b.WaitText(t, ".outcome", "the template's preview", browsertest.Contains("kind: StatefulSet", "image: jupyter/base", "containerPort: 8888", "allot.dev/template: notebook", "- https://example.org/team-a/notebooks.git"))
	click(t, b, "button.send")
	b.WaitText(t, ".outcome .done", "the notebook made from the template", browsertest.Contains("interactive nb-tpl submitted to queue queue-a"))
	if st, err := c.Client.AppsV1().StatefulSets("team-a").Get(c.Ctx, "nb-tpl", metav1.GetOptions{}); err != nil || st.Labels["allot.dev/template"] != "notebook" {
		t.Errorf("nb-tpl: %v", err)
	}
	openWorkspace(t, b, c, url, connectURL[1])

	// Into team-b, which alice may not change: the API server's words, not the console's.
	b.Open(t, url+"#/submit")
	b.WaitText(t, ".submit", "the Submit form again", browsertest.Contains("Submit a workload"))
	fill(t, b, map[string]string{"name": "sneak", "namespace": "team-b", "queue": "queue-b", "template": "", "image": "busybox", "gpu": "1"})
	click(t, b, "button.send")
	b.WaitText(t, ".outcome .refused", "alice refused in team-b", browsertest.Contains(`is forbidden: User "alice" cannot`, `in the namespace "team-b"`))
	b.Screenshot(t, "alice-refused")
	if _, err := c.Client.BatchV1().Jobs("team-b").Get(c.Ctx, "sneak", metav1.GetOptions{}); err == nil {
		t.Errorf("alice's Job was made in team-b")
	}

	// Suspend, resume and delete on the workload's page.
	b.Open(t, url+"#/workloads/team-a/alpha-new")
	b.WaitText(t, ".detail h1", "alpha-new running", browsertest.Contains("alpha-new", "Running"))
	click(t, b, ".actions button.suspend")
	b.WaitText(t, ".detail h1", "alpha-new suspended", browsertest.Contains("Suspended"))
	if job, err := c.Client.BatchV1().Jobs("team-a").Get(c.Ctx, "alpha-new", metav1.GetOptions{}); err != nil || job.Spec.Suspend == nil || !*job.Spec.Suspend {
		t.Errorf("the Job is not suspended: %v", err)
	}
	click(t, b, ".actions button.resume")
	b.WaitText(t, ".detail h1", "alpha-new running again", browsertest.Contains("Running"))
	click(t, b, ".actions button.delete")
	click(t, b, ".actions button.delete.armed")
	b.WaitText(t, ".actions", "alpha-new deleted", browsertest.Contains("deleted"))
	c.WaitFor(t, "alpha-new's Job gone", func() (bool, string) {
		_, err := c.Client.BatchV1().Jobs("team-a").Get(c.Ctx, "alpha-new", metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})

	// Queues are an admin's: alice's attempt is refused by RBAC; the admin creates one and
	// edits it, a bad value refused in allot queue's words.
	b.Open(t, url+"#/queues/new")
	b.WaitText(t, "form.queue-form", "the new-queue form", browsertest.Contains("--quota", "--namespaces"))
	fill(t, b, map[string]string{"name": "queue-c", "quota": "2"})
	click(t, b, "form.queue-form button.send")
	b.WaitText(t, "form.queue-form .refused", "alice refused a queue", browsertest.Contains(`queues.allot.dev is forbidden: User "alice" cannot create resource "queues"`))

	headers(t, b, map[string]any{"X-Auth-Request-User": "admin"})
	b.Open(t, url+"#/queues")
	b.WaitText(t, "main", "the admin offered a new queue", browsertest.Contains("New queue"))
	b.Open(t, url+"#/queues/new")
	b.WaitText(t, "form.queue-form", "the new-queue form", browsertest.Contains("--quota"))
	fill(t, b, map[string]string{"name": "queue-c", "quota": "two", "namespaces": "team-c, team-d"})
	click(t, b, "form.queue-form button.send")
	b.WaitText(t, "form.queue-form .refused", "a quota not a number", browsertest.Contains(`--quota "two" is not allowed: a whole number`))
	fill(t, b, map[string]string{"quota": "2", "limit": "3"})
	click(t, b, "form.queue-form button.send")
	b.WaitText(t, ".queue-page h1", "queue-c's page after creating it", browsertest.Contains("queue-c"))
	qc, err := c.Allot.AllotV1alpha1().Queues().Get(c.Ctx, "queue-c", metav1.GetOptions{})
	if err != nil || qc.Spec.GPU.Quota != 2 || qc.Spec.GPU.Limit == nil || *qc.Spec.GPU.Limit != 3 || strings.Join(qc.Spec.Namespaces, ",") != "team-c,team-d" {
		t.Fatalf("queue-c as made: %v %+v", err, qc.Spec)
	}
	browsertest.Eval[bool](t, b, `(document.querySelector("details.edit-queue").open = true, true)`)
	fill(t, b, map[string]string{"quota": "5"})
	click(t, b, "form.queue-form button.send")
	b.WaitText(t, "form.queue-form .refused", "a quota past the limit, refused by the API server", browsertest.Contains(`Queue.allot.dev "queue-c" is invalid`, "limit must be at least quota"))
	fill(t, b, map[string]string{"quota": "3"})
	click(t, b, "form.queue-form button.send")
	b.WaitText(t, "form.queue-form .done", "queue-c edited", browsertest.Contains("queue queue-c updated"))
	b.WaitText(t, ".queue-page .facts", "queue-c's new quota shown", browsertest.Contains("Quota\n3 GPUs"))
	if qc, err := c.Allot.AllotV1alpha1().Queues().Get(c.Ctx, "queue-c", metav1.GetOptions{}); err != nil || qc.Spec.GPU.Quota != 3 || qc.Spec.GPU.Limit == nil || *qc.Spec.GPU.Limit != 3 || len(qc.Spec.Namespaces) != 2 {
		t.Errorf("queue-c after the edit (quota 3, the limit and namespaces kept): %v %+v", err, qc.Spec)
	}
	b.Screenshot(t, "admin-queue-edit")

	// A change the console's pages did not send (no header of theirs) is refused.
	post := func(base, path, tok, body string, hdr bool) (int, string) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if hdr {
			req.Header.Set("X-Allot-Console", "1")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		} else {
			req.Header.Set("X-Auth-Request-User", "alice")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	form := func(name, ns, queue string) string {
		b, _ := json.Marshal(map[string]any{"name": name, "namespace": ns, "queue": queue, "image": "busybox", "gpu": "1"})
		return string(bytes.TrimSpace(b))
	}
	if code, body := post(url, "api/submit", "", form("forged", "team-a", "queue-a"), false); code != http.StatusForbidden {
		t.Errorf("a change without the console's header: %d %s", code, body)
	}

	// Token sign-in: bob's own token makes his submission, and is refused in team-a.
	tokURL := c.dashboard(t, "--auth=token")
	if code, body := post(tokURL, "api/submit", c.token(t, "bob"), form("bravo-new", "team-b", "queue-b"), true); code != http.StatusCreated {
		t.Errorf("bob's submission into team-b: %d %s", code, body)
	}
	if job, err := c.Client.BatchV1().Jobs("team-b").Get(c.Ctx, "bravo-new", metav1.GetOptions{}); err != nil || job.Annotations[v1alpha1.AnnotationCreatedBy] != "system:serviceaccount:people:bob" {
		t.Errorf("bob's Job: %v, made as %q", err, job.Annotations[v1alpha1.AnnotationCreatedBy])
	}
	if code, body := post(tokURL, "api/submit", c.token(t, "bob"), form("bravo-sneak", "team-a", "queue-a"), true); code != http.StatusUnprocessableEntity || !strings.Contains(body, `User \"system:serviceaccount:people:bob\" cannot`) {
		t.Errorf("bob's submission into team-a: %d %s", code, body)
	}

	// Without sign-in the console only reads, unless told otherwise.
	noneURL := c.dashboard(t)
	if code, body := post(noneURL, "api/submit", "", form("anon", "team-a", "queue-a"), true); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("--auth none: %d %s", code, body)
	}

	if os.Getenv("ALLOT_UPDATE_DOCS") != "" {
		for shot, doc := range map[string]string{"alice-open": "open", "alice-preview": "submit", "alice-refused": "submit-refused", "admin-queue-edit": "queue-edit"} {
			png, err := os.ReadFile(filepath.Join(b.Artifacts, shot+".png"))
			if err == nil {
				err = os.WriteFile(filepath.Join("..", "..", "docs", "dashboard-"+doc+".png"), png, 0o644)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
}
