package scheduler

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/stores"
)

// The nodes' agents renew a Lease each (kube/agent/heartbeat.go). A node whose agent's
// Lease ran out, or that never had one, is one without an agent: fractions there are
// placed by index (the reservation's device is not waited for) and each is told so.

// agentLeaseInformer watches the agents' Leases in Allot's namespace.
func (s *Scheduler) agentLeaseInformer() (informers.SharedInformerFactory, cache.SharedIndexInformer) {
	f := stores.AgentLeases(s.client)
	return f, f.Coordination().V1().Leases().Informer()
}

// agentAlive tells whether node's agent renewed its Lease within the Lease's duration.
func (s *Scheduler) agentAlive(node engine.NodeID) bool {
	if s.agentLeases == nil {
		return false
	}
	o, ok, _ := s.agentLeases.GetStore().GetByKey(v1alpha1.SystemNamespace + "/" + v1alpha1.AgentLeaseName(string(node)))
	if !ok {
		return false
	}
	return inspect.LeaseLive(o.(*coordinationv1.Lease), s.opts.Now())
}

// startAgentLeases starts the Lease informer and waits for its first list.
func (s *Scheduler) startAgentLeases(ctx context.Context) {
	f, inf := s.agentLeaseInformer()
	s.agentLeases = inf
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
}

// noteAgentMissing tells a pod sharing a GPU on a node whose agent does not report that
// its device was not checked against the kubelet's.
func (s *Scheduler) noteAgentMissing(p *corev1.Pod, node engine.NodeID) {
	s.recorder.Eventf(p, corev1.EventTypeWarning, "AgentNotReporting",
		"node %s's allot agent does not report (its Lease %s/%s is missing or ran out): the GPU is placed by index, not checked against the device the kubelet gave its reservation",
		node, v1alpha1.SystemNamespace, v1alpha1.AgentLeaseName(string(node)))
}

// countAgentless reports the NVIDIA GPU nodes (the agent reads NVML; other vendors' nodes
// have none) whose agent's Lease is missing or ran out: the chart's AllotAgentMissing
// alert. Where the Leases are not watched, nothing is said.
func (s *Scheduler) countAgentless(snap *engine.Snapshot) {
	if s.opts.Metrics == nil || s.agentLeases == nil {
		return
	}
	count := 0
	for i := range snap.Nodes {
		if n := &snap.Nodes[i]; len(n.GPUs) > 0 && n.Accelerator == "" && !s.agentAlive(n.ID) {
			count++
		}
	}
	s.opts.Metrics.agents(count)
}
