package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// The scheduler trusts an agent's reports only while the agent is alive: each agent renews
// a Lease of its own (v1alpha1.AgentLeaseName) every report interval, and the scheduler
// takes a node whose Lease has run out as one without an agent (it places fractions by
// index, and says so) rather than waiting forever for reports that will not come, as a
// permanent mark on the Node would have it do once the agent crashed or was uninstalled.

// leaseIntervals is how many report intervals a Lease lasts: a report or two may be late.
const leaseIntervals = 4

// probeState is what the agent's probes read: when the loop last ran, and whether the
// kubelet's PodResources API and the API server last answered.
type probeState struct {
	mu       sync.Mutex
	loopAt   time.Time
	problems map[string]string // by source; empty when all is well
}

func (h *probeState) set(source string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.problems == nil {
		h.problems = map[string]string{}
	}
	if err == nil {
		delete(h.problems, source)
	} else {
		h.problems[source] = err.Error()
	}
}

func (h *probeState) failing(source string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, bad := h.problems[source]
	return bad
}

func (h *probeState) tick(now time.Time) {
	h.mu.Lock()
	h.loopAt = now
	h.mu.Unlock()
}

// Live says whether the agent's loop ran within the given time (the liveness probe).
func (a *Agent) Live(within time.Duration) error {
	a.probes.mu.Lock()
	defer a.probes.mu.Unlock()
	if a.probes.loopAt.IsZero() {
		return nil // starting: the readiness probe says whether it got there
	}
	if since := a.opts.Now().Sub(a.probes.loopAt); since > within {
		return fmt.Errorf("the agent's loop last ran %s ago", since.Round(time.Second))
	}
	return nil
}

// Ready says whether the agent reports: its loop runs, and the kubelet and the API server
// answered last time (the readiness probe).
func (a *Agent) Ready() error {
	a.probes.mu.Lock()
	defer a.probes.mu.Unlock()
	if a.probes.loopAt.IsZero() {
		return errors.New("not reporting yet")
	}
	for src, p := range a.probes.problems {
		return fmt.Errorf("%s: %s", src, p)
	}
	return nil
}

// renewLease writes the agent's Lease: its node, its version, now, and the devices' last
// load (annotations AnnotationGPUUtilization and AnnotationGPUMemoryUsed, as the Node had
// them before).
func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(v1alpha1.SystemNamespace)
	name := v1alpha1.AgentLeaseName(a.opts.Node)
	now := metav1.NewMicroTime(a.opts.Now())
	secs := int32(leaseIntervals * a.opts.Interval / time.Second)
	holder := a.opts.Node + "/" + a.version()
	a.mu.Lock()
	load := a.load
	a.mu.Unlock()
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.SystemNamespace,
			Labels: map[string]string{v1alpha1.LabelAgentLease: a.opts.Node}, Annotations: load},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &secs, &now
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		for k, v := range load {
			l.Annotations[k] = v
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	a.probes.set("lease", err)
	if err != nil {
		return fmt.Errorf("agent lease %s/%s: %w", v1alpha1.SystemNamespace, name, err)
	}
	return nil
}

// CheckPodResources asks the kubelet's PodResources API once, and explains a refusal: the
// kubelet makes its socket's directory root's own with mode 0750, so an agent running as
// any other user (the image's nonroot user, 65532) cannot reach it.
func CheckPodResources(ctx context.Context, client podresourcesv1.PodResourcesListerClient, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err == nil {
		return nil
	}
	why := err.Error()
	if status.Code(err) == codes.Unavailable {
		if _, serr := os.Stat(socket); errors.Is(serr, os.ErrPermission) || isPermission(err) {
			why = fmt.Sprintf("permission denied as uid %d: the kubelet makes %s owned by root with mode 0750; run the agent as uid 0 (the chart does, with every capability dropped)",
				os.Getuid(), filepath.Dir(socket))
		} else if errors.Is(serr, os.ErrNotExist) {
			why = fmt.Sprintf("%s does not exist: is the kubelet's pod-resources directory mounted (the chart's agent.podResourcesPath)?", socket)
		}
	}
	return fmt.Errorf("the kubelet's PodResources API at %s: %s", socket, why)
}

func isPermission(err error) bool {
	return err != nil && (errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "permission denied"))
}
