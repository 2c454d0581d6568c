package workload

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotfake "github.com/allot-dev/allot/kube/client/clientset/versioned/fake"
	allotinformers "github.com/allot-dev/allot/kube/client/informers/externalversions"
)

// fakeController is a controller on fake clients whose PodGroup cache is synced, with
// namespace default naming queue q.
func fakeController(t *testing.T) *Controller {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{v1alpha1.LabelQueue: "q"}}}
	c := New(kubefake.NewSimpleClientset(ns), dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), allotfake.NewSimpleClientset())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	af := allotinformers.NewSharedInformerFactory(c.allot, 0)
	c.groups = af.Allot().V1alpha1().PodGroups().Informer()
	af.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.groups.HasSynced) {
		t.Fatal("PodGroup cache not synced")
	}
	return c
}

func group(t *testing.T, c *Controller, name string) *v1alpha1.PodGroup {
	t.Helper()
	pg, err := c.allot.AllotV1alpha1().PodGroups("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// TestSameNameOtherWorkload: group 1 of LWS llm and a Job named llm-1 both want PodGroup
// llm-1. The first keeps it as it made it; the Job's events change nothing, and are logged
// once, not at each event.
func TestSameNameOtherWorkload(t *testing.T) {
	var logs bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	c := fakeController(t)
	ctx := context.Background()
	lws := metav1.OwnerReference{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: "llm", UID: types.UID("lws-uid")}
	c.ensure(ctx, "default", "llm-1", nil, nil, 4, nil, lws)
	parallelism := int32(2)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "llm-1", Namespace: "default", UID: "job-uid"},
		Spec: batchv1.JobSpec{Parallelism: &parallelism, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}}}}
	for range 3 {
		c.syncJob(ctx, job)
	}
	pg := group(t, c, "llm-1")
	if pg.Spec.MinMember != 4 || metav1.GetControllerOf(pg).UID != lws.UID {
		t.Errorf("PodGroup llm-1: minMember %d of %v; want the LWS group's 4", pg.Spec.MinMember, metav1.GetControllerOf(pg))
	}
	if n := strings.Count(logs.String(), "another workload's"); n != 1 {
		t.Errorf("%d warnings of the name taken; want 1:\n%s", n, logs.String())
	}
	// The LWS itself still corrects its own group.
	c.ensure(ctx, "default", "llm-1", nil, nil, 8, nil, lws)
	if pg := group(t, c, "llm-1"); pg.Spec.MinMember != 8 {
		t.Errorf("the LWS's own group: minMember %d; want 8", pg.Spec.MinMember)
	}
}

// TestJobsOfOtherOwnersGetNoGroup: a RayJob's submitter Job (its pod is in no gang) and a
// JobSet's Job (the JobSet is the gang) get no PodGroup of their own; a Job of an owner
// Allot does not know (a CronJob) does.
func TestJobsOfOtherOwnersGetNoGroup(t *testing.T) {
	c := fakeController(t)
	ctx := context.Background()
	yes := true
	for _, o := range []struct {
		name  string
		owner *metav1.OwnerReference
		group bool
	}{
		{"submitter", &metav1.OwnerReference{APIVersion: "ray.io/v1", Kind: "RayJob", Name: "rj", UID: "rj", Controller: &yes}, false},
		{"workers", &metav1.OwnerReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "js", UID: "js", Controller: &yes}, false},
		{"nightly", &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "CronJob", Name: "cj", UID: "cj", Controller: &yes}, true},
		{"bare", nil, true},
	} {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: o.name, Namespace: "default", UID: types.UID(o.name)},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}}}}
		if o.owner != nil {
			j.OwnerReferences = []metav1.OwnerReference{*o.owner}
		}
		c.syncJob(ctx, j)
		_, err := c.allot.AllotV1alpha1().PodGroups("default").Get(ctx, o.name, metav1.GetOptions{})
		if got := err == nil; got != o.group {
			t.Errorf("Job %s: PodGroup %v (%v); want %v", o.name, got, err, o.group)
		}
	}
}
