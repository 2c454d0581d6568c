package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// queueBind hands a bind to the bind workers, counted as waiting until one takes it (the
// Event and status writers wait for those); false when ctx ended first.
func (s *Scheduler) queueBind(ctx context.Context, j bindJob) bool {
	s.bindsWaiting.Add(1)
	select {
	case s.binds <- j:
		return true
	case <-ctx.Done():
		s.bindsWaiting.Add(-1)
		return false
	}
}

// confirms tells whether a pod's new binding is one of ours the next cycle already counts.
func (s *Scheduler) confirms(p *corev1.Pod) bool {
	s.amu.Lock()
	defer s.amu.Unlock()
	b, ok := s.assumed[p.UID]
	return ok && string(b.Node) == p.Spec.NodeName
}

func (s *Scheduler) isAssumed(uid types.UID) bool {
	s.amu.Lock()
	defer s.amu.Unlock()
	_, ok := s.assumed[uid]
	return ok
}

type bindJob struct {
	p   *corev1.Pod
	b   engine.Binding
	env map[string]string // a shared GPU's environment, written before the bind
	// reservations name the reservations a held-back shared pod waited on (sharing.go),
	// one for each of its GPUs in the order of b.GPUs: their devices, once reported, are
	// the pod's, whichever indices the engine preferred.
	reservations []string
	// claimsWritten are the ResourceClaims allocated or reserved for the pod by this bind,
	// taken back if the bind fails (claimbind.go).
	claimsWritten []*resourceapi.ResourceClaim
	// planned is when the plan that placed it was applied: a held-back pod resumed since
	// was still where the engine counted it then (reservationFor).
	planned time.Time
}

// bindBackoff is how long a pod whose bind failed waits before the next try: short, since
// a gang member waiting here leaves its gang partly bound.
const bindBackoff = time.Second

// BindWorkers is how many binds are in flight at once. A bind is one round trip that the
// API server spends most of its time waiting on etcd for, so more in flight drain a
// backlog faster: with 2,000 pods waiting on the shared harness, 32 gave 473-614 pods/s,
// 128 500-666 and 256 477-756, while 1,024 overloaded that 2-core API server (300-376).
// 128 stays under kube-apiserver's default of 200 mutating requests in flight.
const BindWorkers = 128

// bindLoop issues binds until s.binds closes. A failed bind drops its assumption, so the
// pod is pending again at the next cycle.
func (s *Scheduler) bindLoop(ctx context.Context) {
	for j := range s.binds {
		s.bindsWaiting.Add(-1)
		err := s.bind(ctx, &j)
		if errors.Is(err, errAwaitingDevice) {
			continue // held, still assumed: resumeAwaiting binds it once the device is known
		}
		s.amu.Lock()
		delete(s.migAwaiting, j.p.UID) // bound, or failed: either way no longer held
		s.amu.Unlock()
		if len(j.reservations) > 0 {
			s.amu.Lock()
			delete(s.awaiting, j.p.UID) // its reservations are kept by the bound pod from now on
			s.amu.Unlock()
		}
		s.opts.Metrics.bindDone(err)
		if err == nil {
			s.scheduled(&j)
		} else if errors.Is(err, errBindUnknown) {
			// Kept booked where it was placed: were it bound there, freeing its GPUs now
			// would let the next cycle give them to another pod.
			s.recorder.Eventf(j.p, corev1.EventTypeWarning, "FailedBinding", "placed on %s; the API server's answer was lost and the pod could not be read: kept booked there for %s, unless seen bound", j.b.Node, bindUnknownHold)
			s.amu.Lock()
			s.unknownUntil[j.p.UID] = time.Now().Add(bindUnknownHold)
			s.amu.Unlock()
		} else if errors.Is(err, errNotLeader) {
			s.amu.Lock()
			delete(s.assumed, j.p.UID) // the new leader places it; nothing to report from here
			s.amu.Unlock()
		} else {
			if ctx.Err() == nil {
				slog.Warn("allot scheduler: bind", "pod", j.p.Name, "err", err)
			}
			s.recorder.Eventf(j.p, corev1.EventTypeWarning, "FailedBinding", "placed on %s but not bound: %v", j.b.Node, err)
			s.undoClaims(ctx, &j)
			s.amu.Lock()
			delete(s.assumed, j.p.UID)
			// Back off before binding it again: a bind that failed will likely fail again.
			s.backoff[j.p.UID] = time.Now().Add(bindBackoff)
			s.amu.Unlock()
		}
	}
}

// bind binds the pod to the node in one call; the API server copies the Binding's
// annotations onto the pod, so the device indices land with the node name. A pod sharing a
// GPU first gets the GPU's reservation and its ConfigMap, so that its container starts
// with the device and limits set.
// errNotLeader stops a bind from a replica that is not sure to hold the Lease.
var errNotLeader = errors.New("this replica is not sure to hold the Lease any more")

// leaderMark adds this replica's identity to a bind's or an eviction's annotations when
// replicas take turns, for the API server's fence (see fencePolicy).
func (s *Scheduler) leaderMark(ann map[string]string) map[string]string {
	if s.fence == nil {
		return ann
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[v1alpha1.AnnotationLeader] = s.opts.Identity
	return ann
}

func (s *Scheduler) bind(ctx context.Context, j *bindJob) error {
	p, b := j.p, j.b
	if !s.fence.ok() {
		return errNotLeader // before the reservation and the ConfigMap, too
	}
	claimed := len(p.Spec.ResourceClaims) > 0
	if claimed {
		// Its devices are its claims': allocated and reserved for it before it is bound,
		// as the kubelet prepares only such claims. A MIG part is a share of a GPU to the
		// books, but the driver hands it out: no reservation, no device environment.
		if err := s.allocateClaims(ctx, j); err != nil {
			return err
		}
		b = j.b
	}
	if b.MIG != "" && !claimed {
		// An instance Allot makes reaches the pod as a slice's device does: a pod admitted
		// without the webhook's entries would keep its image's devices (all of them).
		if p.Annotations[v1alpha1.AnnotationMIG] != "" && s.opts.RequireGPUEnv && !v1alpha1.HasGPUEnv(p) {
			return fmt.Errorf("the pod asks a MIG instance Allot makes but was admitted without Allot's webhook (its containers have no entries to read their device from): delete it and create it again while the webhook answers")
		}
		return s.bindMIG(ctx, j)
	}
	// The ConfigMap layout (allot.dev/gpu-configmap) is an earlier webhook's, honoured only on
	// a pod the API server created before the one-container layout: on a newer pod it was
	// written by its owner with the webhooks skipped, to a ConfigMap the owner may rewrite.
	oldConfigMap := p.Annotations[v1alpha1.AnnotationConfigMap] != "" && v1alpha1.CreatedBeforeOneContainerSlice(p)
	if b.Share > 0 && !claimed && s.opts.RequireGPUEnv && !v1alpha1.HasGPUEnv(p) && !oldConfigMap {
		return fmt.Errorf("the pod shares a GPU but was admitted without Allot's webhook, or by one older than this scheduler (its containers have no entries, or not the current ones, to read their device from): delete it and create it again while the webhook answers")
	}
	if b.Share > 0 && !claimed {
		if uuids, ok := s.agentUUIDs(b.Node); ok {
			// The devices are the ones its GPUs' reservations were really given.
			if err := s.placeOnReservation(ctx, j, uuids); err != nil {
				return err
			}
			b = j.b
		} else {
			if _, marked := s.nodeAnnotation(b.Node, v1alpha1.AnnotationAgent); marked {
				s.noteAgentMissing(p, b.Node)
			}
			for _, g := range b.GPUs {
				if err := s.ensureReservation(ctx, b.Node, g); err != nil {
					return err
				}
			}
		}
	}
	ann := map[string]string{AnnotationGPUs: formatIndices(b.GPUs)}
	if b.Share > 0 {
		ann[v1alpha1.AnnotationGPUShare] = strconv.Itoa(int(b.Share))
		// What is booked of each device, read back by the next cycle and a restarted
		// scheduler: the share alone would not say how much memory and compute.
		if b.Memory > 0 {
			ann[v1alpha1.AnnotationGPUShareMemory] = strconv.FormatInt(b.Memory, 10)
		}
		if b.Compute > 0 {
			ann[v1alpha1.AnnotationGPUShareCompute] = strconv.Itoa(int(b.Compute))
		}
		if j.env != nil {
			o, ok, _ := s.nodes.GetStore().GetByKey(string(b.Node))
			if !ok {
				return fmt.Errorf("node %s is gone", b.Node)
			}
			delivered, err := deliveryAnnotations(p, o.(*corev1.Node), j.env, s.opts.CDIKind)
			if err != nil {
				return err
			}
			for k, v := range delivered {
				ann[k] = v
			}
			if err := s.writeConfigMap(ctx, p, j.env); err != nil {
				return err
			}
		}
	}
	return s.writeBinding(ctx, p, b.Node, ann)
}

// writeBinding binds the pod to the node with the annotations, and finds out whether a
// bind whose answer was lost is in force.
func (s *Scheduler) writeBinding(ctx context.Context, p *corev1.Pod, node engine.NodeID, ann map[string]string) error {
	b := engine.Binding{Node: node}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, Annotations: s.leaderMark(ann)},
		Target: corev1.ObjectReference{Kind: "Node", Name: string(b.Node)}}
	if !s.fence.ok() {
		return errNotLeader
	}
	err := s.client.CoreV1().Pods(p.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if err == nil || !mayHaveLanded(err) || ctx.Err() != nil {
		return err
	}
	// The answer was lost, or says the pod is bound already (an earlier try whose answer
	// was lost): the pod itself says whether this bind is in force.
	switch s.bindLanded(ctx, p, b.Node) {
	case bindInForce:
		return nil
	case bindUnknown:
		return fmt.Errorf("%w: %v", errBindUnknown, err)
	}
	return err
}

// errBindUnknown is a bind whose answer was lost and whose pod could not be read after:
// it may be in force. Its pod stays booked where it was placed until the informer shows
// it bound, or for bindUnknownHold (bindLoop).
var errBindUnknown = errors.New("whether the bind landed is not known")

// bindUnknownHold is how long a pod whose bind may have landed stays booked on its node
// while the informer does not show it bound: the informer shows a landed bind well before.
const bindUnknownHold = 30 * time.Second

// mayHaveLanded tells whether a failed bind may still be in force: its answer never came
// (a timeout, a dropped connection), the server failed after it may have written it, or it
// says the pod is bound already.
func mayHaveLanded(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true // no answer from the server
	}
	code := st.Status().Code
	return code == http.StatusConflict || code >= http.StatusInternalServerError || code == 0
}

type bindOutcome int

const (
	bindNotInForce bindOutcome = iota
	bindInForce
	bindUnknown
)

// bindLanded reads the pod from the API server (not the informer, which may lag) to tell
// whether it is bound to node, the same pod as was bound; a few tries, backing off.
func (s *Scheduler) bindLanded(ctx context.Context, p *corev1.Pod, node engine.NodeID) bindOutcome {
	wait := 200 * time.Millisecond
	for try := 0; try < 4 && ctx.Err() == nil; try++ {
		cur, err := s.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return bindNotInForce
		case err == nil && cur.UID != p.UID:
			return bindNotInForce // another pod of the same name
		case err == nil && cur.Spec.NodeName == string(node):
			return bindInForce
		case err == nil:
			return bindNotInForce // unbound, or bound elsewhere by someone else
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 2
	}
	return bindUnknown
}
