package kubeletdm

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
)

// plugin is a simulated NVIDIA device plugin: it offers the node's GPUs by UUID (the
// plugin's default device-id strategy), reports their health, and answers Allocate with
// NVIDIA_VISIBLE_DEVICES as the plugin's envvar strategy does. It speaks the kubelet's
// device-plugin API v1beta1 over a unix socket.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	socket string
	srv    *grpc.Server

	mu      sync.Mutex
	uuids   []string
	healthy map[string]bool
	changed chan struct{}
}

func startPlugin(socket string, uuids []string) (*plugin, error) {
	p := &plugin{socket: socket, uuids: uuids, healthy: map[string]bool{}, changed: make(chan struct{}, 1)}
	for _, u := range uuids {
		p.healthy[u] = true
	}
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("device plugin socket: %w", err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

func (p *plugin) close() {
	p.srv.Stop()
	_ = os.Remove(p.socket)
}

// register announces the plugin to the kubelet, as a device plugin does at start.
func (p *plugin) register(ctx context.Context) error {
	conn, err := agent.DialUnix(pluginapi.KubeletSocket)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version,
		Endpoint: filepath.Base(p.socket), ResourceName: v1alpha1.GPUResource})
	if err != nil {
		return fmt.Errorf("registering the simulated device plugin with the kubelet's device manager: %w", err)
	}
	return nil
}

func (p *plugin) setHealth(uuid string, healthy bool) {
	p.mu.Lock()
	p.healthy[uuid] = healthy
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *plugin) devices() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pluginapi.Device, len(p.uuids))
	for i, u := range p.uuids {
		h := pluginapi.Healthy
		if !p.healthy[u] {
			h = pluginapi.Unhealthy
		}
		out[i] = &pluginapi.Device{ID: u, Health: h}
	}
	return out
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-p.changed:
		}
	}
}

func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		ids := ""
		for i, id := range c.DevicesIds {
			if i > 0 {
				ids += ","
			}
			ids += id
		}
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": ids}})
	}
	return out, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
