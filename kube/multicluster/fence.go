package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// LeaseName is the Lease the manager renews on each worker while it reaches it.
const LeaseName = "allot-manager"

// renewLease renews the manager's lease on a worker (made, with its namespace, the first
// time). A worker that stops seeing it renewed suspends the Jobs dispatched to it.
func (m *Manager) renewLease(ctx context.Context, w *worker, now time.Time) error {
	leases := w.client.CoordinationV1().Leases(m.opts.Namespace)
	secs := int32(m.opts.LeaseDuration / time.Second)
	renew := metav1.NewMicroTime(now)
	l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if err := ensureNamespace(ctx, w.client, m.opts.Namespace); err != nil {
			return fmt.Errorf("namespace %s: %w", m.opts.Namespace, err)
		}
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: m.opts.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.opts.Name, LeaseDurationSeconds: &secs, RenewTime: &renew}}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &m.opts.Name, &secs, &renew
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Fence runs on a worker cluster (allot scheduler --fence-dispatched): when the manager's
// lease there has not been renewed for its duration, the manager may have lost the
// worker and dispatch its Jobs elsewhere, so every Job it dispatched here is suspended
// (its pods stopped by the Job controller) before the manager's LostAfter passes. The
// manager resumes them if it comes back and they are still this worker's.
type Fence struct {
	Client    kubernetes.Interface
	Namespace string
	Interval  time.Duration
	Now       func() time.Time
	Log       *slog.Logger
}

// Run fences until ctx ends.
func (f *Fence) Run(ctx context.Context) {
	if f.Interval <= 0 {
		f.Interval = time.Second
	}
	if f.Now == nil {
		f.Now = time.Now
	}
	if f.Log == nil {
		f.Log = slog.Default()
	}
	// The manager's identity here is whoever may write the label (the chart's
	// allot-manager-access, or a cluster admin's).
	ensurePolicy(ctx, f.Client, OriginPolicy, "system:serviceaccount:"+f.Namespace+":allot-manager-access")
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	for {
		f.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (f *Fence) check(ctx context.Context) {
	l, err := f.Client.CoordinationV1().Leases(f.Namespace).Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return // no manager has dispatched here, or the API server does not answer
	}
	expired := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	now := f.Now()
	if now.Before(expired) {
		return
	}
	jobs, err := f.Client.BatchV1().Jobs("").List(ctx, metav1.ListOptions{LabelSelector: LabelOrigin})
	if err != nil {
		return
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if finished(j) || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
			continue
		}
		why := fmt.Sprintf("the manager's lease %s/%s was last renewed at %s: suspended so that it never runs here and elsewhere at once",
			f.Namespace, LeaseName, l.Spec.RenewTime.UTC().Format(time.RFC3339))
		if err := setSuspend(ctx, f.Client, j, true, why); err != nil {
			f.Log.Warn("fencing a dispatched job", "job", j.Namespace+"/"+j.Name, "err", err)
			continue
		}
		f.Log.Info("fenced a dispatched job", "job", j.Namespace+"/"+j.Name, "expired", expired)
	}
}

// setSuspend sets a worker copy's spec.suspend, with the fence's note (or without).
func setSuspend(ctx context.Context, client kubernetes.Interface, j *batchv1.Job, suspend bool, fenced string) error {
	var note any = fenced
	if fenced == "" {
		note = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationFenced: note}},
		"spec": map[string]any{"suspend": suspend}})
	_, err := client.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
