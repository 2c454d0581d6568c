// Package metricsapi serves the GPU utilisation Allot's agents measure as the Kubernetes
// custom metrics API (custom.metrics.k8s.io/v1beta2), an aggregated API the scheduler
// process serves: the metric gpu-utilization of a pod (how busy the devices it holds
// were, in percent) and of a Deployment (the mean over its running pods), which a
// HorizontalPodAutoscaler reads to scale an inference service. No Prometheus or adapter is
// involved: the values come from the nodes' allot.dev/gpu-utilization annotations (the
// agent's) and the pods' device indices (the scheduler's bind).
package metricsapi

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Names of the API.
const (
	Group   = "custom.metrics.k8s.io"
	Version = "v1beta2"
	// MetricGPUUtilization is how busy a pod's GPUs were over the agent's last report, in
	// percent: the mean over the devices it holds.
	MetricGPUUtilization = "gpu-utilization"
)

// nodeUtilization reads a node's allot.dev/gpu-utilization: percent by device index; nil
// when the agent has written none.
func nodeUtilization(n *corev1.Node) []float64 {
	v := strings.TrimSpace(n.Annotations[v1alpha1.AnnotationGPUUtilization])
	if v == "" {
		return nil
	}
	fields := strings.Split(v, ",")
	out := make([]float64, len(fields))
	for i, f := range fields {
		u, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || u < 0 || u > 100 {
			u = -1 // unreadable: not counted
		}
		out[i] = u
	}
	return out
}

// podUtilization is how busy the devices a running pod holds were, in percent; false when
// the pod holds none or its node reports none of them.
func podUtilization(p *corev1.Pod, node *corev1.Node) (float64, bool) {
	if node == nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return 0, false
	}
	util := nodeUtilization(node)
	indices, _ := v1alpha1.HeldGPUs(p)
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
