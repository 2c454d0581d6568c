package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Lease tunes leader election between replicas. A standby takes over at most Duration +
// RetryPeriod after the leader's last renewal; the leader stops when it could not renew
// for RenewDeadline. The defaults give a failover under 5 s; kube-scheduler's 15/10/2 s
// are gentler on an API server shared by thousands of leases, and can be set instead.
type Lease struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
}

func (l Lease) withDefaults() Lease {
	if l.Duration <= 0 {
		l.Duration = 3 * time.Second
	}
	if l.RenewDeadline <= 0 || l.RenewDeadline >= l.Duration {
		l.RenewDeadline = l.Duration * 2 / 3
	}
	if l.RetryPeriod <= 0 || l.RetryPeriod >= l.RenewDeadline {
		l.RetryPeriod = min(250*time.Millisecond, l.RenewDeadline/2)
	}
	return l
}

// LeaseName is the Lease replicas take turns through, in kube-system.
const LeaseName = "allot-scheduler"

// fenceMargin is how much sooner than another replica could take the Lease the leader
// stops acting: room for the two clocks running at slightly different rates.
const fenceMargin = 500 * time.Millisecond

// fence tells the binds and evictions whether this replica may act now. client-go's
// elector ends a leader only after RenewDeadline and runs the leader's work until then,
// so a process paused for longer than the Lease (a stopped VM, a long GC pause, SIGSTOP)
// would wake up and act on a stale plan beside the new leader. The fence is checked
// immediately before every request: the leader acts only while less than Duration −
// fenceMargin has passed since the start of its last successful renewal (no other
// replica can take the Lease sooner), by the monotonic clock, which runs on while a
// process is stopped. The API server checks it too: see fencePolicy.
type fence struct {
	mu      sync.Mutex
	renewed time.Time // start of the last successful create or update of the Lease
	valid   time.Duration
	enabled bool
}

func (f *fence) ok() bool {
	if f == nil || !f.enabled {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.renewed.IsZero() && time.Since(f.renewed) < f.valid
}

func (f *fence) lost() {
	f.mu.Lock()
	f.renewed = time.Time{}
	f.mu.Unlock()
}

// fencedLock records when the Lease was last written successfully.
type fencedLock struct {
	resourcelock.Interface
	f *fence
}

func (l fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := l.Interface.Create(ctx, r)
	l.record(start, r, err)
	return err
}

func (l fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := l.Interface.Update(ctx, r)
	l.record(start, r, err)
	return err
}

func (l fencedLock) record(start time.Time, r resourcelock.LeaderElectionRecord, err error) {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	if err == nil && r.HolderIdentity == l.Identity() {
		l.f.renewed = start
	} else if err != nil || r.HolderIdentity != l.Identity() {
		l.f.renewed = time.Time{} // a failed renewal or a release: stop at once
	}
}

// fencePolicy makes the API server refuse a bind or an eviction from a replica that no
// longer holds the Lease, whatever that replica believes: each carries its replica's
// identity in the annotation allot.dev/leader, and a ValidatingAdmissionPolicy with the
// Lease as its parameter compares it with the Lease's holder. Binds and evictions
// without the annotation (a single scheduler, other schedulers) are not concerned.
func fencePolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	deny := admissionregistrationv1.DenyAction
	name := "allot-scheduler-fence"
	key := v1alpha1.AnnotationLeader
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
						Resources: []string{"pods/binding", "pods/eviction"}},
				}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "from-an-elected-allot",
				Expression: "has(object.metadata.annotations) && '" + key + "' in object.metadata.annotations"}},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "has(params.spec.holderIdentity) && params.spec.holderIdentity == object.metadata.annotations['" + key + "']",
				MessageExpression: "'allot scheduler ' + object.metadata.annotations['" + key + "'] + ' does not hold the Lease " + LeaseName + "'",
				Reason:            ptr(metav1.StatusReasonForbidden),
			}},
		}}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ParamRef: &admissionregistrationv1.ParamRef{Name: LeaseName, Namespace: "kube-system",
				ParameterNotFoundAction: &deny},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	return p, b
}

func ptr[T any](v T) *T { return &v }

// ensureFencePolicy installs the policy if it is missing. Without the right to (the Helm
// chart installs it itself), the replicas rely on their own fence alone, and say so.
func (s *Scheduler) ensureFencePolicy(ctx context.Context) {
	p, b := fencePolicy()
	api := s.client.AdmissionregistrationV1()
	_, err := api.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		_, err = api.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		slog.Warn("allot scheduler: the API server will not check the leader's fence (binds and evictions from a replica that lost the Lease are stopped by the replica alone)",
			"policy", p.Name, "err", err)
	}
}

// takeoverMargin is how long past its holder's lease duration, by this process's clock, a
// Lease must be before takeOver takes it.
const takeoverMargin = 500 * time.Millisecond

// takeOver takes a Lease whose holder has not renewed it for its lease duration plus a
// margin, judged by the renewal time written in it and this process's clock. client-go's
// elector trusts no other clock: it takes a Lease only after watching it unchanged for a
// whole lease duration from its own first sight, so a replica started just after the
// leader died (a double fault) waits a second lease duration. A clock that is wrong here
// cannot make two replicas act at once: the API server's fence refuses the old holder's
// binds and evictions as soon as the Lease names another, its own fence has expired by
// then, and its next renewal fails on the changed resourceVersion. The elector then finds
// this replica named as holder and leads.
func (s *Scheduler) takeOver(ctx context.Context, lease Lease) {
	leases := s.client.CoordinationV1().Leases("kube-system")
	tick := time.NewTicker(lease.RetryPeriod / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s.fence.ok() {
			continue // leading
		}
		l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == s.opts.Identity {
			continue // none yet, released (the elector takes it at once), or ours
		}
		d := lease.Duration
		if l.Spec.LeaseDurationSeconds != nil {
			d = max(d, time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second)
		}
		if time.Since(l.Spec.RenewTime.Time) < d+takeoverMargin {
			continue
		}
		from := *l.Spec.HolderIdentity
		now := metav1.NewMicroTime(time.Now())
		transitions := int32(1)
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.HolderIdentity, l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseTransitions = &s.opts.Identity, &now, &now, &transitions
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			slog.Info("allot scheduler: took over a Lease its holder stopped renewing", "from", from, "identity", s.opts.Identity)
		}
	}
}
