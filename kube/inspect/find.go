package inspect

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// Find returns one workload by name, or by kind/name (job/ddp, pod/x) when two of other
// kinds share the name. Names match exactly, never by prefix.
func Find(ctx context.Context, client kubernetes.Interface, namespace, name string) (*Workload, error) {
	all, err := Workloads(ctx, client, namespace, "")
	if err != nil {
		return nil, err
	}
	return Pick(all, namespace, name)
}

// Pick finds a workload by name or kind/name among all.
func Pick(all []Workload, namespace, name string) (*Workload, error) {
	kind, bare, hasKind := strings.Cut(name, "/")
	if !hasKind {
		bare, kind = name, ""
	}
	var found []*Workload
	var names []string
	for i := range all {
		w := &all[i]
		names = append(names, w.Ref())
		if w.Name == bare && (kind == "" || strings.EqualFold(w.Kind, kind)) {
			found = append(found, w)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		var refs []string
		for _, w := range found {
			refs = append(refs, strings.ToLower(w.Kind)+"/"+w.Name)
		}
		return nil, fmt.Errorf("%d workloads are named %q in namespace %s: name one as %s", len(found), bare, namespace, strings.Join(refs, " or "))
	case len(names) == 0:
		return nil, fmt.Errorf("no workload %q in namespace %s (none there; allot list -A shows every namespace)", name, namespace)
	}
	return nil, fmt.Errorf("no workload %q in namespace %s; there are: %s", name, namespace, strings.Join(names, ", "))
}
