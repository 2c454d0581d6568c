package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A refusal of the person says who grants the right (their namespace's admins, or a
// cluster admin for a right at the cluster scope); a refusal of the object (a webhook's, a
// policy's) and any other error are left as they are.
func TestRefusalsSayWhoGrantsTheRight(t *testing.T) {
	rbac := func(msg string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(msg))
	}
	for _, c := range []struct {
		err  error
		want string // "" for unchanged
	}{
		{rbac(`User "alice" cannot list resource "pods" in API group "" at the cluster scope`), "only a cluster admin grants"},
		{rbac(`User "alice" cannot list resource "queues" in API group "allot.dev" at the cluster scope`), "researchers.groups"},
		{rbac(`User "alice" cannot create resource "jobs" in API group "batch" in the namespace "team-d"`), "granted in namespace team-d by its admins"},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New(`admission webhook "pods.validate.allot.dev" denied the request: cannot mount`)), ""},
		{errors.New(`cannot list resource "pods" at the cluster scope`), ""}, // not the API server's
		{nil, ""},
	} {
		got := explainRefusal(c.err)
		switch {
		case c.want == "" && got != c.err:
			t.Errorf("%v became %v", c.err, got)
		case c.want != "" && (!strings.Contains(got.Error(), c.want) || !strings.HasPrefix(got.Error(), c.err.Error())):
			t.Errorf("%v became %v, want the API server's words then %q", c.err, got, c.want)
		}
	}
}

// allot queues for someone who may read the queues but not the nodes: the bars are scaled
// to the largest figure shown, and it says why.
func TestQueuesWithoutTheNodes(t *testing.T) {
	q := v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 6}}}
	var out bytes.Buffer
	if err := printQueues(&out, []v1alpha1.Queue{q}, -1); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "(bar width: 6 GPUs, the largest figure above: you may not read the nodes)") || strings.Contains(s, "the cluster's") {
		t.Errorf("allot queues without the nodes:\n%s", s)
	}
}
