// Package podfit decides what the Kubernetes scheduling contract allows for Allot's pods,
// with kube-scheduler's own plugins run through its own framework: node selectors and
// affinity, taints and tolerations, a user-set nodeName, cordoned nodes and volumes'
// topology once per pod shape (a NodeFilter for the engine), and pod affinity and
// anti-affinity, topology spread, host ports and every resource the engine does not count
// itself against the pods placed so far in the same cycle (the engine's PlacementRules).
//
// Place in the pipeline: informers → snapshot (+ podfit) → engine → plan. The engine never
// sees a Kubernetes type; it reads the answers.
package podfit

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// The plugins of each pass. Static plugins depend only on the pod and the node (and on
// objects such as PersistentVolumes that a cycle does not change); dynamic ones also on
// the other pods of the node or of its topology domain.
var (
	staticFilters = []string{names.NodeUnschedulable, names.NodeName, names.NodeAffinity, names.TaintToleration,
		names.VolumeRestrictions, names.VolumeBinding, names.VolumeZone}
	staticScores   = []string{names.NodeAffinity, names.TaintToleration}
	dynamicFilters = []string{names.NodeResourcesFit, names.NodePorts, names.InterPodAffinity, names.PodTopologySpread}
)

// Checker holds the two frameworks, built once; Begin starts a cycle on them.
type Checker struct {
	static, dynamic framework.Framework
	lister          *swapLister
	// counted are the extended resources of other vendors' accelerators the engine places
	// itself, as it does nvidia.com/gpu: kube-scheduler's resource fit leaves them out.
	counted map[corev1.ResourceName]bool
}

// CountedByEngine names the extended resources (the accelerator kinds the scheduler has
// on) that the engine counts and places itself, beside CPU, memory and nvidia.com/gpu.
// Call it before the first cycle.
func (c *Checker) CountedByEngine(names []corev1.ResourceName) {
	c.counted = map[corev1.ResourceName]bool{}
	for _, n := range names {
		c.counted[n] = true
	}
}

// New builds kube-scheduler's plugins with their default arguments (the same defaults a
// stock kube-scheduler runs with). Plugins register informers on factory (PersistentVolumes,
// StorageClasses, Namespaces, Services, …): start it after New and wait for it to sync.
func New(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (*Checker, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler defaults: %w", err)
	}
	args := cfg.Profiles[0].PluginConfig
	// The framework counts plugin runs in kube-scheduler's metrics (a process-wide
	// registry, registered once; a kube-scheduler in the same process shares it).
	schedmetrics.Register()
	c := &Checker{lister: &swapLister{}}
	registry := plugins.NewInTreeRegistry()
	opts := []frameworkruntime.Option{frameworkruntime.WithInformerFactory(factory), frameworkruntime.WithClientSet(client),
		frameworkruntime.WithSnapshotSharedLister(c.lister), frameworkruntime.WithLogger(klog.FromContext(ctx))}
	build := func(name string, filters, scores []string) (framework.Framework, error) {
		p := &config.KubeSchedulerProfile{SchedulerName: name, Plugins: &config.Plugins{
			QueueSort: config.PluginSet{Enabled: []config.Plugin{{Name: names.PrioritySort}}},
			Bind:      config.PluginSet{Enabled: []config.Plugin{{Name: names.DefaultBinder}}},
		}}
		// Each filter plugin at every extension point it implements (PreFilter and its
		// AddPod/RemovePod extensions where it has them), scores only where asked.
		for _, f := range filters {
			p.Plugins.MultiPoint.Enabled = append(p.Plugins.MultiPoint.Enabled, config.Plugin{Name: f})
		}
		all := []config.Plugin{{Name: "*"}}
		p.Plugins.PreScore.Disabled, p.Plugins.Score.Disabled = all, all
		p.Plugins.Reserve.Disabled, p.Plugins.PreBind.Disabled, p.Plugins.PostFilter.Disabled = all, all, all
		p.Plugins.PreEnqueue.Disabled = all
		for _, s := range scores {
			p.Plugins.PreScore.Enabled = append(p.Plugins.PreScore.Enabled, config.Plugin{Name: s})
			p.Plugins.Score.Enabled = append(p.Plugins.Score.Enabled, config.Plugin{Name: s, Weight: 1})
		}
		for _, a := range args {
			if slices.Contains(filters, a.Name) || slices.Contains(scores, a.Name) {
				p.PluginConfig = append(p.PluginConfig, a)
			}
		}
		return frameworkruntime.NewFramework(ctx, registry, p, opts...)
	}
	if c.static, err = build("allot-static", staticFilters, staticScores); err != nil {
		return nil, fmt.Errorf("kube-scheduler plugins: %w", err)
	}
	if c.dynamic, err = build("allot-dynamic", dynamicFilters, nil); err != nil {
		return nil, fmt.Errorf("kube-scheduler plugins: %w", err)
	}
	return c, nil
}

// swapLister is the frameworks' view of the cluster: the plugins keep the lister they were
// built with, so each cycle swaps the snapshot behind it.
type swapLister struct{ snap *cache.Snapshot }

func (l *swapLister) NodeInfos() fwk.NodeInfoLister       { return l.snap.NodeInfos() }
func (l *swapLister) StorageInfos() fwk.StorageInfoLister { return l.snap.StorageInfos() }

// hasRequiredAntiAffinity reports whether a pod repels others: then every pod placed near
// it must be checked, not only pods with constraints of their own.
func hasRequiredAntiAffinity(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
}
