package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// decodePod is the pod of an admission request, in the request's namespace where the pod
// names none (a pod made by a controller, before the API server fills it in).
func decodePod(req admission.Request) (corev1.Pod, error) {
	var p corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
		return p, err
	}
	if p.Namespace == "" {
		p.Namespace = req.Namespace
	}
	return p, nil
}

// Validator refuses pods that could never run as asked.
type Validator struct {
	View View
	// Accelerators are the kinds of other vendors' devices the scheduler schedules (nil:
	// NVIDIA's GPUs only).
	Accelerators *convert.Accelerators
	// Peers says what becomes of other schedulers' GPU pods in tenants' namespaces (the
	// mutating webhook's, checked again here).
	Peers Peers
	// SharingRoot is the Mutator's: the host directory its sharing volumes mount, which a
	// queue's rule for node paths lets through (hostpaths.go).
	SharingRoot string
}

// Handle implements admission.Handler.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	p, err := decodePod(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if req.SubResource == "" {
		if err := v.Peers.checkForeign(&p, v.View); err != nil {
			return admission.Denied(err.Error())
		}
	}
	if req.SubResource == "ephemeralcontainers" {
		// kubectl debug adds a container to a running pod: its environment is held to
		// what the pod's own containers are.
		if err := ValidateEphemeral(&p); err != nil {
			return admission.Denied(err.Error())
		}
		return admission.Allowed("")
	}
	if err := ValidatePod(&p, v.View, v.Accelerators); err != nil {
		return admission.Denied(err.Error())
	}
	if err := QueueRulesAllowed(&p, v.View, v.SharingRoot); err != nil {
		return admission.Denied(err.Error())
	}
	return admission.Allowed("")
}

// ValidateEphemeral checks the ephemeral containers of a running pod scheduled by Allot
// (added through pods/ephemeralcontainers, as kubectl debug does) as its containers were
// checked at admission.
func ValidateEphemeral(p *corev1.Pod) error {
	if !subject(p) {
		return nil
	}
	if err := checkSharingMounts(p, true); err != nil {
		return err
	}
	share, _ := v1alpha1.ParseGPUShare(p.Annotations)
	only := p.DeepCopy()
	only.Spec.InitContainers, only.Spec.Containers = nil, nil
	if guardsEnv(p, share) {
		return checkEnv(only)
	}
	for _, e := range p.Spec.EphemeralContainers {
		only.Spec.Containers = append(only.Spec.Containers, corev1.Container(e.EphemeralContainerCommon))
	}
	return checkWholeGPUEnv(only)
}

// checkSharingMounts refuses a pod in which a container mounts Allot's sharing volumes
// (the host's sharing root and its shm directory) other than as the mutating webhook
// mounts them: an init or ephemeral container mounting them at all, or a container
// mounting the root whole or writable, would reach every GPU's MPS daemon, every pod's
// shared memory and the library every sharing pod preloads.
func checkSharingMounts(p *corev1.Pod, ephemeralOnly bool) error {
	webhook := func(m corev1.VolumeMount) bool {
		switch m.Name {
		case sharingVolume:
			return m.ReadOnly && ((m.SubPath == "hami-core" || m.SubPath == v1alpha1.PreloadListPath) && m.SubPathExpr == "" ||
				m.SubPath == "" && m.SubPathExpr == "$("+mpsDirEnv+")")
		case shmVolume:
			return m.SubPath == "" && m.SubPathExpr == "$("+shmDirEnv+")"
		}
		return true
	}
	check := func(kind, name string, mounts []corev1.VolumeMount, none bool) error {
		for _, m := range mounts {
			if m.Name != sharingVolume && m.Name != shmVolume {
				continue
			}
			if none || !webhook(m) {
				return fmt.Errorf("%s[%s].volumeMounts: volume %s is Allot's (the host's GPU sharing directory), mounted by its webhook alone: remove the mount", kind, name, m.Name)
			}
		}
		return nil
	}
	for _, c := range p.Spec.EphemeralContainers {
		if err := check("ephemeralContainers", c.Name, c.VolumeMounts, true); err != nil {
			return err
		}
	}
	if ephemeralOnly {
		return nil // a running pod's own containers are as they were admitted
	}
	for _, c := range p.Spec.InitContainers {
		if err := check("initContainers", c.Name, c.VolumeMounts, true); err != nil {
			return err
		}
	}
	for _, c := range p.Spec.Containers {
		if err := check("containers", c.Name, c.VolumeMounts, false); err != nil {
			return err
		}
	}
	return nil
}

// ValidatePod checks a pod scheduled by Allot against the cluster: its sharing annotations,
// the kind of device it asks for (kinds: the scheduler's table of other vendors' kinds),
// its queue and its gang.
func ValidatePod(p *corev1.Pod, view View, kinds *convert.Accelerators) error {
	if !subject(p) {
		return nil
	}
	if msg := v1alpha1.ResourceClaimsProblem(p); msg != "" {
		return errors.New(msg)
	}
	if err := checkSharingMounts(p, false); err != nil {
		return err
	}
	if notes, err := untranslated(p, kinds); err != nil {
		return err
	} else if notes != "" {
		return fmt.Errorf("another scheduler's names were not translated by Allot's mutating webhook (%s): is it installed, and does its condition send such pods to it?", notes)
	}
	share, err := v1alpha1.ParseGPUShare(p.Annotations)
	if err != nil {
		return err
	}
	// Before the slice is read against nvidia.com/gpu: a slice beside another vendor's
	// device is that device's problem, said as such.
	if err := kinds.CheckAsks(p, kinds.Asks(p)); err != nil {
		return err
	}
	whole := v1alpha1.WholeGPUs(p)
	if share.Shared() && whole > 0 {
		return fmt.Errorf("%s.resources: nvidia.com/gpu with %s, %s or %s: a pod takes a slice of GPUs or whole GPUs, not both (a slice of each of N GPUs: %s: N)",
			askerOf(p, v1alpha1.GPUResource), v1alpha1.AnnotationGPUFraction, v1alpha1.AnnotationGPUMemory, v1alpha1.AnnotationGPUCompute, v1alpha1.AnnotationGPUCount)
	}
	if _, err := v1alpha1.ParseGPUChoice(p.Annotations); err != nil {
		return err
	}
	_, dynMIG := p.Annotations[v1alpha1.AnnotationMIG]
	if name, ok := p.Annotations[v1alpha1.AnnotationGPUContainer]; ok && (!(share.Shared() || dynMIG) || v1alpha1.SliceContainer(p) == "") {
		var names []string
		for _, c := range p.Spec.Containers {
			names = append(names, c.Name)
		}
		return fmt.Errorf("%s: %q is not allowed: the container of a pod that shares a GPU given its slice, one of %s", v1alpha1.AnnotationGPUContainer, name, strings.Join(names, ", "))
	}
	if err := convert.MIGProblem(p); err != nil {
		return err
	}
	if dynMIG && share.Devices() > 1 {
		return fmt.Errorf("%s with %s: a MIG instance Allot lays out is one per pod", v1alpha1.AnnotationMIG, v1alpha1.AnnotationGPUCount)
	}
	if share.Devices() > 1 && len(p.Spec.ResourceClaims) > 0 {
		return fmt.Errorf("%s with spec.resourceClaims: a slice of several GPUs is not offered through DRA", v1alpha1.AnnotationGPUCount)
	}
	if err := checkOwnedAnnotations(p); err != nil {
		return err
	}
	if guardsEnv(p, share) {
		if err := checkEnv(p); err != nil {
			return err
		}
	} else if err := checkWholeGPUEnv(p); err != nil {
		return err
	}
	if err := checkPluginOthersVoid(p); err != nil {
		return err
	}
	if c, ok := p.Labels[v1alpha1.LabelClass]; ok && c != v1alpha1.ClassTrain && c != v1alpha1.ClassInteractive && c != v1alpha1.ClassInference {
		return fmt.Errorf("%s: %q is not allowed: train, interactive or inference", v1alpha1.LabelClass, c)
	}
	if v, ok := p.Labels[v1alpha1.LabelPreemptible]; ok && v != "true" && v != "false" {
		return fmt.Errorf("%s: %q is not allowed: true or false", v1alpha1.LabelPreemptible, v)
	}
	// A level that is not in the cluster's Topology would leave the gang waiting forever.
	if p.Annotations[v1alpha1.AnnotationTopologyRequired] != "" || p.Annotations[v1alpha1.AnnotationTopologyPreferred] != "" {
		if _, err := convert.JobTopology(p.Annotations, view.Topologies()); err != nil {
			return err
		}
	}
	total, maxMem := view.GPUs()
	if share.Memory > 0 && maxMem > 0 && share.Memory > maxMem {
		return fmt.Errorf("%s: %q is more than any GPU in the cluster has: at most %s", v1alpha1.AnnotationGPUMemory,
			p.Annotations[v1alpha1.AnnotationGPUMemory], resource.NewQuantity(maxMem, resource.BinarySI))
	}
	qname := p.Labels[v1alpha1.LabelQueue]
	if qname == "" {
		return fmt.Errorf("%s: no queue: set the label on the pod or its workload, or a default on namespace %s; queues: %s",
			v1alpha1.LabelQueue, p.Namespace, queueList(view))
	}
	q, ok := view.Queue(qname)
	if !ok {
		return fmt.Errorf("%s: queue %q does not exist; queues: %s", v1alpha1.LabelQueue, qname, queueList(view))
	}
	if len(q.Spec.Namespaces) > 0 && !slices.Contains(q.Spec.Namespaces, p.Namespace) {
		return fmt.Errorf("%s: namespace %q may not use queue %q; it admits namespaces %s", v1alpha1.LabelQueue, p.Namespace, qname,
			strings.Join(q.Spec.Namespaces, ", "))
	}
	if len(q.Spec.Namespaces) == 0 {
		// A queue that names no namespace admits those no queue claims: a namespace an
		// admin gave to a team (a Queue naming it, or its default queue) uses that
		// team's queues, not every open one.
		if own := claimingQueues(view, p.Namespace); len(own) > 0 && !slices.Contains(own, qname) {
			return fmt.Errorf("%s: namespace %q may not use queue %q, which admits only namespaces no queue claims: %q is %s's (use %s)",
				v1alpha1.LabelQueue, p.Namespace, qname, p.Namespace, strings.Join(own, ", "), strings.Join(own, " or "))
		}
	}
	if c := p.Labels[v1alpha1.LabelClass]; q.Spec.Class != "" && c != q.Spec.Class {
		return fmt.Errorf("%s: %q is not allowed in queue %s, which runs %s workloads only (its time limit and idle timeout are theirs): remove the label, or use another queue",
			v1alpha1.LabelClass, c, qname, q.Spec.Class)
	}
	if g := p.Labels[v1alpha1.LabelPodGroup]; g != "" && whole > 0 && total > 0 {
		if pg, ok := view.PodGroup(p.Namespace, g); ok && int64(pg.Spec.MinMember)*whole > total {
			return fmt.Errorf("%s: gang %q needs %d GPUs at once (%d pods × %d) but the cluster has %d", v1alpha1.LabelPodGroup, g,
				int64(pg.Spec.MinMember)*whole, pg.Spec.MinMember, whole, total)
		}
	}
	return nil
}

// askerOf names the first container (init containers and sidecars first) that asks for a
// resource, as a path in the pod's spec: "initContainers[name]".
func askerOf(p *corev1.Pod, name corev1.ResourceName) string {
	for _, list := range []struct {
		kind string
		cs   []corev1.Container
	}{{"initContainers", p.Spec.InitContainers}, {"containers", p.Spec.Containers}} {
		for i := range list.cs {
			if v1alpha1.ContainerAsks(&list.cs[i], name) > 0 {
				return fmt.Sprintf("%s[%s]", list.kind, list.cs[i].Name)
			}
		}
	}
	return "spec"
}

// claimingQueues are the queues a namespace was given to by an admin: those naming it in
// spec.namespaces, and its default queue (its allot.dev/queue label), sorted.
func claimingQueues(view View, ns string) []string {
	var out []string
	if d := view.NamespaceLabels(ns)[v1alpha1.LabelQueue]; d != "" {
		out = append(out, d)
	}
	for _, name := range view.QueueNames() {
		if q, ok := view.Queue(name); ok && slices.Contains(q.Spec.Namespaces, ns) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// subject tells whether the webhooks act on a pod: Allot schedules it, and it is not one of
// the scheduler's own reservations.
func subject(p *corev1.Pod) bool {
	return p.Spec.SchedulerName == v1alpha1.SchedulerName &&
		!(p.Namespace == v1alpha1.SystemNamespace && p.Labels[v1alpha1.LabelReservation] == "true")
}

func queueList(view View) string {
	names := view.QueueNames()
	if len(names) == 0 {
		return "none yet (an admin creates Queue objects)"
	}
	return strings.Join(names, ", ")
}
