package admission

import (
	"context"
	"encoding/json"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Devices answers devices.mutate.allot.dev (DevicesCondition): another scheduler's pod in
// a tenant's namespace, GPU or not, has each container that asks no GPU of the device
// plugin told it has none (NVIDIA_VISIBLE_DEVICES=void, last), which beats its image's,
// its own and its envFrom sources' NVIDIA_VISIBLE_DEVICES: under NVIDIA's runtime in
// legacy mode the variable alone gives a container devices. Nothing else of the pod is
// read or changed; Allot's own pods get this from the pod webhook.
type Devices struct {
	// Of the pod webhook: which namespaces are tenants' (its View and Peers).
	Mutator *Mutator
}

// Handle implements admission.Handler.
func (d Devices) Handle(_ context.Context, req admission.Request) admission.Response {
	p, err := decodePod(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	// A static pod's mirror is the kubelet's record of what runs, not a pod to change.
	_, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]
	if req.SubResource != "" || mirror || p.Spec.SchedulerName == v1alpha1.SchedulerName || !d.Mutator.Peers.tenantNamespace(p.Namespace, d.Mutator.View) {
		return admission.Allowed("not another scheduler's pod in a tenant's namespace")
	}
	out := p.DeepCopy()
	denyImageDevices(out, false)
	cur, err := json.Marshal(out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, cur)
}
