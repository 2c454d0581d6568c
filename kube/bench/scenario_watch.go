package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// podState is a moment in a Scenario pod's life that the bench times.
type podState int

const (
	podBound       podState = iota // its binding stored
	podTerminating                 // its deletion (an eviction) asked
	podGone                        // removed, its containers stopped
	podRunning                     // started by the simulated kubelet
	podStopped                     // its containers stopped (Failed or Succeeded), its devices free
	numPodStates
)

// podLog keeps, for each role of the scenario's pods, when each pod reached each state, as
// etcd stored it: a watch through the API server is closed when it falls behind, and a
// Scenario makes tens of thousands of changes a minute (see storedPods).
type podLog struct {
	mu sync.Mutex
	// at[role][state][pod] is the first time the pod was seen in the state.
	at map[string]*[numPodStates]map[string]time.Time
}

// watchPods watches the pods of namespace default in etcd from now on, until ctx ends.
func watchPods(ctx context.Context, store *clientv3.Client) (*podLog, error) {
	now, err := store.Get(ctx, podsKey, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("reading the pods' revision in etcd: %w", err)
	}
	l := &podLog{at: map[string]*[numPodStates]map[string]time.Time{}}
	decoder := scheme.Codecs.UniversalDeserializer()
	decode := func(b []byte) *corev1.Pod {
		if obj, _, err := decoder.Decode(b, nil, nil); err == nil {
			if p, ok := obj.(*corev1.Pod); ok {
				return p
			}
		}
		return nil
	}
	w := store.Watch(ctx, podsKey, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(now.Header.Revision+1))
	go func() {
		for resp := range w {
			seen := time.Now()
			for _, ev := range resp.Events {
				switch ev.Type {
				case mvccpb.PUT:
					if p := decode(ev.Kv.Value); p != nil {
						if p.Spec.NodeName != "" {
							l.mark(p, podBound, seen)
						}
						if p.DeletionTimestamp != nil {
							l.mark(p, podTerminating, seen)
						}
						if p.Status.Phase == corev1.PodRunning {
							l.mark(p, podRunning, seen)
						}
						if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
							l.mark(p, podStopped, seen)
						}
					}
				case mvccpb.DELETE:
					if ev.PrevKv != nil {
						if p := decode(ev.PrevKv.Value); p != nil {
							l.mark(p, podGone, seen)
						}
					}
				}
			}
		}
	}()
	return l, nil
}

func (l *podLog) mark(p *corev1.Pod, s podState, at time.Time) {
	role := p.Labels[labelRole]
	if role == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.at[role]
	if r == nil {
		r = &[numPodStates]map[string]time.Time{}
		for i := range r {
			r[i] = map[string]time.Time{}
		}
		l.at[role] = r
	}
	if _, ok := r[s][p.Name]; !ok {
		r[s][p.Name] = at
	}
}

// count is how many pods of the role have reached the state.
func (l *podLog) count(role string, s podState) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.at[role]; r != nil {
		return len(r[s])
	}
	return 0
}

// span gives the first and last time a pod of the role reached the state, and how many did.
func (l *podLog) span(role string, s podState) (first, last time.Time, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.at[role]
	if r == nil {
		return first, last, 0
	}
	for _, t := range r[s] {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return first, last, len(r[s])
}

// when gives the time the pod of the role reached the state, if it did.
func (l *podLog) when(role, name string, s podState) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.at[role]; r != nil {
		t, ok := r[s][name]
		return t, ok
	}
	return time.Time{}, false
}

// lastStopped is when the last pod of the role to stop did: each pod's stop, or its removal
// where no stop was stored first. A kubelet frees a stopped pod's devices before the pod is
// removed, so a rebind may come between the two.
func (l *podLog) lastStopped(role string) (last time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.at[role]
	if r == nil {
		return last
	}
	for name, gone := range r[podGone] {
		at := gone
		if stopped, ok := r[podStopped][name]; ok && stopped.Before(gone) {
			at = stopped
		}
		if at.After(last) {
			last = at
		}
	}
	return last
}
