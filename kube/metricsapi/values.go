// Package metricsapi serves the GPU utilisation Allot's agents measure as the Kubernetes
// custom metrics API (custom.metrics.k8s.io/v1beta2), an aggregated API the scheduler
// process serves: the metric gpu-utilization of a pod (how busy the devices it holds
// were, in percent) and of a Deployment (the mean over its running pods), which a
// HorizontalPodAutoscaler reads to scale an inference service. No Prometheus or adapter is
// involved: the values come from the agents' readings (allot.dev/gpu-utilization on each
// agent's Lease, or on a simulated node) and the pods' device indices (the scheduler's
// bind).
package metricsapi

import (
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
)

// Names of the API.
const (
	Group   = "custom.metrics.k8s.io"
	Version = "v1beta2"
	// MetricGPUUtilization is how busy a pod's GPUs were over the agent's last report, in
	// percent: the mean over the devices it holds.
	MetricGPUUtilization = "gpu-utilization"
)

// deviceUtilization is how busy each of a node's devices was, in percent by index, as the
// idle controller reads it too (inspect.Utilization): what its agent last reported on its
// Lease (v1alpha1.AgentLeaseName) while that Lease is live, else, on a node that reports on
// itself (trustNode: the embedded cluster's simulated nodes), the Node's own annotation;
// nil when neither says. A reading the agent stopped renewing is not taken.
func deviceUtilization(n *corev1.Node, agent *coordinationv1.Lease, now time.Time, trustNode bool) []float64 {
	vals, ok := inspect.Utilization(n, agent, now, trustNode)
	if !ok {
		return nil
	}
	out := make([]float64, len(vals))
	for i, u := range vals {
		out[i] = float64(u) // UtilizationUnread, -1: not counted
	}
	return out
}

// heldDevices are the indices on its node of the devices a pod holds: those the kubelet
// gave its containers, as its node's agent recorded them (allot.dev/gpu-devices, UUIDs,
// found in the node's allot.dev/gpu-uuids), else those the scheduler bound it to (a node
// without an agent, whose device plugin takes the scheduler's choice).
func heldDevices(p *corev1.Pod, n *corev1.Node) []int {
	if rec := p.Annotations[v1alpha1.AnnotationGPUDevices]; rec != "" && n != nil {
		uuids := strings.Split(n.Annotations[v1alpha1.AnnotationGPUUUIDs], ",")
		var out []int
		for _, u := range strings.Split(rec, ",") {
			if i := slices.Index(uuids, strings.TrimSpace(u)); i >= 0 {
				out = append(out, i)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	indices, _ := v1alpha1.HeldGPUs(p)
	return indices
}

// podUtilization is how busy the devices a running pod holds were, in percent, given its
// node's readings by device; false when the pod holds none or none of them is read.
func podUtilization(p *corev1.Pod, indices []int, util []float64) (float64, bool) {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return 0, false
	}
	// A fraction's device is shared, and its reading is the whole device's: its neighbours'
	// work (another team's, maybe) would scale this pod's service, and tell its owner how
	// busy they are. No reading, until utilisation is read per process.
	if p.Annotations[v1alpha1.AnnotationGPUShare] != "" {
		return 0, false
	}
	sum, n := 0.0, 0
	for _, g := range indices {
		if g < len(util) && util[g] >= 0 {
			sum += util[g]
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}
