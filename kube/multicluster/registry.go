package multicluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// syncWorkers keeps one connection per WorkerCluster: made from its Secret's kubeconfig
// (again when the Secret changes), probed every round, and its status written when it
// changes. A kubeconfig that does not read, or a Secret that is not there, is refused with
// the cluster's name, in its status and an Event.
func (m *Manager) syncWorkers(ctx context.Context, now time.Time) {
	seen := map[string]bool{}
	for _, o := range m.clusters.GetStore().List() {
		wc := o.(*v1alpha1.WorkerCluster)
		seen[wc.Name] = true
		kubeconfig, rf := m.readKubeconfig(ctx, wc)
		m.mu.Lock()
		w := m.workers[wc.Name]
		m.mu.Unlock()
		if rf != nil && rf.transient && w != nil {
			// The Secret could not be read this time (not refused, not missing): the
			// connection made from it stands.
			kubeconfig, rf = w.kubeconfig, nil
		}
		if rf != nil {
			if w != nil {
				w.stop()
				m.mu.Lock()
				delete(m.workers, wc.Name)
				m.mu.Unlock()
			}
			m.refuse(wc, *rf)
			m.writeStatus(ctx, wc, nil, rf, now)
			m.markDown(wc.Name, now)
			continue
		}
		if w == nil || w.kubeconfig != kubeconfig {
			if w != nil {
				w.stop()
			}
			nw, err := connect(wc.Name, kubeconfig, m.opts.Tweak)
			if err != nil {
				rf := refusal{reason: ReasonBadKubeconfig, message: err.Error()}
				m.refuse(wc, rf)
				m.writeStatus(ctx, wc, nil, &rf, now)
				m.mu.Lock()
				delete(m.workers, wc.Name)
				m.mu.Unlock()
				m.markDown(wc.Name, now)
				continue
			}
			nw.start(ctx)
			m.mu.Lock()
			m.workers[wc.Name] = nw
			delete(m.refused, wc.Name)
			m.mu.Unlock()
			w = nw
		}
		w.probe(ctx, now)
		m.writeStatus(ctx, wc, w, nil, now)
		if ok, _, _, _, _ := w.health(); ok {
			m.mu.Lock()
			delete(m.down, wc.Name)
			m.mu.Unlock()
		} else {
			m.markDown(wc.Name, now)
		}
	}
	m.mu.Lock()
	for n, w := range m.workers {
		if !seen[n] {
			w.stop()
			delete(m.workers, n)
		}
	}
	m.mu.Unlock()
}

// readKubeconfig reads the WorkerCluster's Secret.
func (m *Manager) readKubeconfig(ctx context.Context, wc *v1alpha1.WorkerCluster) (string, *refusal) {
	ref := wc.Spec.KubeconfigSecret
	key := ref.Key
	if key == "" {
		key = "kubeconfig"
	}
	s, err := m.client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", &refusal{reason: ReasonSecretMissing, message: fmt.Sprintf("worker cluster %s: Secret %s/%s (spec.kubeconfigSecret) does not exist", wc.Name, ref.Namespace, ref.Name)}
	}
	if err != nil {
		return "", &refusal{reason: ReasonSecretMissing, message: fmt.Sprintf("worker cluster %s: Secret %s/%s (spec.kubeconfigSecret) cannot be read: %v",
			wc.Name, ref.Namespace, ref.Name, err), transient: !apierrors.IsForbidden(err)}
	}
	data, ok := s.Data[key]
	if !ok {
		keys := make([]string, 0, len(s.Data))
		for k := range s.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return "", &refusal{reason: ReasonBadKubeconfig, message: fmt.Sprintf("worker cluster %s: Secret %s/%s has no key %q (spec.kubeconfigSecret.key); it has %v", wc.Name, ref.Namespace, ref.Name, key, keys)}
	}
	return string(data), nil
}

// refuse records why a WorkerCluster has no connection, with an Event the first time.
func (m *Manager) refuse(wc *v1alpha1.WorkerCluster, rf refusal) {
	m.mu.Lock()
	old, had := m.refused[wc.Name]
	m.refused[wc.Name] = rf
	m.mu.Unlock()
	if !had || old != rf {
		m.recorder.Event(wc, corev1.EventTypeWarning, rf.reason, rf.message)
		m.opts.Log.Warn("worker cluster refused", "cluster", wc.Name, "reason", rf.reason, "message", rf.message)
	}
}

// writeStatus writes the WorkerCluster's Ready condition and GPU counts when they change
// (and its lastSeen at most every 30 s).
func (m *Manager) writeStatus(ctx context.Context, wc *v1alpha1.WorkerCluster, w *worker, rf *refusal, now time.Time) {
	st := v1alpha1.WorkerClusterStatus{Conditions: slices.Clone(wc.Status.Conditions), LastSeen: wc.Status.LastSeen}
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, ObservedGeneration: wc.Generation}
	switch {
	case rf != nil:
		cond.Reason, cond.Message = rf.reason, rf.message
	default:
		ready, reason, msg, lastSeen, _ := w.health()
		cond.Reason, cond.Message = reason, msg
		if ready {
			cond.Status, cond.Message = metav1.ConditionTrue, "the manager reaches it"
			if w.isSynced() {
				st.Nodes, st.GPUs, st.FreeGPUs, st.Models = w.gpuSummary()
			}
		} else {
			st.Nodes, st.GPUs, st.FreeGPUs, st.Models = wc.Status.Nodes, wc.Status.GPUs, wc.Status.FreeGPUs, wc.Status.Models
		}
		if !lastSeen.IsZero() && (st.LastSeen == nil || lastSeen.Sub(st.LastSeen.Time) >= 30*time.Second) {
			st.LastSeen = &metav1.Time{Time: lastSeen}
		}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	key := fmt.Sprintf("%s|%s|%s|%d|%d|%d|%v|%v", cond.Status, cond.Reason, cond.Message, st.Nodes, st.GPUs, st.FreeGPUs, st.Models, st.LastSeen)
	m.mu.Lock()
	same := m.written[wc.Name] == key
	m.mu.Unlock()
	if same {
		return
	}
	cp := wc.DeepCopy()
	cp.Status = st
	if _, err := m.allot.AllotV1alpha1().WorkerClusters().UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		m.opts.Log.Warn("writing a worker cluster's status", "cluster", wc.Name, "err", err)
		return
	}
	m.mu.Lock()
	m.written[wc.Name] = key
	m.mu.Unlock()
}

// refusal is why a WorkerCluster has no connection; a transient one (the Secret could not
// be read this time) leaves a connection already made in place.
type refusal struct {
	reason, message string
	transient       bool
}

// markDown records since when the manager has not reached a cluster, the first time.
func (m *Manager) markDown(name string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.down[name]; !ok {
		m.down[name] = now
	}
}
