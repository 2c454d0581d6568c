package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// Read says what was read of one kind.
type Read struct {
	Kind  *Kind
	Found bool // the cluster serves the kind (always true for a file)
	Count int
}

func (r Read) String() string {
	switch {
	case !r.Found && r.Kind.FileOnly():
		return fmt.Sprintf("%s: not kept in a cluster: read them from a file with -f", r.Kind)
	case !r.Found:
		return fmt.Sprintf("%s: not found in this cluster (no CRD serves %s)", r.Kind, r.Kind.Resource.GroupResource())
	case r.Count == 1:
		return fmt.Sprintf("%s: 1 queue", r.Kind)
	}
	return fmt.Sprintf("%s: %d queues", r.Kind, r.Count)
}

// ReadCluster lists the queues of each kind with the dynamic client. A kind the cluster
// does not serve (its CRD is absent) is reported as not found, not as an error.
func ReadCluster(ctx context.Context, dyn dynamic.Interface, kinds []*Kind) ([]*unstructured.Unstructured, []Read, error) {
	var objs []*unstructured.Unstructured
	var reads []Read
	for _, k := range kinds {
		if k.FileOnly() {
			reads = append(reads, Read{Kind: k})
			continue
		}
		var items []unstructured.Unstructured
		opts := metav1.ListOptions{Limit: 500}
		found := true
		for {
			l, err := dyn.Resource(k.Resource).List(ctx, opts)
			if apierrors.IsNotFound(err) {
				found = false
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("reading %s: %w", k, err)
			}
			items = append(items, l.Items...)
			if opts.Continue = l.GetContinue(); opts.Continue == "" {
				break
			}
		}
		for i := range items {
			items[i].SetGroupVersionKind(k.GroupVersionKind())
			objs = append(objs, &items[i])
		}
		reads = append(reads, Read{Kind: k, Found: found, Count: len(items)})
	}
	return objs, reads, nil
}

// ReadFile reads exported YAML or JSON: queues one to a document, or lists of them
// (kubectl get queues.scheduling.run.ai -o yaml). Queues of kinds not in kinds are left
// out; anything that is not a queue at all is refused, naming the document.
func ReadFile(r io.Reader, name string, kinds []*Kind) ([]*unstructured.Unstructured, []Read, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var all []*unstructured.Unstructured
	var errs []error
	for doc := 1; ; doc++ {
		var o map[string]any
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: document %d: not YAML or JSON: %v", name, doc, err)
		}
		if len(o) == 0 {
			continue
		}
		if objs, ok, err := runaiDocument(o); ok {
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: document %d: %w", name, doc, err))
			}
			all = append(all, objs...)
			continue
		}
		u := &unstructured.Unstructured{Object: o}
		if u.IsList() {
			items, _, _ := unstructured.NestedSlice(o, "items")
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					errs = append(errs, fmt.Errorf("%s: document %d: items[%d] is not an object", name, doc, i))
					continue
				}
				all = append(all, &unstructured.Unstructured{Object: m})
			}
			continue
		}
		all = append(all, u)
	}
	counts := map[*Kind]int{}
	var objs []*unstructured.Unstructured
	for _, u := range all {
		k := kindOf(u)
		if k == nil {
			errs = append(errs, fmt.Errorf("%s: %s %q is not a queue allot import reads (%s)", name, strings.TrimSpace(u.GetAPIVersion()+" "+u.GetKind()), u.GetName(), kindList()))
			continue
		}
		for _, want := range kinds {
			if want == k {
				counts[k]++
				objs = append(objs, u)
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	var reads []Read
	for _, k := range kinds {
		reads = append(reads, Read{Kind: k, Found: true, Count: counts[k]})
	}
	return objs, reads, nil
}
