package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
)

// gpuEnv is what a pod sharing a GPU reads from its ConfigMap: the device, and its memory
// cap and compute share in the forms NVIDIA MPS and HAMi-core enforce.
func gpuEnv(uuid string, memoryBytes int64, computePercent int32, share engine.MilliGPU) map[string]string {
	mi := memoryBytes >> 20
	return map[string]string{
		"NVIDIA_VISIBLE_DEVICES": uuid,
		// MPS: device ordinal as the container sees it (one device, so 0) = limit.
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  fmt.Sprintf("0=%dM", mi),
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": strconv.Itoa(int(computePercent)),
		// HAMi-core reads sizes with a unit suffix and the SM share as a percentage.
		"CUDA_DEVICE_MEMORY_LIMIT": fmt.Sprintf("%dm", mi),
		"CUDA_DEVICE_SM_LIMIT":     strconv.Itoa(int(computePercent)),
		"ALLOT_GPU_SHARE":          strconv.FormatFloat(float64(share)/float64(engine.OneGPU), 'f', -1, 64),
	}
}

// shareEnv works out a shared pod's environment from where the engine put it.
func shareEnv(p *corev1.Pod, node *engine.Node, b engine.Binding) map[string]string {
	gpu := node.GPUs[b.GPUs[0]]
	share, _ := v1alpha1.ParseGPUShare(p.Annotations)
	mem := share.Memory
	if mem == 0 {
		mem = gpu.Memory * int64(b.Share) / int64(engine.OneGPU)
	}
	compute := share.Compute
	if compute == 0 {
		compute = int32(max(1, (int64(b.Share)*100+int64(engine.OneGPU)/2)/int64(engine.OneGPU)))
	}
	return gpuEnv(gpu.UUID, mem, compute, b.Share)
}

// writeConfigMap fills the ConfigMap the admission webhook pointed the pod's containers
// at, owned by the pod so that it goes when the pod goes. Pods admitted without the
// webhook have none to fill.
func (s *Scheduler) writeConfigMap(ctx context.Context, p *corev1.Pod, data map[string]string) error {
	name := p.Annotations[v1alpha1.AnnotationConfigMap]
	if name == "" {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
		Labels:          map[string]string{"app.kubernetes.io/managed-by": SchedulerName},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}}},
		Data: data}
	_, err := s.client.CoreV1().ConfigMaps(p.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A bind that failed after writing it, or a pod placed again after eviction.
		_, err = s.client.CoreV1().ConfigMaps(p.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("gpu configmap %s/%s: %w", p.Namespace, name, err)
	}
	return nil
}

// reservationName names the pod that holds GPU g of a node while fractions share it.
func reservationName(node engine.NodeID, g int) string {
	return fmt.Sprintf("allot-reservation-%s-gpu%d", node, g)
}

// ensureReservation creates the pod that holds a shared GPU as one whole nvidia.com/gpu,
// so that the kubelet's device accounting and any other scheduler see it as taken.
func (s *Scheduler) ensureReservation(ctx context.Context, node engine.NodeID, g int) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: reservationName(node, g), Namespace: v1alpha1.SystemNamespace,
		Labels:      map[string]string{v1alpha1.LabelReservation: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationGPUs: strconv.Itoa(g)}},
		Spec: corev1.PodSpec{NodeName: string(node), SchedulerName: SchedulerName,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "reservation", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")}}}}}}
	_, err := s.client.CoreV1().Pods(v1alpha1.SystemNamespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("reservation %s: %w", p.Name, err)
	}
	return nil
}

// ensureSystemNamespace creates the namespace reservation pods live in.
// On a real cluster the Helm chart installs into it, and the scheduler may not create
// namespaces: look first.
func (s *Scheduler) ensureSystemNamespace(ctx context.Context) error {
	if _, err := s.client.CoreV1().Namespaces().Get(ctx, v1alpha1.SystemNamespace, metav1.GetOptions{}); err == nil {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

type gpuKey struct {
	node engine.NodeID
	gpu  int
}

// releaseReservations deletes the reservation of every GPU no fraction uses any more,
// counting the pods the snapshot and this plan place on shared GPUs.
func (s *Scheduler) releaseReservations(ctx context.Context, snap *engine.Snapshot, plan *engine.Plan) {
	shared := map[gpuKey]bool{}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if p.Binding != nil && p.Request.Shared() && len(p.Binding.GPUs) == 1 {
				shared[gpuKey{p.Binding.Node, p.Binding.GPUs[0]}] = true
			}
		}
	}
	evicted := map[engine.PodID]bool{}
	for _, e := range plan.Evictions {
		evicted[e.Pod] = true
	}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if evicted[p.ID] && p.Binding != nil && p.Request.Shared() {
				delete(shared, gpuKey{p.Binding.Node, p.Binding.GPUs[0]})
			}
		}
	}
	for _, b := range plan.Binds {
		if b.Binding.Share > 0 && len(b.Binding.GPUs) == 1 {
			shared[gpuKey{b.Binding.Node, b.Binding.GPUs[0]}] = true
		}
	}
	// The namespace index keeps this off the cost of every other pod in the cluster.
	inSystem, _ := s.pods.GetIndexer().ByIndex(cache.NamespaceIndex, v1alpha1.SystemNamespace)
	for _, o := range inSystem {
		p := o.(*corev1.Pod)
		if p.Labels[v1alpha1.LabelReservation] != "true" || p.DeletionTimestamp != nil {
			continue
		}
		g, err := strconv.Atoi(p.Annotations[v1alpha1.AnnotationGPUs])
		if err == nil && shared[gpuKey{engine.NodeID(p.Spec.NodeName), g}] {
			continue
		}
		err = s.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("allot scheduler: release reservation", "pod", p.Name, "err", err)
		}
	}
}

// The node annotation allot.dev/gpu-occupancy, as kube/convert defines and reads it.
type (
	Occupancy    = convert.Occupancy
	GPUOccupancy = convert.GPUOccupancy
	GPUHolderOf  = convert.GPUHolderOf
)

// ParseOccupancy reads a node's allot.dev/gpu-occupancy annotation.
var ParseOccupancy = convert.ParseOccupancy

// occupancy computes every node's annotation value from the snapshot and the plan's binds.
func occupancy(snap *engine.Snapshot, plan *engine.Plan) map[engine.NodeID]string {
	holders := map[gpuKey][]GPUHolderOf{}
	add := func(pod engine.PodID, b *engine.Binding) {
		share := int(engine.OneGPU)
		if b.Share > 0 {
			share = int(b.Share)
		}
		for _, g := range b.GPUs {
			k := gpuKey{b.Node, g}
			holders[k] = append(holders[k], GPUHolderOf{Pod: string(pod), Share: share})
		}
	}
	evicted := map[engine.PodID]bool{}
	for _, e := range plan.Evictions {
		evicted[e.Pod] = true
	}
	for _, j := range snap.Jobs {
		for _, p := range j.Pods {
			if p.Binding != nil && !evicted[p.ID] {
				add(p.ID, p.Binding)
			}
		}
	}
	for _, b := range plan.Binds {
		add(b.Pod, &b.Binding)
	}
	out := make(map[engine.NodeID]string, len(snap.Nodes))
	for _, n := range snap.Nodes {
		var occ Occupancy
		for g, gpu := range n.GPUs {
			h := holders[gpuKey{n.ID, g}]
			if len(h) == 0 || (len(h) == 1 && h[0].Share == int(engine.OneGPU)) {
				continue // free, or one pod's whole GPU
			}
			sort.Slice(h, func(a, b int) bool { return h[a].Pod < h[b].Pod })
			used := 0
			for _, x := range h {
				used += x.Share
			}
			occ.GPUs = append(occ.GPUs, GPUOccupancy{Index: g, UUID: gpu.UUID, Used: min(used, int(engine.OneGPU)), Holders: h})
		}
		if len(occ.GPUs) == 0 {
			out[n.ID] = "" // nothing shared: no annotation
			continue
		}
		b, _ := json.Marshal(occ)
		out[n.ID] = string(b)
	}
	return out
}

// writeOccupancy patches the annotation of nodes whose occupancy changed.
func (s *Scheduler) writeOccupancy(ctx context.Context, occ map[engine.NodeID]string) {
	for node, val := range occ {
		o, ok, _ := s.nodes.GetStore().GetByKey(string(node))
		if !ok {
			continue
		}
		n := o.(*corev1.Node)
		if n.Annotations[v1alpha1.AnnotationOccupancy] == val {
			continue
		}
		if last, ok := s.occWritten[node]; ok && last == val {
			continue
		}
		var v any = val
		if val == "" {
			v = nil // a merge patch removes the annotation
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationOccupancy: v}}})
		if _, err := s.client.CoreV1().Nodes().Patch(ctx, string(node), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			if !apierrors.IsNotFound(err) {
				slog.Warn("allot scheduler: node occupancy", "node", node, "err", err)
			}
			continue
		}
		s.occWritten[node] = val
	}
}
