package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device list strategies of NVIDIA's device plugin (its DEVICE_LIST_STRATEGY): how the
// devices it allocates reach the container.
const (
	// ListCDICRI: CDI device names in the Allocate response, which the kubelet passes to
	// the runtime in the CRI's CDIDevices and containerd resolves against the specs. The
	// GPU Operator's setting where CDI is on.
	ListCDICRI = "cdi-cri"
	// ListEnvvar: NVIDIA_VISIBLE_DEVICES in the container's environment, which the NVIDIA
	// runtime in legacy mode reads.
	ListEnvvar = "envvar"
)

// devicePlugin answers the real kubelet over the device-plugin API v1beta1 as NVIDIA's
// device plugin does: the node's GPUs under its ID strategy, all healthy, and Allocate by
// its list strategy. It stands in for NVIDIA's plugin, which needs NVML to start.
type devicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	n      *Node
	socket string
	srv    *grpc.Server
}

func (n *Node) startDevicePlugin(ctx context.Context) error {
	// The kubelet makes the device-plugin directory and serves its registration socket a
	// moment after it starts.
	if err := waitSocket(ctx, pluginapi.KubeletSocket, 2*time.Minute, n.logPath("kubelet")); err != nil {
		return err
	}
	p := &devicePlugin{n: n, socket: filepath.Join(pluginapi.DevicePluginPath, "allot-realnode-nvidia.sock")}
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("device plugin socket: %w", err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(l) }()
	n.onStop(func() { p.srv.Stop(); _ = os.Remove(p.socket) })
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version,
		Endpoint: filepath.Base(p.socket), ResourceName: "nvidia.com/gpu"})
	if err != nil {
		return fmt.Errorf("registering the device plugin with the kubelet: %w", err)
	}
	return nil
}

func (p *devicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *devicePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, g := range p.n.GPUs {
		devs = append(devs, &pluginapi.Device{ID: g.ID(p.n.opts.IDStrategy), Health: pluginapi.Healthy})
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *devicePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		resp := &pluginapi.ContainerAllocateResponse{}
		switch p.n.opts.ListStrategy {
		case ListEnvvar:
			resp.Envs = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")}
		default:
			for _, id := range c.DevicesIds {
				resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: PluginKind + "=" + id})
			}
		}
		out.ContainerResponses = append(out.ContainerResponses, resp)
	}
	return out, nil
}

func (p *devicePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *devicePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
