package idle

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/consumption"
	"github.com/allot-dev/allot/kube/inspect"
)

// count hands the look to the consumption records: every running pod that holds GPUs,
// by its queue (the pod's own allot.dev/queue, fixed at admission), its workload's
// creator, its node's pool and GPU model, and the utilisation of its GPUs where their
// agent reports it. A failed write is told and tried again at the next look, which counts
// the time since the last one counted.
func (c *Controller) count(ctx context.Context, now time.Time, ws []inspect.Workload, pods map[string]*corev1.Pod, r Readings, uuids map[string][]string) {
	var uses []consumption.Use
	for _, w := range ws {
		for _, wp := range w.Pods {
			p := pods[string(wp.UID)]
			if p == nil || p.Status.Phase != corev1.PodRunning || p.Status.StartTime == nil || wp.Asks <= 0 {
				continue
			}
			n := c.nodes[p.Spec.NodeName]
			u := consumption.Use{Key: consumption.Key{Queue: p.Labels[v1alpha1.LabelQueue], User: w.CreatedBy,
				Pool: v1alpha1.DefaultPool, Model: consumption.Unknown}, GPUs: wp.Asks, Started: p.Status.StartTime.Time}
			if u.Queue == "" {
				u.Queue = w.Queue
			}
			if u.User == "" {
				u.User = consumption.Unknown
			}
			if n != nil {
				if pool := n.Labels[v1alpha1.LabelNodePool]; pool != "" {
					u.Pool = pool
				}
				if m := n.Labels[v1alpha1.LabelGPUProduct]; m != "" {
					u.Model = m
				}
			}
			if devs, ok := PodDevices(p, uuids[p.Spec.NodeName]); ok && len(devs) > 0 {
				sum, read := 0, 0
				for _, d := range devs {
					if v, has := r[d]; has {
						sum, read = sum+v, read+1
					}
				}
				if read == len(devs) {
					u.Util, u.Measured = float64(sum)/float64(read), true
				}
			}
			uses = append(uses, u)
		}
	}
	if err := c.usage.Observe(ctx, now, uses); err != nil && ctx.Err() == nil {
		slog.Warn("allot idle: recording GPU consumption", "err", err)
	}
}
