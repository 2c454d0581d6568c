package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// overdueSet is a StatefulSet of n whose pods started at start, in queue team-a.
func overdueSet(name string, n int32, start time.Time) []*corev1.Pod {
	var pods []*corev1.Pod
	yes := true
	for i := range n {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: "ml", UID: types.UID(fmt.Sprintf("%s-pod-%d", name, i)),
			Labels:          map[string]string{LabelQueue: "team-a", LabelClass: v1alpha1.ClassInteractive},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: types.UID(name), Controller: &yes}}},
			Spec:   corev1.PodSpec{SchedulerName: SchedulerName, NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: start}}})
	}
	return pods
}

// TestOverdueStopsOnlyTheOverduePod: past the interactive time limit, a notebook's
// StatefulSet of one is suspended (scaled to zero, kept); in a StatefulSet of three only
// the overdue pod is deleted, its set and the other pods left as they were.
func TestOverdueStopsOnlyTheOverduePod(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	one, three := int32(1), int32(3)
	nb := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "ml", UID: "nb"}, Spec: appsv1.StatefulSetSpec{Replicas: &one}}
	web := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ml", UID: "web"}, Spec: appsv1.StatefulSetSpec{Replicas: &three}}
	nbPods := overdueSet("nb", 1, now.Add(-3*time.Hour))
	webPods := overdueSet("web", 3, now.Add(-30*time.Minute))
	webPods[1].Status.StartTime = &metav1.Time{Time: now.Add(-3 * time.Hour)} // only web-1 is overdue
	client := k8sfake.NewSimpleClientset(nb, web, nbPods[0], webPods[0], webPods[1], webPods[2])
	s := &Scheduler{client: client, recorder: record.NewFakeRecorder(10)}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: v1alpha1.QueueSpec{InteractiveTimeLimit: &metav1.Duration{Duration: 2 * time.Hour}}}
	s.stopOverdue(ctx, now, append(nbPods, webPods...), []*v1alpha1.Queue{q})

	sets := client.AppsV1().StatefulSets("ml")
	if st, err := sets.Get(ctx, "nb", metav1.GetOptions{}); err != nil || *st.Spec.Replicas != 0 {
		t.Fatalf("the notebook of one: %v %v, want scaled to zero", st.Spec.Replicas, err)
	}
	if st, err := sets.Get(ctx, "web", metav1.GetOptions{}); err != nil || *st.Spec.Replicas != 3 {
		t.Fatalf("the StatefulSet of three: %d replicas (%v), want 3 kept", *st.Spec.Replicas, err)
	}
	pods := client.CoreV1().Pods("ml")
	if _, err := pods.Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the overdue web-1: %v, want deleted", err)
	}
	for _, name := range []string{"web-0", "web-2", "nb-0"} {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: %v, want left alone", name, err)
		}
	}
}
