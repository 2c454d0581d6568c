package inspect

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/convert"
)

// Place is one level of a node's place in the cluster's Topology: the level's name and
// the node's domain in it ("" where the node lacks the label).
type Place struct {
	Level  string `json:"level"`
	Domain string `json:"domain"`
}

// Topology reads the Topology the views group nodes by (the only one, or the one named
// default); ok is false when there is none to pick, or its CRD is not installed.
func Topology(ctx context.Context, allot versioned.Interface) (convert.Levels, bool, error) {
	l, err := allot.AllotV1alpha1().Topologies().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return convert.Levels{}, false, nil
	}
	if err != nil {
		return convert.Levels{}, false, err
	}
	objs := make([]any, len(l.Items))
	for i := range l.Items {
		objs[i] = &l.Items[i]
	}
	lv, ok := convert.ViewTopology(objs)
	return lv, ok, nil
}

// PlaceNodes gives each node its place in the levels and orders the nodes by it, widest
// level first, so that the nodes of one rack are listed together.
func PlaceNodes(out []Node, nodes []*corev1.Node, lv convert.Levels) {
	labels := make(map[string]map[string]string, len(nodes))
	for _, n := range nodes {
		labels[n.Name] = n.Labels
	}
	for i := range out {
		out[i].Topology = make([]Place, len(lv.Labels))
		for k, key := range lv.Labels {
			out[i].Topology[k] = Place{Level: lv.Names[k], Domain: labels[out[i].Name][key]}
		}
	}
	slices.SortStableFunc(out, func(a, b Node) int {
		for k := range a.Topology {
			if c := strings.Compare(a.Topology[k].Domain, b.Topology[k].Domain); c != 0 {
				return c
			}
		}
		return strings.Compare(a.Name, b.Name)
	})
}
