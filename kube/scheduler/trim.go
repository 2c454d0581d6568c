package scheduler

import (
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/stores"
)

// Trimming other schedulers' pods. On a busy cluster most pods are another scheduler's
// (137,500 of 140,000 in the restart scenario), and the pod informer held them whole: their
// containers' images, commands and environment, their mounted token and config volumes,
// their containers' states, which nothing in the scheduler reads. What it does read of such
// a pod is where it runs and what it holds there (node usage, devices, host ports, volumes
// that conflict), what other pods' affinity and spread match against (labels, namespace)
// and its own anti-affinity, which kube-scheduler's plugins hold against Allot's pods.
// trimPod keeps that and drops the rest; TestTrimmedPodsScheduleAlike holds the list to
// every read, through the snapshot, the node room and kube-scheduler's plugins.
//
// Allot's own pods, and every pod of the system namespace (reservations), stay whole: the
// scheduler writes their status and reads them as a whole. The pod informer's factory is
// made in start and shared only with kube-scheduler's plugins that the scheduler runs
// (podfit, DRA), which read other pods for what is kept here; VolumeBinding's one read of
// pods (at PreBind, off) would be of Allot's own, untrimmed pod. No other part of the
// process (idle controller, metrics API, dashboard) sees the trimmed pods.

// trimObject is the informers' transform: managed fields dropped from every object, and
// other schedulers' pods trimmed to what the scheduler reads of them.
//
// A pod already trimmed is given back as it is. client-go applies the transform twice to
// the objects of a streamed initial list: as each arrives, into the list's own store, and
// again as the whole list enters the informer's queue (RealFIFO.Replace). Trimmed twice,
// every pod was copied twice, and at the moment the list was handed over both copies were
// live: at a restart on 140,000 pods, about 250 MB more at the process's peak.
func trimObject(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.SchedulerName != SchedulerName && p.Namespace != v1alpha1.SystemNamespace {
		if p.SelfLink == trimmedMark {
			return p, nil
		}
		return trimPod(p), nil
	}
	return stores.DropManagedFields(obj)
}

// trimmedMark marks the pods trimPod made, in the one field of a pod that nothing reads and
// the API server no longer fills: selfLink (gone since Kubernetes 1.20; the server clears
// whatever a client writes there before storing the object), so no pod from the API server
// carries it.
const trimmedMark = "allot.dev/trimmed"

// trimPod is another scheduler's pod with only the fields the scheduler reads.
func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			SelfLink: trimmedMark,
			Name:     p.Name, Namespace: unique.Make(p.Namespace).Value(), UID: p.UID, ResourceVersion: p.ResourceVersion, Generation: p.Generation,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
			Labels:                     shared.labels(p.Labels), OwnerReferences: shared.owners(p.OwnerReferences),
			Annotations: readAnnotations(p.Annotations),
		},
		Spec: corev1.PodSpec{
			NodeName: unique.Make(p.Spec.NodeName).Value(), SchedulerName: unique.Make(p.Spec.SchedulerName).Value(),
			NodeSelector: shared.labels(p.Spec.NodeSelector),
			Affinity:     p.Spec.Affinity, Priority: p.Spec.Priority, Overhead: p.Spec.Overhead, Resources: p.Spec.Resources,
			ResourceClaims: p.Spec.ResourceClaims, HostNetwork: p.Spec.HostNetwork,
			Containers: trimContainers(p.Spec.Containers), InitContainers: trimContainers(p.Spec.InitContainers),
			Volumes: trimVolumes(p.Spec.Volumes),
		},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, StartTime: p.Status.StartTime, Resize: p.Status.Resize,
			// Pod-level resources as resized (read by kube-scheduler's resource helpers
			// under InPlacePodLevelResourcesVerticalScaling): nil on nearly every pod.
			Resources: p.Status.Resources, AllocatedResources: p.Status.AllocatedResources,
			ContainerStatuses:     trimStatuses(p.Status.ContainerStatuses),
			InitContainerStatuses: trimStatuses(p.Status.InitContainerStatuses),
			ResourceClaimStatuses: p.Status.ResourceClaimStatuses,
		},
	}
	for _, c := range p.Status.Conditions {
		// A DisruptionTarget says the pod leaves by eviction; a resize's conditions say
		// which of its resources count (kube-scheduler's resource helpers read the reason).
		// The others (ready, initialized, scheduled…) are the kubelet's news.
		if c.Type == corev1.DisruptionTarget || strings.HasPrefix(string(c.Type), "PodResize") {
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	return out
}

// readAnnotations are the annotations the scheduler reads of a pod: Allot's (the devices it
// was given, recorded by the node's agent) and NVIDIA's device annotations; nil if none.
func readAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if !strings.Contains(k, "allot.dev/") && !strings.HasPrefix(k, "nvidia.cdi.k8s.io/") {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// trimContainers keeps what a container holds: its resources, its host ports and, for an
// init container, whether it is a sidecar (it then holds its resources beside the others).
func trimContainers(in []corev1.Container) []corev1.Container {
	if in == nil {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: unique.Make(c.Name).Value(), RestartPolicy: c.RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: shared.resources(c.Resources.Requests),
				Limits: shared.resources(c.Resources.Limits), Claims: c.Resources.Claims}}
		for _, port := range c.Ports {
			if port.HostPort != 0 {
				out[i].Ports = append(out[i].Ports, port)
			}
		}
	}
	return out
}

// trimStatuses keeps what a resized container holds (kube-scheduler counts it).
func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range in {
		if c.Resources == nil && c.AllocatedResources == nil {
			continue
		}
		out = append(out, corev1.ContainerStatus{Name: c.Name, Resources: c.Resources, AllocatedResources: c.AllocatedResources})
	}
	return out
}

// trimVolumes drops the volumes only the kubelet reads (a pod's token, its config and
// secrets, its scratch space): the rest are claims and disks kube-scheduler's volume
// plugins hold against other pods on the node.
func trimVolumes(in []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range in {
		s := v.VolumeSource
		if s.Projected != nil || s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.EmptyDir != nil {
			continue
		}
		out = append(out, v)
	}
	return out
}
