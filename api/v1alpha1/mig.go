package v1alpha1

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// MIG: a GPU in MIG mode is given out as instances. On a node whose MIG layout an admin
// (or the GPU Operator's MIG manager) made, the NVIDIA device plugin's mixed strategy
// advertises one extended resource per profile (nvidia.com/mig-1g.10gb), and a pod asks
// for it by that resource; the kubelet hands over the instance. On a node an admin marks
// LabelMIGDynamic, Allot lays instances out itself: a pod asks with AnnotationMIG, the
// node's agent creates the instance the scheduler chose, and the scheduler delivers it as
// it delivers a fraction's device.
const (
	// MIGResourcePrefix begins the device plugin's per-profile MIG resources.
	MIGResourcePrefix = "nvidia.com/mig-"
	// LabelMIGDynamic on a node ("true") lets Allot lay out its GPUs in MIG mode.
	LabelMIGDynamic = "allot.dev/mig-dynamic"
	// AnnotationMIG on a pod asks for a MIG instance laid out by Allot: a profile
	// ("3g.40gb"), or MIGSmallest for the smallest profile holding the pod's
	// allot.dev/gpu-fraction or gpu-memory. The owner writes it at creation; it is fixed after.
	AnnotationMIG = "allot.dev/mig"
	// AnnotationMIGInstances on a bound pod is where the scheduler booked its instances:
	// "<GPU UUID or index>@<first memory slice>", comma-separated, one per instance.
	AnnotationMIGInstances = "allot.dev/mig-instances"
	// MIGSmallest is AnnotationMIG's value for the smallest profile holding the slice.
	MIGSmallest = "smallest"
)

// MIGResources reads the MIG instances a pod asks of the device plugin: the profile and
// how many (PodAmount: init containers and sidecars count as the kubelet allocates them).
// A pod asking two profiles is refused: one pod's instances are of one profile.
func MIGResources(p *corev1.Pod) (profile string, count int64, err error) {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				for name, q := range list {
					prof, ok := strings.CutPrefix(string(name), MIGResourcePrefix)
					if !ok || q.Value() <= 0 {
						continue
					}
					if profile != "" && profile != prof {
						return "", 0, fmt.Errorf("asks MIG instances of two profiles (%s%s and %s%s): a pod's instances are of one profile", MIGResourcePrefix, profile, MIGResourcePrefix, prof)
					}
					profile = prof
				}
			}
		}
	}
	if profile == "" {
		return "", 0, nil
	}
	count = PodAmount(p, func(c *corev1.Container) int64 {
		return ContainerAsks(c, corev1.ResourceName(MIGResourcePrefix+profile))
	})
	return profile, min(count, 64), nil
}

// MIGProfiles lists the MIG profiles a node's device plugin advertises, with how many
// instances of each it has, in name order.
func MIGProfiles(n *corev1.Node) (names []string, counts map[string]int64) {
	counts = map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if prof, ok := strings.CutPrefix(string(name), MIGResourcePrefix); ok && q.Value() > 0 {
			counts[prof] = min(q.Value(), 64)
			names = append(names, prof)
		}
	}
	slices.Sort(names)
	return names, counts
}

// AnnotationMIGWanted on a node is the MIG instances the scheduler wants its agent to make
// (JSON, []MIGWish): placements on the node's devices that Allot lays out, for pods the
// scheduler placed there and holds until the instance is reported in the inventory. The
// agent makes them, destroying only idle instances in their way, and reports the result in
// AnnotationGPUInventory; what it could not make it tries again each interval. A wish is
// taken off when its pod waits no more (bound, deleted, given up on). Only the scheduler
// writes it (node objects are an admin's).
const AnnotationMIGWanted = "allot.dev/mig-wanted"

// MIGWish is one instance the scheduler wants made. It is no API object (the scheduler
// writes a list of them as a Node annotation), so it has no generated deep copy.
// +kubebuilder:object:generate=false
type MIGWish struct {
	GPU     string `json:"gpu"` // the device's UUID
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	// Pod is the pod (namespace/name) the instance is for, and Since when it was wanted:
	// a wish no pod waits on any more is dropped by the scheduler.
	Pod   string    `json:"pod"`
	Since time.Time `json:"since"`
}

// ParseMIGWishes reads a node's AnnotationMIGWanted; an empty value is no wish.
func ParseMIGWishes(s string) ([]MIGWish, error) {
	if s == "" {
		return nil, nil
	}
	var out []MIGWish
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("%s: %v", AnnotationMIGWanted, err)
	}
	return out, nil
}
