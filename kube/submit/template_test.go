package submit

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestTemplateFillsWhatTheFlagsLeave: a notebook from a template gets the template's image,
// tool port, GPUs, environment and data (a PVC, an NFS export, a git repository cloned by
// an init container before it starts); what the submitter sets wins; applying the template
// twice changes nothing.
func TestTemplateFillsWhatTheFlagsLeave(t *testing.T) {
	tpl := &v1alpha1.WorkspaceTemplateSpec{
		Environment: v1alpha1.WorkspaceEnvironment{Image: "jupyter/base", Tool: v1alpha1.ToolJupyter, Env: []string{"A=template", "B=template"}},
		Compute:     v1alpha1.WorkspaceCompute{GPU: "0.5", Memory: "16Gi"},
		Data: []v1alpha1.WorkspaceData{{PVC: "datasets", MountPath: "/data"}, {NFS: "nas:/home", MountPath: "/home/team", ReadOnly: true},
			{Git: &v1alpha1.GitSource{Repository: "https://example.org/team/notebooks.git", Revision: "main"}, MountPath: "/work/notebooks"}},
	}
	s := Spec{Name: "nb", Namespace: "team-a", Queue: "team-a", Env: []string{"B=mine"}, Template: tpl, TemplateName: "jupyter-small"}
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	st, ok := objs[0].(*appsv1.StatefulSet)
	if !ok {
		t.Fatalf("a jupyter template makes an interactive workload (a StatefulSet), got %T", objs[0])
	}
	if st.Labels[LabelTemplate] != "jupyter-small" || st.Spec.Template.Labels[LabelTemplate] != "jupyter-small" {
		t.Errorf("labels %v / %v", st.Labels, st.Spec.Template.Labels)
	}
	pod := st.Spec.Template
	c := pod.Spec.Containers[0]
	if c.Image != "jupyter/base" || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8888 {
		t.Errorf("image %s ports %v, want jupyter/base on 8888", c.Image, c.Ports)
	}
	if pod.Annotations[v1alpha1.AnnotationGPUFraction] != "0.5" {
		t.Errorf("annotations %v, want half a GPU", pod.Annotations)
	}
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if !slices.Contains(env, "A=template") || !slices.Contains(env, "B=mine") || slices.Contains(env, "B=template") {
		t.Errorf("env %v: the template's A, the submitter's B", env)
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
	}
	for _, want := range []string{"/data", "/home/team", "/work/notebooks"} {
		if !slices.Contains(mounts, want) {
			t.Errorf("mounts %v lack %s", mounts, want)
		}
	}
	if len(pod.Spec.InitContainers) != 1 || strings.Join(pod.Spec.InitContainers[0].Args, " ") != "clone --depth=1 --branch main -- https://example.org/team/notebooks.git /git" ||
		pod.Spec.InitContainers[0].Image != v1alpha1.DefaultGitImage {
		t.Errorf("init containers %+v, want the clone", pod.Spec.InitContainers)
	}
	// The submitter's own values win; a second application changes nothing.
	s = Spec{Name: "nb", Namespace: "team-a", Queue: "team-a", Image: "mine", GPUs: "1", Port: 9000, Template: tpl, TemplateName: "jupyter-small"}
	once := s.WithTemplate()
	twice := once.WithTemplate()
	if once.Image != "mine" || once.GPUs != "1" || once.GPUMemory != "" || once.Port != 9000 || len(twice.PVCs) != 1 || len(twice.gits) != 1 {
		t.Errorf("flags over the template: %+v / %+v", once, twice)
	}
	// A shell workspace stays up with nothing to serve; a training template makes a Job.
	shell := Spec{Name: "sh", Queue: "q", Template: &v1alpha1.WorkspaceTemplateSpec{Environment: v1alpha1.WorkspaceEnvironment{Image: "ubuntu", Tool: v1alpha1.ToolShell}}}
	if got := shell.WithTemplate(); strings.Join(got.Command, " ") != "sleep infinity" || got.Port != 0 || !got.Interactive {
		t.Errorf("shell: %+v", got)
	}
	train := Spec{Name: "tr", Queue: "q", Template: &v1alpha1.WorkspaceTemplateSpec{Environment: v1alpha1.WorkspaceEnvironment{Image: "pytorch", Type: "train"}}}
	if got := train.WithTemplate(); got.Type() != TypeTrain {
		t.Errorf("a train template makes %s", got.Type())
	}
}
