package submit

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// LabelTemplate names, on everything made from a workspace template, the template.
const LabelTemplate = "allot.dev/template"

// WithTemplate is the spec with what it leaves unset taken from its workspace template
// (--template): the image, command, port (the tool's usual one), working directory, type
// (interactive unless the template says otherwise), GPUs, CPU and memory; the template's
// environment goes before the submitter's (-e wins), its data sources beside theirs. Once
// applied the template is dropped, so that applying again changes nothing.
func (s Spec) WithTemplate() Spec {
	t := s.Template
	if t == nil {
		return s
	}
	s.Template = nil
	e, c := t.Environment, t.Compute
	if s.Image == "" {
		s.Image = e.Image
	}
	if len(s.Command) == 0 {
		s.Command = slices.Clone(e.Command)
		if len(s.Command) == 0 && e.Tool == v1alpha1.ToolShell {
			s.Command = []string{"sleep", "infinity"} // kept up for allot bash
		}
	}
	if !s.Interactive && !s.Inference && s.Workers == 0 {
		switch e.Type {
		case "", v1alpha1.ClassInteractive:
			s.Interactive = true
		case v1alpha1.ClassInference:
			s.Inference = true
		}
	}
	if s.Port == 0 {
		s.Port = int(e.Port)
		if s.Port == 0 {
			s.Port = int(v1alpha1.ToolPorts[e.Tool])
		}
	}
	if s.WorkingDir == "" {
		s.WorkingDir = e.WorkingDir
	}
	var env []string
	for _, kv := range e.Env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(s.Env, func(mine string) bool { return strings.HasPrefix(mine, name+"=") }) {
			env = append(env, kv)
		}
	}
	s.Env = append(env, s.Env...)
	if s.GPUs == "" && s.GPUMemory == "" && s.GPUCompute == 0 && s.MIG == "" && s.MIGDynamic == "" {
		s.GPUs, s.GPUMemory = c.GPU, c.GPUMemory
	}
	if s.CPU == "" {
		s.CPU = c.CPU
	}
	if s.Memory == "" {
		s.Memory = c.Memory
	}
	s.LargeSHM = s.LargeSHM || c.LargeSHM
	for _, d := range t.Data {
		ro := ""
		if d.ReadOnly {
			ro = ":ro"
		}
		switch {
		case d.PVC != "":
			s.PVCs = append(s.PVCs, d.PVC+":"+d.MountPath)
		case d.NFS != "":
			s.NFS = append(s.NFS, d.NFS+":"+d.MountPath+ro)
		case d.Git != nil:
			s.gits = append(s.gits, d)
		}
	}
	return s
}

// clone adds, for each git repository of the template, a volume, an init container that
// clones the repository into it and its mount in the workspace's container.
func (s Spec) clone(spec *corev1.PodSpec) error {
	c := &spec.Containers[0]
	for i, d := range s.gits {
		g := d.Git
		if g.Repository == "" || strings.HasPrefix(g.Repository, "-") || !strings.HasPrefix(d.MountPath, "/") {
			return fmt.Errorf("template %s: git source %d is not allowed: a repository to clone and an absolute mountPath", s.TemplateName, i)
		}
		name := fmt.Sprintf("git-%d", i)
		image := g.Image
		if image == "" {
			image = v1alpha1.DefaultGitImage
		}
		args := []string{"clone", "--depth=1"}
		if g.Revision != "" {
			args = append(args, "--branch", g.Revision)
		}
		// "--" ends git's options: the repository and the directory are never read as one.
		args = append(args, "--", g.Repository, "/git")
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		spec.InitContainers = append(spec.InitContainers, corev1.Container{Name: "clone-" + name, Image: image, Args: args,
			VolumeMounts: []corev1.VolumeMount{{Name: name, MountPath: "/git"}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: d.MountPath})
	}
	return nil
}
