// Package ecosystem runs, inside Allot's own process, the real controllers of the workload
// projects whose objects Allot gangs: LeaderWorkerSet, KubeRay, Kubeflow Trainer v2 and
// JobSet, each as built from its Go module, with the CRDs that module ships. It is how
// `allot up --with` gives a user the same objects on the embedded cluster that those
// projects' operators make on a real one, and how tests see them made.
package ecosystem

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/client-go/rest"
)

// The names Start and allot up --with accept.
const (
	LWS     = "lws"
	Ray     = "ray"
	Trainer = "trainer"
	JobSet  = "jobset"
)

// Names are the projects Start can run, in the order it starts them.
func Names() []string { return []string{JobSet, LWS, Ray, Trainer} }

// Resolve checks names and adds what each needs (Trainer makes JobSets, so it needs
// JobSet's controller), in start order, each once.
func Resolve(which []string) ([]string, error) {
	want := map[string]bool{}
	for _, w := range which {
		w = strings.TrimSpace(w)
		if _, ok := projects[w]; !ok {
			return nil, fmt.Errorf("controllers %q is not one Allot runs: one of %s", w, strings.Join(Names(), ", "))
		}
		want[w] = true
		for _, n := range projects[w].needs {
			want[n] = true
		}
	}
	var out []string
	for _, n := range Names() {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// Describe says what each name runs, for a flag's help.
func Describe() string {
	var parts []string
	for _, n := range Names() {
		p := projects[n]
		s := fmt.Sprintf("%s (%s %s", n, p.module, p.version())
		if len(p.needs) > 0 {
			s += ", with " + strings.Join(p.needs, ", ")
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, ", ")
}

// Start installs the CRDs of the named projects from their modules in the Go module cache,
// waits until the API server serves them, and starts each project's controller-runtime
// manager in this process (no leader election, no metrics or health servers, no webhooks:
// see projects.go). It returns once every manager's caches are synced; the managers stop
// with ctx.
//
// Every module directory is checked before anything is installed, so that a binary run
// where the module cache lacks one (a machine without the Go toolchain) fails at once,
// naming the directory and the command that fills it.
func Start(ctx context.Context, cfg *rest.Config, which []string) error {
	names, err := Resolve(which)
	if err != nil {
		return err
	}
	dirs := map[string]string{}
	for _, n := range names {
		dir, err := moduleDir(projects[n].module)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		dirs[n] = dir
	}
	for _, n := range names {
		if err := InstallCRDs(ctx, cfg, dirs[n], projects[n].crds); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	for _, n := range names {
		if err := run(ctx, cfg, n, projects[n]); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}
