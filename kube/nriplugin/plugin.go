// Package nriplugin is Allot's NRI plugin: it runs on each GPU node whose sharing pods get
// their device by CDI (delivery cdi) and, when containerd creates a container, injects the
// CDI devices the scheduler named for that container in the pod's annotation
// v1alpha1.AnnotationCDIPrefix+<container> (written in the bind, which no tenant can
// write or change: the webhook, the fields policy and the chart's CDI guard refuse it).
// containerd resolves the names against the node's CDI specs (NVIDIA's device plugin's,
// the toolkit's management spec).
//
// Why Allot runs its own rather than reading NVIDIA's annotations: NVIDIA's plugin of
// toolkit 1.19 (GPU Operator 26.3) injects no device into a pod outside the operator's
// namespace, and that of 1.20 (26.7) no management device outside the namespaces an admin
// lists; and two plugins may not inject the same device (containerd refuses the
// container), so Allot's names go under a key of its own.
package nriplugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Name and index the plugin registers with containerd under: after NVIDIA's (10), so that
// a conflict would be reported against Allot's.
const (
	Name  = "allot"
	Index = "20"
)

// Options configure the plugin.
type Options struct {
	// Socket is containerd's NRI socket (/var/run/nri/nri.sock).
	Socket string
	// Namespace is Allot's own: only its pods (the agent, the MPS host) may be given
	// devices of ManagementKinds, which reach every GPU of the node.
	Namespace string
	// ReadyFile is written once the plugin is registered and synchronised, and removed when
	// it is not: the chart's startup probe reads it, so that the agent's container is not
	// created before the plugin can give it its devices.
	ReadyFile string
	// SharingRoot is the agent's --sharing-root (the same path on the host and in the
	// plugin's container): each sharing container's preload list is kept under it, with
	// the image's own list appended (preload.go). Empty: the webhook's list replaces the
	// image's.
	SharingRoot string
}

// ManagementKinds are CDI kinds whose devices reach every GPU of the node.
var ManagementKinds = []string{"management.nvidia.com/gpu"}

type plugin struct {
	opts Options
}

// Devices are the CDI devices the plugin gives container ctr of a pod in namespace ns
// with annotations: the comma-separated names under AnnotationCDIPrefix+ctr, each a fully
// qualified CDI name (vendor/class=device). An error names what is refused and why; the
// container is then not created (never created without the device it was booked, nor
// with one it was not).
func Devices(ns string, annotations map[string]string, ctr, ownNamespace string) ([]string, error) {
	v, ok := annotations[v1alpha1.AnnotationCDIPrefix+ctr]
	if !ok || v == "" {
		return nil, nil
	}
	var out []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		kind, dev, ok := strings.Cut(name, "=")
		if !ok || dev == "" || !strings.Contains(kind, "/") {
			return nil, fmt.Errorf("annotation %s%s: %q is not a qualified CDI device name (vendor/class=device)", v1alpha1.AnnotationCDIPrefix, ctr, name)
		}
		if dev == "all" && ns != ownNamespace {
			return nil, fmt.Errorf("annotation %s%s: %s names every GPU of the node, given only to Allot's own pods (namespace %s), not to a pod of %s",
				v1alpha1.AnnotationCDIPrefix, ctr, name, ownNamespace, ns)
		}
		for _, m := range ManagementKinds {
			if kind == m && ns != ownNamespace {
				return nil, fmt.Errorf("annotation %s%s: %s devices reach every GPU of the node and are given only to Allot's own pods (namespace %s), not to a pod of %s",
					v1alpha1.AnnotationCDIPrefix, ctr, m, ownNamespace, ns)
			}
		}
		out = append(out, name)
	}
	return out, nil
}

// CreateContainer adds the container's CDI devices, if its pod names any.
func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	devs, err := Devices(pod.GetNamespace(), pod.GetAnnotations(), ctr.GetName(), p.opts.Namespace)
	if err != nil {
		slog.Warn("allot nri: refusing a container", "pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName(), "err", err)
		return nil, nil, err
	}
	adjust := &api.ContainerAdjustment{}
	for _, d := range devs {
		adjust.AddCDIDevice(&api.CDIDevice{Name: d})
	}
	if len(devs) > 0 {
		slog.Info("allot nri: CDI devices", "pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName(), "devices", devs)
	}
	if err := p.keepImagePreload(pod, ctr, adjust); err != nil {
		// Not created rather than started without HAMi-core, or without the image's own.
		slog.Warn("allot nri: refusing a container", "pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName(), "err", err)
		return nil, nil, err
	}
	return adjust, nil, nil
}

// StopContainer forgets the container's preload list: a stopped container is never
// started again (the kubelet makes a new one), and its removal may wait for the kubelet's
// garbage collection.
func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.forgetPreload(ctr.GetId())
	return nil, nil
}

// RemoveContainer forgets the list of a container that ended by itself.
func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.forgetPreload(ctr.GetId())
	return nil
}

// Synchronize is called once connected, with the containers that already run.
func (p *plugin) Synchronize(_ context.Context, _ []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	p.prunePreloads(containers)
	if p.opts.ReadyFile != "" {
		if err := os.MkdirAll(filepath.Dir(p.opts.ReadyFile), 0o755); err == nil {
			_ = os.WriteFile(p.opts.ReadyFile, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
		}
	}
	slog.Info("allot nri: registered with the container runtime", "socket", p.opts.Socket)
	return nil, nil
}

// Run connects to containerd's NRI socket and serves until ctx ends, connecting again
// whenever the runtime restarts (its socket goes and comes back).
func Run(ctx context.Context, o Options) error {
	if o.Socket == "" {
		o.Socket = "/var/run/nri/nri.sock"
	}
	if o.Namespace == "" {
		o.Namespace = v1alpha1.SystemNamespace
	}
	p := &plugin{opts: o}
	unready := func() {
		if o.ReadyFile != "" {
			_ = os.Remove(o.ReadyFile)
		}
	}
	// One a killed plugin left (an emptyDir outlives its container's restarts) would
	// pass the startup probe before this one is registered.
	unready()
	defer unready()
	for {
		if _, err := os.Stat(o.Socket); err != nil {
			slog.Warn("allot nri: waiting for the container runtime's NRI socket (containerd 1.7.30+ or 2.x with NRI on)", "socket", o.Socket, "err", err)
		} else {
			closed := make(chan struct{})
			s, err := stub.New(p, stub.WithPluginName(Name), stub.WithPluginIdx(Index), stub.WithSocketPath(o.Socket),
				stub.WithOnClose(func() { unready(); close(closed) }))
			if err != nil {
				return fmt.Errorf("NRI plugin: %w", err)
			}
			if err := s.Start(ctx); err != nil {
				slog.Warn("allot nri: connecting to the container runtime", "socket", o.Socket, "err", err)
			} else {
				select {
				case <-ctx.Done():
					s.Stop()
					return nil
				case <-closed:
					slog.Warn("allot nri: the container runtime closed the connection; connecting again")
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}
