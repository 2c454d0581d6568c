package control

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotfake "github.com/allot-dev/allot/kube/client/clientset/versioned/fake"
	"github.com/allot-dev/allot/kube/inspect"
)

// TestDeletePodGroup: a PodGroup of bare pods goes with its pods; once its pods are gone a
// PodGroup already deleted is no error, and one never there is.
func TestDeletePodGroup(t *testing.T) {
	ctx := context.Background()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name)}}
	}
	client := kubefake.NewClientset(pod("ddp-0"), pod("ddp-1"), pod("other"))
	allot := allotfake.NewSimpleClientset(&v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: "ml"}})
	c := Clients{Client: client, Allot: allot}
	w := &inspect.Workload{Kind: "PodGroup", Name: "ddp", Namespace: "ml",
		Pods: []inspect.Pod{{Name: "ddp-0", UID: "uid-ddp-0", Phase: "Running"}, {Name: "ddp-1", UID: "uid-ddp-1", Phase: "Pending"}}}
	msg, err := c.Delete(ctx, w)
	if err != nil || msg != "deleted PodGroup ml/ddp, 2 pods" {
		t.Fatalf("delete: %q, %v", msg, err)
	}
	if _, err := allot.AllotV1alpha1().PodGroups("ml").Get(ctx, "ddp", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the PodGroup is still there: %v", err)
	}
	if l, _ := client.CoreV1().Pods("ml").List(ctx, metav1.ListOptions{}); len(l.Items) != 1 || l.Items[0].Name != "other" {
		t.Errorf("pods left: %v", l.Items)
	}
	w.Pods = nil
	if _, err := c.Delete(ctx, w); err == nil {
		t.Error("a PodGroup already gone, with no pods, deleted without an error")
	}
}
