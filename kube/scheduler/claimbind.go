package scheduler

// The claim stage of a bind: before a pod with ResourceClaims is bound, its claims are
// allocated on the node the engine chose, with kube-scheduler's structured allocator, and
// written as kube-scheduler writes them: the delete-protection finalizer first, then
// status.allocation and status.reservedFor in one status update. The kubelet prepares
// only claims allocated and reserved for the pod, so a pod is never bound with a claim
// that is not. Allocations are made one pod at a time (dmu), against every allocation the
// API server holds and every one this scheduler made that the informer has not shown yet,
// so that no device is allocated twice.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/dra"
)

// assumedClaim is a claim this scheduler wrote, until the informer shows that write (or
// a later one) or claimAssumeFor passes.
type assumedClaim struct {
	claim *resourceapi.ResourceClaim
	at    time.Time
}

const claimAssumeFor = 30 * time.Second

// claimsNow is every claim as this scheduler knows it: the informer's, with its own writes
// the informer has not caught up with over them.
func (s *Scheduler) claimsNow() map[string]*resourceapi.ResourceClaim {
	s.camu.Lock()
	defer s.camu.Unlock()
	out := map[string]*resourceapi.ResourceClaim{}
	if s.draClaims == nil {
		return out
	}
	for _, o := range s.draClaims.GetStore().List() {
		c := o.(*resourceapi.ResourceClaim)
		out[claimKey(c)] = c
	}
	for uid, a := range s.claimsAssumed {
		c, ok := out[claimKey(a.claim)]
		switch {
		case ok && c.UID != a.claim.UID, !ok && time.Since(a.at) > time.Second:
			delete(s.claimsAssumed, uid) // deleted, or replaced by another of that name
		case ok && (newerOrSame(c, a.claim) || time.Since(a.at) > claimAssumeFor):
			delete(s.claimsAssumed, uid) // the informer has it
		default:
			out[claimKey(a.claim)] = a.claim
		}
	}
	return out
}

// newerOrSame compares resource versions, which the API server gives as increasing
// integers (etcd revisions); anything else is taken as not newer.
func newerOrSame(c, than *resourceapi.ResourceClaim) bool {
	var a, b uint64
	if _, err := fmt.Sscan(c.ResourceVersion, &a); err != nil {
		return false
	}
	if _, err := fmt.Sscan(than.ResourceVersion, &b); err != nil {
		return false
	}
	return a >= b
}

// allocateClaims allocates and reserves a pod's claims on the bind's node and sets the
// bind's GPUs to the devices they hold there. The engine's choice of GPUs is tried first.
func (s *Scheduler) allocateClaims(ctx context.Context, j *bindJob) error {
	d := s.draNow()
	if d == nil {
		return fmt.Errorf("the pod has ResourceClaims and the API server serves no resource.k8s.io/v1")
	}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	claims := s.claimsNow()
	lookup := func(ns, name string) *resourceapi.ResourceClaim { return claims[ns+"/"+name] }
	p := j.p
	mine, problem := dra.PodClaims(p, lookup)
	if problem != "" {
		return fmt.Errorf("%s", problem)
	}
	node := d.nodes[string(j.b.Node)]
	if node == nil {
		return fmt.Errorf("node %s is gone", j.b.Node)
	}
	var open []*resourceapi.ResourceClaim
	for _, c := range mine {
		if c.Status.Allocation == nil {
			open = append(open, c)
		} else if on := dra.AllocatedNode(c); on != "" && on != node.Name {
			return fmt.Errorf("ResourceClaim %s is allocated on %s, not %s", c.Name, on, node.Name)
		}
	}
	all := make([]*resourceapi.ResourceClaim, 0, len(claims))
	for _, c := range claims {
		all = append(all, c)
	}
	var prefer []structured.DeviceID
	devs := d.inv.NodeGPUs(node.Name)
	for _, g := range j.b.GPUs {
		if j.b.Share > 0 {
			// A part: a MIG device of the GPU the engine chose, or memory of it.
			for _, p := range d.inv.Parts(node.Name) {
				if p.Index == g {
					prefer = append(prefer, p.ID)
				}
			}
		}
		if g < len(devs) && devs[g].ID != (structured.DeviceID{}) {
			prefer = append(prefer, devs[g].ID)
		}
	}
	results, err := d.inv.Allocate(ctx, d.features, d.classes, dra.NewState(all), node, open, prefer)
	if err != nil {
		return fmt.Errorf("allocating its ResourceClaims on %s: %w", node.Name, err)
	}
	booked := len(j.b.GPUs)
	var written []*resourceapi.ResourceClaim
	undo := func() {
		for _, c := range written {
			s.unreserve(ctx, c, p.UID)
		}
	}
	gpus := []int{}
	for i, c := range mine {
		var alloc *resourceapi.AllocationResult
		if k := slices.Index(open, c); k >= 0 {
			alloc = &results[k]
		}
		if alloc == nil && resourceclaim.IsReservedForPod(p, c) {
			continue
		}
		out, err := s.reserve(ctx, c, p, alloc)
		if err != nil {
			undo()
			return fmt.Errorf("ResourceClaim %s: %w", c.Name, err)
		}
		written = append(written, out)
		s.assumeClaim(out)
		mine[i] = out
	}
	// The pod's GPUs are those of the claims it alone holds; a claim shared with a pod
	// running already is that pod's in the books.
	share := 0
	for _, c := range mine {
		if len(c.Status.ReservedFor) != 1 {
			continue
		}
		g, sh := d.held(c, node.Name)
		gpus = append(gpus, g...)
		share += sh
	}
	if share == 0 && j.b.Share == 0 && len(gpus) > booked {
		// The books hold fewer (a claim counted by a choice it was not given): taking
		// more would take GPUs placed for others.
		undo()
		return fmt.Errorf("its ResourceClaims were given %d GPUs on %s, %d were booked for it: taken back", len(gpus), node.Name, booked)
	}
	j.b.GPUs, j.b.Share = gpus, 0
	if share > 0 && len(gpus) == 1 {
		j.b.Share = engine.MilliGPU(min(share, 999))
	}
	j.claimsWritten = written
	s.amu.Lock()
	if _, ok := s.assumed[p.UID]; ok {
		s.assumed[p.UID] = j.b
	}
	s.amu.Unlock()
	return nil
}

func (s *Scheduler) assumeClaim(c *resourceapi.ResourceClaim) {
	s.camu.Lock()
	s.claimsAssumed[c.UID] = assumedClaim{c, time.Now()}
	s.camu.Unlock()
}

// reserve writes a claim for a pod: the finalizer, then the allocation (when alloc is
// set) and the pod in reservedFor, as kube-scheduler does.
func (s *Scheduler) reserve(ctx context.Context, c *resourceapi.ResourceClaim, p *corev1.Pod, alloc *resourceapi.AllocationResult) (*resourceapi.ResourceClaim, error) {
	// Checked before each write, as before a bind: a replica paused past its Lease must
	// not allocate what the new leader may have given away meanwhile. (The API server's
	// fence policy covers binds and evictions; a claim's status carries no leader mark, so
	// a write already on its way when the pause began is not refused.)
	if !s.fence.ok() {
		return nil, errNotLeader
	}
	c = c.DeepCopy()
	api := s.client.ResourceV1().ResourceClaims(c.Namespace)
	if alloc != nil && !slices.Contains(c.Finalizers, resourceapi.Finalizer) {
		c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
		out, err := api.Update(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("adding finalizer %s: %w", resourceapi.Finalizer, err)
		}
		c = out
	}
	if alloc != nil {
		c.Status.Allocation = alloc
	}
	if !s.fence.ok() {
		return nil, errNotLeader
	}
	c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	out, err := api.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil && mayHaveLanded(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		// The answer was lost, or the server failed after it may have written it: the
		// claim itself says whether the write is in force, before its devices could be
		// given to another claim.
		if now, gerr := api.Get(ctx, c.Name, metav1.GetOptions{}); gerr == nil && now.UID == c.UID &&
			resourceclaim.IsReservedForPod(p, now) && (alloc == nil || now.Status.Allocation != nil) {
			return now, nil
		} else if gerr != nil {
			// Not known: held as written until the informer shows any later version of
			// the claim (resource versions grow), so that its devices are not allocated
			// twice meanwhile.
			if rv, perr := strconv.ParseUint(c.ResourceVersion, 10, 64); perr == nil {
				held := c.DeepCopy()
				held.ResourceVersion = strconv.FormatUint(rv+1, 10)
				s.assumeClaim(held)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("writing its allocation: %w", err)
	}
	return out, nil
}

// unreserve takes a pod whose bind failed back out of a claim it was reserved for, and
// frees the claim when no one else holds it, so that its devices are not held by a pod
// that is not running.
func (s *Scheduler) unreserve(ctx context.Context, c *resourceapi.ResourceClaim, uid types.UID) {
	api := s.client.ResourceV1().ResourceClaims(c.Namespace)
	for try := 0; try < 3 && s.fence.ok(); try++ {
		c = c.DeepCopy()
		c.Status.ReservedFor = slices.DeleteFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == uid })
		if len(c.Status.ReservedFor) == 0 {
			c.Status.Allocation = nil
		}
		out, err := api.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err == nil {
			s.assumeClaim(out)
			return
		}
		if !apierrors.IsConflict(err) {
			return // the resource claim controller frees it once the pod is gone
		}
		if c, err = api.Get(ctx, c.Name, metav1.GetOptions{}); err != nil {
			return
		}
	}
}

// undoClaims is unreserve for every claim a failed bind wrote.
func (s *Scheduler) undoClaims(ctx context.Context, j *bindJob) {
	if len(j.claimsWritten) == 0 {
		return
	}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	for _, c := range j.claimsWritten {
		s.unreserve(ctx, c, j.p.UID)
	}
}

// freeStale takes pods out of claims allocated for them on nodes that are gone or cordoned,
// freeing the claims no other pod holds, so that they can be allocated where the pods can
// run (kube-scheduler's PostFilter does the same for a pod it cannot place).
func (s *Scheduler) freeStale(ctx context.Context, d *draCycle) {
	if d == nil || len(d.stale) == 0 {
		return
	}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	for _, st := range d.stale {
		s.unreserve(ctx, st.claim, st.pod)
	}
}
