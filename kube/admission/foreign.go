package admission

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A pod that leaves out schedulerName is kube-scheduler's, and kube-scheduler books it to
// no queue: without this rule, a quota would bind only those who name Allot. So a pod that
// asks for GPUs in a tenant's namespace is Allot's, whichever scheduler it names: its name
// is rewritten to Allot's (adopt) or the pod refused (refuse), as the admin chooses. And a
// pod there may not outrank Allot's reservation pods (a system class such as
// system-cluster-critical, which no other rule keeps from tenants, would have kube-scheduler
// preempt other teams' pods and the reservations under running fractions).
//
// A tenant's namespace is one a Queue names in spec.namespaces, or one an admin labelled
// with a default queue: both written by admins only. Kubernetes' own namespaces, Allot's,
// and those the admin names (the GPU Operator's, a monitoring stack's) are left alone.

// Modes of the rule (Peers.ForeignGPUPods).
const (
	ForeignAdopt  = "adopt"
	ForeignRefuse = "refuse"
	ForeignOff    = "off"
)

// ForeignModes are the values --foreign-gpu-pods takes.
var ForeignModes = []string{ForeignAdopt, ForeignRefuse, ForeignOff}

// systemNamespaces are never a tenant's.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", v1alpha1.SystemNamespace}

// ReservationPriority is the priority of Allot's reservation pods (the chart's and the
// scheduler's allot-reservation class): the highest a class outside the system's may have.
const ReservationPriority = 1_000_000_000

// asksGPUCEL is true of a container that names NVIDIA's GPUs or MIG instances in its
// resources (a limit of 0 included: the webhook reads the amounts).
const asksGPUCEL = `has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-'))) ||
(has(c.resources.requests) && c.resources.requests.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-'))))`

// ForeignCondition selects the pods of other schedulers that ask for GPUs: the pod webhooks
// see them as well as Allot's own (the handlers judge the namespace).
// A pod with ResourceClaims is sent too, whatever their classes (asksGPUs says why).
const ForeignCondition = `object.spec.schedulerName != 'allot' && (object.spec.containers.exists(c, ` + asksGPUCEL + `) ||
(has(object.spec.initContainers) && object.spec.initContainers.exists(c, ` + asksGPUCEL + `)) ||
(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0))`

// PriorityCondition selects the pods that would outrank Allot's reservation pods: the
// validating webhook sees them, whichever scheduler they name. (The API server's Priority
// admission plugin has written spec.priority from the class before webhooks run.)
const PriorityCondition = `has(object.spec.priority) && object.spec.priority >= 1000000000`

// exemptCEL is true of a request outside the namespaces the rule leaves alone: judged in
// the match condition itself, so that the system's pods (of the classes this rule refuses
// tenants) never wait on Allot's webhook.
func (o Peers) exemptCEL() string {
	return "!(request.namespace in ['" + strings.Join(append(slices.Clone(systemNamespaces), o.ForeignExempt...), "', '") + "'])"
}

// TenantMutateCondition is the condition of the mutating webhook that takes other
// schedulers' GPU pods (tenants.mutate.allot.dev): outside the exempt namespaces, unless
// the rule is off ("false" then). Its webhook ignores its own failure: while no replica
// answers, those pods are their schedulers' as before, rather than every GPU pod of the
// cluster waiting on Allot.
func (o Peers) TenantMutateCondition() string {
	if o.foreignMode() == ForeignOff {
		return "false"
	}
	return "(" + ForeignCondition + ") && " + o.exemptCEL()
}

// DevicesCondition is the condition of the mutating webhook that tells other schedulers'
// pods in tenants' namespaces they have no device (devices.mutate.allot.dev): every such
// pod outside the exempt namespaces, whatever it asks and whatever the foreign-pod rule.
// Under NVIDIA's runtime in legacy mode a container's image (CUDA's base images say
// NVIDIA_VISIBLE_DEVICES=all), its own env or an envFrom source names the GPUs it is
// given, so a pod asking for none would otherwise get every GPU of its node. It ignores
// its own failure, as the tenants' other webhooks do.
func (o Peers) DevicesCondition() string {
	return "object.spec.schedulerName != 'allot' && " + o.exemptCEL()
}

// TenantValidateCondition is the condition of the validating webhook for pods of any
// scheduler in tenants' namespaces (tenants.validate.allot.dev): outside the exempt
// namespaces, pods ranking with or above the reservations, and (unless the rule is off)
// other schedulers' GPU pods. It ignores its own failure too: a system component's pod at a
// system class in a namespace left out of the exemptions (a CNI's, a log shipper's) must
// not wait on Allot. Allot's own pods get the same checks from pods.validate.allot.dev,
// which fails closed.
func (o Peers) TenantValidateCondition() string {
	c := "(" + PriorityCondition
	if o.foreignMode() != ForeignOff {
		c += " || " + ForeignCondition
	}
	return c + ") && " + o.exemptCEL()
}

// tenantNamespace tells whether ns is a tenant's: a Queue admits it by name, or it carries
// a default queue, and neither the system's nor exempt.
func (o Peers) tenantNamespace(ns string, view View) bool {
	if slices.Contains(systemNamespaces, ns) || slices.Contains(o.ForeignExempt, ns) {
		return false
	}
	return len(claimingQueues(view, ns)) > 0
}

// sharesGPU tells whether a pod asks Allot for a slice of a GPU or a MIG instance it lays out.
func sharesGPU(p *corev1.Pod) bool {
	share, _ := v1alpha1.ParseGPUShare(p.Annotations)
	_, mig := p.Annotations[v1alpha1.AnnotationMIG]
	return share.Shared() || mig
}

// foreignMode is the rule's mode: adopt when unset.
func (o Peers) foreignMode() string {
	if o.ForeignGPUPods == "" {
		return ForeignAdopt
	}
	return o.ForeignGPUPods
}

// asksGPUs tells whether a pod asks the device plugin for NVIDIA GPUs or MIG instances, in
// any container, init container or sidecar, or names a ResourceClaim. Every claim counts,
// whatever its class today: a claim or template the pod names may be made only after the
// pod, or deleted and made again of a GPU class while the pod waits, so what it asks at
// admission is not what another scheduler would allocate. (Allot allocates claims of any
// class, so a pod asking a network card through DRA runs under it as it would elsewhere.)
func asksGPUs(p *corev1.Pod) bool {
	return podAsksPluginGPU(p) || len(p.Spec.ResourceClaims) > 0
}

// asking names what the rule takes a pod for, in its messages.
func asking(p *corev1.Pod) string {
	if podAsksPluginGPU(p) {
		return "a pod asking for GPUs"
	}
	return "a pod with ResourceClaims (any of which may be made or made again for GPUs before it is placed)"
}

// takeForeign applies the rule to a pod of another scheduler at the mutating webhook: in a
// tenant's namespace, a pod asking for GPUs becomes Allot's (its rewriting recorded in
// allot.dev/translated), or is refused. It reports whether it rewrote the pod.
func (o Peers) takeForeign(p *corev1.Pod, view View) (bool, error) {
	if p.Spec.SchedulerName == v1alpha1.SchedulerName || o.foreignMode() == ForeignOff || !o.tenantNamespace(p.Namespace, view) || !asksGPUs(p) {
		return false, nil
	}
	if o.foreignMode() == ForeignRefuse {
		return false, o.foreignRefusal(p)
	}
	note := fmt.Sprintf("spec.schedulerName=%s → %s (%s in a tenant's namespace)", p.Spec.SchedulerName, v1alpha1.SchedulerName, asking(p))
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if prev := p.Annotations[v1alpha1.AnnotationTranslated]; prev != "" {
		note = prev + "; " + note
	}
	p.Annotations[v1alpha1.AnnotationTranslated] = note
	p.Spec.SchedulerName = v1alpha1.SchedulerName
	return true, nil
}

func (o Peers) foreignRefusal(p *corev1.Pod) error {
	return fmt.Errorf("spec.schedulerName: %q is not allowed for %s in namespace %s, whose GPUs Allot books to queues: set schedulerName: %s (or ask an admin to exempt the namespace: the chart's webhook.foreignGPUPodsExempt)",
		p.Spec.SchedulerName, asking(p), p.Namespace, v1alpha1.SchedulerName)
}

// checkForeign is the validating webhook's side of the rule, whatever the mutating webhook
// did (it may have been skipped): no other scheduler's GPU pod in a tenant's namespace,
// and no pod there outranking the reservations.
func (o Peers) checkForeign(p *corev1.Pod, view View) error {
	if !o.tenantNamespace(p.Namespace, view) {
		return nil
	}
	if p.Spec.Priority != nil && *p.Spec.Priority >= ReservationPriority {
		return fmt.Errorf("spec.priorityClassName: %q (priority %d) is not allowed in namespace %s: a tenant's pod may not rank with or above Allot's reservation pods (%d), which hold GPUs other teams' fractions use; use a class below it",
			p.Spec.PriorityClassName, *p.Spec.Priority, p.Namespace, ReservationPriority)
	}
	// A pod made with its node already set is placed by no scheduler: the kubelet admits it
	// if the devices are free, and no queue booked them. (A static pod's mirror is the
	// kubelet's own.)
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; p.Spec.NodeName != "" && !mirror && (asksGPUs(p) || sharesGPU(p)) {
		return fmt.Errorf("spec.nodeName: %q is not allowed for %s in namespace %s: Allot places it and books it to its queue (remove nodeName; a nodeSelector on %s=%s keeps it on that node)",
			p.Spec.NodeName, asking(p), p.Namespace, corev1.LabelHostname, p.Spec.NodeName)
	}
	if p.Spec.SchedulerName != v1alpha1.SchedulerName && o.foreignMode() != ForeignOff && asksGPUs(p) {
		if o.foreignMode() == ForeignAdopt {
			return fmt.Errorf("%v; Allot's mutating webhook would have rewritten it, but was skipped", o.foreignRefusal(p))
		}
		return o.foreignRefusal(p)
	}
	return nil
}

// ForeignFlagProblem says what is wrong with --foreign-gpu-pods's value; "" when nothing.
func ForeignFlagProblem(mode string) string {
	if mode == "" || slices.Contains(ForeignModes, mode) {
		return ""
	}
	return fmt.Sprintf("--foreign-gpu-pods %q is not allowed: %s", mode, strings.Join(ForeignModes, ", "))
}
