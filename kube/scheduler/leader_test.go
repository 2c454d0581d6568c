package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// The leader's own fence: it acts only while no other replica could have taken the Lease.
func TestFenceExpiresBeforeTheLease(t *testing.T) {
	f := &fence{enabled: true, valid: 2500 * time.Millisecond}
	if f.ok() {
		t.Fatal("a replica that never renewed may act")
	}
	f.renewed = time.Now()
	if !f.ok() {
		t.Fatal("a replica that just renewed may not act")
	}
	f.renewed = time.Now().Add(-3 * time.Second) // paused past its lease
	if f.ok() {
		t.Fatal("a replica paused past its lease may act")
	}
	if (*fence)(nil).ok() != true {
		t.Fatal("without leader election the scheduler may not act")
	}
}

// A replica that lost the Lease cannot bind or evict even if it believes it leads: the API
// server compares the identity each bind and eviction carries with the Lease's holder.
// The leader's own binds carry its identity and pass.
func TestAPIServerRefusesAStaleLeader(t *testing.T) {
	e := newEnv(t, 1, 4)
	e.queue(t, "q", 4)
	defer e.run(t, Options{Interval: 200 * time.Millisecond, LeaderElection: true, Identity: "r-new"})()

	e.pod(t, "mine", "q", 1, nil)
	e.waitFor(t, "the leader binds, saying who it is", func() (bool, string) {
		p := e.pods(t)["mine"]
		return p.Spec.NodeName != "" && p.Annotations[v1alpha1.AnnotationLeader] == "r-new", p.Spec.NodeName
	})
	// A pod of another scheduler, bound and evicted by hand as a stale replica would.
	other := kubetest.PodSpec{Name: "other"}.Pod()
	other.Spec.SchedulerName = "someone-else"
	if _, err := e.client.CoreV1().Pods("default").Create(e.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := map[string]string{v1alpha1.AnnotationLeader: "r-old"}
	// The API server takes a moment to enforce a new policy: probe with a dry run.
	e.waitFor(t, "an eviction from r-old refused", func() (bool, string) {
		err := e.client.PolicyV1().Evictions("default").Evict(e.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "default", Annotations: stale},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		if err == nil {
			return false, "accepted"
		}
		return strings.Contains(err.Error(), "allot scheduler r-old does not hold the Lease allot-scheduler"), err.Error()
	})
	err := e.client.CoreV1().Pods("default").Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default", Annotations: stale},
		Target: corev1.ObjectReference{Kind: "Node", Name: "dgx-1"}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "allot scheduler r-old does not hold the Lease allot-scheduler") {
		t.Fatalf("a bind from r-old: %v", err)
	}
	if p := e.pods(t)["mine"]; p.DeletionTimestamp != nil {
		t.Fatal("the stale eviction went through")
	}
}

// A replica started after the leader died takes its Lease as soon as the Lease's own
// renewal time says it has expired, not a whole lease duration after first seeing it.
func TestExpiredLeaseIsTakenAtOnce(t *testing.T) {
	e := newEnv(t, 1, 2)
	past := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	dead, ten := "r-dead", int32(10)
	if _, err := e.client.CoordinationV1().Leases("kube-system").Create(e.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: "kube-system"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &dead, LeaseDurationSeconds: &ten, AcquireTime: &past, RenewTime: &past}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(e.c.Config, Options{LeaderElection: true, Identity: "r-new",
		Lease: Lease{Duration: 10 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	started := time.Now()
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	e.waitFor(t, "r-new holds the Lease", func() (bool, string) {
		l, err := e.client.CoordinationV1().Leases("kube-system").Get(e.ctx, LeaseName, metav1.GetOptions{})
		return err == nil && *l.Spec.HolderIdentity == "r-new" && s.fence.ok(), ""
	})
	// client-go alone would watch it unchanged for the whole 10 s first.
	if took := time.Since(started); took > 8*time.Second {
		t.Fatalf("took the expired Lease after %s", took)
	}
}
