package stack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/kube/admission"
	"github.com/allot-dev/allot/kube/kubetest"
)

// TestPodRightAfterItsQueueIsAdmitted: a Queue created a moment before its first pod (a
// script, one `kubectl apply` of both) may not have reached the webhook's informer when
// the pod is admitted. Here the view's informers stop once listed, so a Queue made after
// never reaches its cache: the pod is admitted all the same, from the API server's
// answer, and a queue that does not exist is still refused, naming it.
func TestPodRightAfterItsQueueIsAdmitted(t *testing.T) {
	e := kubetest.Start(t, 1, 8)
	ctx, stop := context.WithCancel(e.Ctx)
	view, err := admission.NewView(ctx, e.Client, e.Allot)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	time.Sleep(100 * time.Millisecond) // the watches closed before the Queue is made
	e.Queue(t, "team-a", 4, nil)
	if err := admission.ValidatePod(kubetest.PodSpec{Name: "first", Queue: "team-a", GPUs: 1}.Pod(), view, nil); err != nil {
		t.Fatalf("the first pod of a queue just made was refused: %v", err)
	}
	err = admission.ValidatePod(kubetest.PodSpec{Name: "lost", Queue: "team-b", GPUs: 1}.Pod(), view, nil)
	if err == nil || !strings.Contains(err.Error(), `queue "team-b" does not exist`) {
		t.Fatalf("a pod of a queue that does not exist: %v, want a refusal naming it", err)
	}
}
