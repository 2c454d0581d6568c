package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/submit"
)

// The NetApp report's session: a queue that allows the node's paths under /data only, a
// notebook with a working directory, the submitter's uid, a large /dev/shm, an NFS export
// and a node path, running with exactly those; a node path outside /data refused at submit
// in the webhook's words; and a shell asked of a simulated node told why there is none.
func TestSubmitWorkspaceFlags(t *testing.T) {
	e := startCLI(t)
	e.must(t, "queue", "create", "research", "--quota", "2", "--host-paths", "/data")
	e.must(t, "submit", "nb", "-p", "research", "-i", "jupyter/base", "-g", "1", "--interactive", "--working-dir", "/workspace", "--run-as-user",
		"--large-shm", "--nfs", "nfs.lab:/exports/imagenet:/datasets/imagenet:ro", "-v", "/data/alice:/scratch")
	e.workload(t, "nb", running(1))
	pods, err := e.Client.CoreV1().Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: submit.LabelWorkload + "=nb"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("nb's pod: %v %d", err, len(pods.Items))
	}
	p := pods.Items[0]
	c := p.Spec.Containers[0]
	if c.WorkingDir != "/workspace" || c.SecurityContext == nil || *c.SecurityContext.RunAsUser != int64(os.Getuid()) || *c.SecurityContext.RunAsGroup != int64(os.Getgid()) {
		t.Errorf("nb's container: working dir %q, security context %+v", c.WorkingDir, c.SecurityContext)
	}
	got := map[string]string{}
	vols := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		switch {
		case v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory:
			got[m.MountPath] = "memory"
		case v.NFS != nil:
			got[m.MountPath] = v.NFS.Server + ":" + v.NFS.Path
		case v.HostPath != nil:
			got[m.MountPath] = v.HostPath.Path
		}
		if m.ReadOnly {
			got[m.MountPath] += " ro"
		}
	}
	for path, want := range map[string]string{"/dev/shm": "memory", "/datasets/imagenet": "nfs.lab:/exports/imagenet ro", "/scratch": "/data/alice"} {
		if got[path] != want {
			t.Errorf("nb's %s: %q, want %q (all: %v)", path, got[path], want, got)
		}
	}

	if _, err := e.run(t, "submit", "etc", "-p", "research", "-i", "busybox", "-v", "/etc:/host-etc"); err == nil ||
		!strings.Contains(err.Error(), `hostPath "/etc" is not allowed: queue research allows paths of the node under /data only (spec.hostPaths)`) {
		t.Errorf("a node path outside the queue's: %v", err)
	}
	if out, _ := e.run(t, "list"); strings.Contains(out, "etc") {
		t.Errorf("the refused workload was made:\n%s", out)
	}
	e.must(t, "queue", "edit", "research", "--host-paths", "none")
	if _, err := e.run(t, "submit", "data", "-p", "research", "-i", "busybox", "-v", "/data/x:/x"); err == nil ||
		!strings.Contains(err.Error(), "queue research allows no path of the node") {
		t.Errorf("a node path in a queue that allows none: %v", err)
	}
	e.must(t, "queue", "edit", "research", "--host-paths", "any")
	e.must(t, "submit", "data", "-p", "research", "-i", "busybox", "-v", "/data/x:/x")
	if _, err := e.run(t, "queue", "edit", "research", "--host-paths", "data"); err == nil || !strings.Contains(err.Error(), `--host-paths "data" is not allowed: absolute directories of the node`) {
		t.Errorf("--host-paths data: %v", err)
	}

	if _, err := e.run(t, "bash", "nb"); err == nil || !strings.Contains(err.Error(), "a simulated node of allot up, and simulated nodes run no containers") {
		t.Errorf("allot bash on a simulated node: %v", err)
	}

	// Workspace templates: an admin's ClusterWorkspaceTemplate offered to every namespace,
	// and a team's WorkspaceTemplate of the same name that stands before it in its own.
	jupyter := v1alpha1.WorkspaceTemplateSpec{Description: "a notebook on half a GPU",
		Environment: v1alpha1.WorkspaceEnvironment{Image: "jupyter/base", Tool: v1alpha1.ToolJupyter},
		Compute:     v1alpha1.WorkspaceCompute{GPU: "0.5", Memory: "8Gi"},
		Data: []v1alpha1.WorkspaceData{{NFS: "nas:/datasets", MountPath: "/datasets", ReadOnly: true},
			{Git: &v1alpha1.GitSource{Repository: "https://example.org/lab/notebooks.git"}, MountPath: "/home/jovyan/notebooks"}}}
	rc := e.Allot.AllotV1alpha1().RESTClient()
	if err := rc.Post().Resource("clusterworkspacetemplates").Body(&v1alpha1.ClusterWorkspaceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "jupyter"}, Spec: jupyter}).Do(e.Ctx).Error(); err != nil {
		t.Fatal(err)
	}
	e.must(t, "submit", "nb2", "-p", "research", "--template", "jupyter")
	e.workload(t, "nb2", running(1))
	pods, err = e.Client.CoreV1().Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: submit.LabelTemplate + "=jupyter"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("nb2's pod, labelled with its template: %v %d", err, len(pods.Items))
	}
	p = pods.Items[0]
	if c := p.Spec.Containers[0]; c.Image != "jupyter/base" || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8888 ||
		p.Annotations["allot.dev/gpu-fraction"] != "0.5" || len(p.Spec.InitContainers) != 1 {
		t.Errorf("nb2 from the template: image %s ports %v annotations %v init %d", c.Image, c.Ports, p.Annotations, len(p.Spec.InitContainers))
	}
	// The team's own template of the same name stands before the cluster's; a flag wins
	// over both; a name neither has is refused naming those there are.
	mine := jupyter
	mine.Environment.Image = "jupyter/team"
	if err := rc.Post().Namespace("default").Resource("workspacetemplates").Body(&v1alpha1.WorkspaceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "jupyter", Namespace: "default"}, Spec: mine}).Do(e.Ctx).Error(); err != nil {
		t.Fatal(err)
	}
	out, err := e.run(t, "submit", "nb3", "-p", "research", "--template", "jupyter", "-g", "1", "--dry-run")
	if err != nil || !strings.Contains(out, "image: jupyter/team") || !strings.Contains(out, "nvidia.com/gpu: \"1\"") || !strings.Contains(out, "allot.dev/template: jupyter") {
		t.Errorf("the team's template with -g 1: %v\n%s", err, out)
	}
	if _, err := e.run(t, "submit", "nb4", "-p", "research", "--template", "pytorch"); err == nil ||
		!strings.Contains(err.Error(), `--template "pytorch": no WorkspaceTemplate of that name in namespace default, nor a ClusterWorkspaceTemplate; templates: jupyter, jupyter (cluster)`) {
		t.Errorf("an unknown template: %v", err)
	}
	// A data source must be exactly one kind: the CRD refuses the rest.
	bad := jupyter
	bad.Data = []v1alpha1.WorkspaceData{{PVC: "a", NFS: "nas:/x", MountPath: "/x"}}
	if err := rc.Post().Resource("clusterworkspacetemplates").Body(&v1alpha1.ClusterWorkspaceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: bad}).Do(e.Ctx).Error(); err == nil ||
		!strings.Contains(err.Error(), "exactly one of pvc, nfs and git") {
		t.Errorf("a data source of two kinds: %v", err)
	}
}

// Each --service-type reaches the workload's port, and allot list -o wide and describe
// give its URL: in the cluster, at its pod's node, and at the address the load balancer or
// ingress controller writes (pending until then; this cluster runs neither, so the test
// writes their status as they would).
func TestServiceTypesShowTheirURL(t *testing.T) {
	e := startCLI(t)
	e.must(t, "submit", "ui", "-p", "team-c", "-i", "jupyter/base", "--interactive", "--port", "8888", "--service-type", "clusterip")
	e.must(t, "submit", "np", "-p", "team-c", "-i", "jupyter/base", "--interactive", "--port", "8888", "--service-type", "nodeport")
	e.must(t, "submit", "lb", "-p", "team-d", "-i", "vllm/vllm-openai", "--inference", "--port", "8000", "--service-type", "loadbalancer")
	e.must(t, "submit", "board", "-p", "team-d", "-i", "tensorflow/tensorflow", "--port", "6006", "--service-type", "ingress", "--", "tensorboard", "--path_prefix=/default/board")
	if _, err := e.run(t, "submit", "x", "-p", "team-d", "-i", "busybox", "--service-type", "nodeport"); err == nil || !strings.Contains(err.Error(), "--service-type nodeport needs --port") {
		t.Errorf("--service-type without --port: %v", err)
	}
	np, err := e.Client.CoreV1().Services("default").Get(e.Ctx, "np", metav1.GetOptions{})
	if err != nil || np.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("np's Service: %v %+v", err, np)
	}
	urls := func() map[string]string {
		out := e.must(t, "list", "-o", "json")
		var ws []struct{ Name, URL string }
		if err := json.Unmarshal([]byte(out), &ws); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, w := range ws {
			m[w.Name] = w.URL
		}
		return m
	}
	want := map[string]string{"ui": "http://ui.default.svc:8888", "np": fmt.Sprintf("http://127.0.0.1:%d", np.Spec.Ports[0].NodePort),
		"lb": "<pending>", "board": "<pending>"}
	e.WaitFor(t, "the URLs before any address is given", func() (bool, string) {
		got := urls()
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})
	// The cloud's load balancer and the ingress controller write their addresses.
	lb, _ := e.Client.CoreV1().Services("default").Get(e.Ctx, "lb", metav1.GetOptions{})
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
	if _, err := e.Client.CoreV1().Services("default").UpdateStatus(e.Ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ing, err := e.Client.NetworkingV1().Ingresses("default").Get(e.Ctx, "board", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{Hostname: "gpu.lab.example"}}
	if _, err := e.Client.NetworkingV1().Ingresses("default").UpdateStatus(e.Ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["lb"], want["board"] = "http://203.0.113.7:8000", "http://gpu.lab.example/default/board"
	if got := urls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("URLs %v, want %v", got, want)
	}
	if out := e.must(t, "list", "-o", "wide"); !regexp.MustCompile(`\nlb\s.*\shttp://203\.0\.113\.7:8000\s`).MatchString(out) {
		t.Errorf("allot list -o wide has no URL column with lb's:\n%s", out)
	}
	if out := e.must(t, "describe", "board"); !strings.Contains(out, "URL:        http://gpu.lab.example/default/board\n") {
		t.Errorf("allot describe board:\n%s", out)
	}
}
