package idle

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// Device is one GPU of one node, by its index there.
type Device struct {
	Node  string
	Index int
}

// Readings are the GPUs' utilisation, in percent, as the nodes' agents last reported it.
// A device not in the map is one whose utilisation is not known: no agent on its node, an
// agent that stopped renewing its Lease (its last report is stale), or a report that is
// not one percentage per device.
type Readings map[Device]int

// add puts a node's live report (inspect.Utilization) in r: each device's percentage, a
// device its agent could not read (-1) left out alone, so that it is unknown, never idle.
func (r Readings) add(node string, got []int) {
	for i, u := range got {
		if u != unread {
			r[Device{Node: node, Index: i}] = u
		}
	}
}

// unread is the utilisation an agent writes for a device it could not read: that device
// is unknown, the others' readings stand.
const unread = convert.UtilizationUnread

// PodDevices are the GPUs a running pod holds, by index on its node: those its agent
// recorded the kubelet gave it (uuids is the node's device list by index), else those the
// scheduler bound it to (allot.dev/gpu-indices; for a share of a GPU that is the device its
// reservation holds). Both annotations are written by Allot only (the pod-fields policy
// keeps tenants off them). A pod holding GPUs Allot does not know by index (MIG instances,
// DRA claims) gives ok false: its GPUs are unknown.
func PodDevices(p *corev1.Pod, uuids []string) (devs []Device, ok bool) {
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return nil, true // holds nothing now
	}
	if p.Annotations[v1alpha1.AnnotationMIGInstances] != "" {
		return nil, false
	}
	indices, _ := v1alpha1.HeldGPUs(p)
	_, shared := p.Annotations[v1alpha1.AnnotationGPUShare]
	if rec := p.Annotations[v1alpha1.AnnotationGPUDevices]; rec != "" && !shared && len(uuids) > 0 {
		indices = indices[:0]
		for _, u := range strings.Split(rec, ",") {
			i := slices.Index(uuids, strings.TrimSpace(u))
			if i < 0 {
				return nil, false
			}
			indices = append(indices, i)
		}
	}
	if len(indices) == 0 && len(p.Spec.ResourceClaims) > 0 {
		return nil, false
	}
	for _, i := range indices {
		devs = append(devs, Device{Node: p.Spec.NodeName, Index: i})
	}
	return devs, true
}

// State is what one look at a workload's GPUs found.
type State int

const (
	// NoGPUs: the workload holds no GPU now (pending, suspended, or asks for none).
	NoGPUs State = iota
	// Busy: at least one of its GPUs is at or above the threshold.
	Busy
	// Unknown: at least one of its GPUs has no live report; unknown is never idle.
	Unknown
	// Idle: every GPU it holds was reported under the threshold.
	Idle
)

// Judge looks at the devices a workload's pods hold. A device is judged whole: a GPU
// shared by several pods reads as the sum of their work, so a share whose neighbour keeps
// the device busy is not idle. Utilisation is not reported per pod, and taking work away
// from a pod that might be the busy one is worse than leaving an idle share alone; where
// the whole device is idle, every pod on it is.
func Judge(r Readings, devs []Device, known bool, threshold int) State {
	if !known {
		return Unknown
	}
	if len(devs) == 0 {
		return NoGPUs
	}
	unknown := false
	for _, d := range devs {
		u, ok := r[d]
		switch {
		case !ok:
			unknown = true
		case u >= threshold:
			return Busy
		}
	}
	if unknown {
		return Unknown
	}
	return Idle
}

// Tracker remembers, per workload, since when its GPUs have been idle: from the first look
// that found them all under the threshold, with none since finding one above it, or one
// unknown, or none held. It is in memory only: a new leader starts every clock again,
// which can only stop work later, never sooner.
type Tracker struct {
	since map[string]time.Time
}

// NewTracker makes an empty tracker.
func NewTracker() *Tracker { return &Tracker{since: map[string]time.Time{}} }

// Observe records what a look at now found for the workload key and returns how long it has
// been idle (zero when it is not idle).
func (t *Tracker) Observe(key string, s State, now time.Time) time.Duration {
	if s != Idle {
		delete(t.since, key)
		return 0
	}
	since, ok := t.since[key]
	if !ok {
		t.since[key] = now
		return 0
	}
	return now.Sub(since)
}

// Since is when the workload's idle spell began; false when it is not idle.
func (t *Tracker) Since(key string) (time.Time, bool) {
	s, ok := t.since[key]
	return s, ok
}

// Keep forgets every workload not in live (deleted ones).
func (t *Tracker) Keep(live map[string]bool) {
	for k := range t.since {
		if !live[k] {
			delete(t.since, k)
		}
	}
}
