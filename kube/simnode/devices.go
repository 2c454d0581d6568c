package simnode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/simgpu"
	"github.com/allot-dev/allot/mig"
)

// AnnotationFailGPU on a simulated node makes device INDEX fail (the driver raises XID 79,
// "fallen off the bus"), so that the health path can be watched end to end: the agent
// reports it, the scheduler stops placing there, pods on it get an Event.
const AnnotationFailGPU = "allot.dev/sim-fail-gpu"

// Devices plays, for every simulated node, what a real GPU node has below the scheduler:
// the GPUs themselves (go-nvml's mock, through simgpu), the NVIDIA device plugin handing
// nvidia.com/gpu devices to the containers the kubelet starts, and the kubelet's
// PodResources API on a unix socket that tells the agent who got which. The device plugin
// chooses in its own order (the highest free index first), not the scheduler's, so that
// what the scheduler prefers and what a pod is given differ as they may on a real node.
type Devices struct {
	dir string
	// SharingRoot, HAMiCoreLibrary and MPSControl go to the agents RunAgents starts (see
	// agent.Options): how they enforce sharing on nodes declaring mps or hami-core.
	SharingRoot, HAMiCoreLibrary, MPSControl string
	// IgnoredXIDs go to the agents too: XIDs that fail no device; OnGPUFailure their
	// policy for pods on a failed device.
	IgnoredXIDs  []uint64
	OnGPUFailure string

	mu    sync.Mutex
	nodes map[string]*nodeDevices
}

type nodeDevices struct {
	name    string
	machine *simgpu.Machine
	sharing string
	compute string
	holder  []types.UID // by index; "" when free
	given   map[types.UID]*givenPod
	socket  string
	failed  map[int]bool
	// pluginDown are devices the device plugin took out without an XID (its own health
	// check), until it lists them again.
	pluginDown map[int]bool
	// kubelet, when set, admits the node's pods' devices instead (UseKubelet).
	kubelet NodeKubelet
	// migIDs, under the device plugin's single MIG strategy, are its devices: the MIG
	// devices' UUIDs, in GPU order (holder is by their index then, perGPU to a GPU).
	migIDs []string
	perGPU int
}

// deviceID is how the device plugin names device k to the kubelet: a GPU's UUID, or under
// the single strategy a MIG device's.
func (nd *nodeDevices) deviceID(k int) string {
	if nd.migIDs != nil {
		return nd.migIDs[k]
	}
	return nd.machine.UUID(k)
}

// gpuOf is the GPU device k of the device plugin is (or is on).
func (nd *nodeDevices) gpuOf(k int) int {
	if nd.migIDs != nil {
		return k / max(nd.perGPU, 1)
	}
	return k
}

// NodeKubelet is a node's device accounting done by other code than this package's: the
// kubelet's own device manager and PodResources server (package kubeletdm).
type NodeKubelet interface {
	Allocate(*corev1.Pod) error
	Release(types.UID)
	Socket() string // its PodResources API
}

// UseKubelet has k admit node's devices and serve its PodResources API from now on: the
// node's agent (RunAgents, after this) reads k's.
func (d *Devices) UseKubelet(node string, k NodeKubelet) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if nd := d.nodes[node]; nd != nil {
		nd.kubelet, nd.socket = k, k.Socket()
	}
}

type givenPod struct {
	namespace, name string
	containers      []givenContainer
}

type givenContainer struct {
	name    string
	devices []int
}

// NewDevices keeps the PodResources sockets in dir.
func NewDevices(dir string) *Devices {
	return &Devices{dir: dir, nodes: map[string]*nodeDevices{}}
}

// AddNodes gives the nodes of spec their GPUs and starts each one's PodResources server,
// until ctx ends.
func (d *Devices) AddNodes(ctx context.Context, spec Spec) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	for i := 1; i <= spec.Count; i++ {
		name := fmt.Sprintf("%s-%d", spec.Prefix, i)
		uuids := make([]string, spec.GPUs)
		for g := range uuids {
			uuids[g] = simulatedUUID(name, g)
		}
		nd := &nodeDevices{name: name, sharing: spec.Sharing, compute: spec.Compute, holder: make([]types.UID, spec.GPUs), given: map[types.UID]*givenPod{},
			socket: filepath.Join(d.dir, name+".sock"), failed: map[int]bool{},
			machine: simgpu.New(simgpu.Spec{Model: "NVIDIA " + spec.GPUType, MemoryMiB: spec.GPUMemoryMi, Count: spec.GPUs,
				Links: simgpu.NVSwitch, Sockets: 2, UUIDs: uuids})}
		if spec.MIG() {
			if err := layOutMIG(nd.machine, spec); err != nil {
				return fmt.Errorf("node %s: %w", name, err)
			}
			if spec.MIGStrategy == "single" {
				// The device plugin lists the MIG devices as nvidia.com/gpu.
				for _, dev := range nd.machine.Devices {
					d := dev.(*server.Device)
					for _, gi := range simgpu.GPUInstances(d) {
						for _, ci := range simgpu.ComputeInstances(gi) {
							nd.migIDs = append(nd.migIDs, simgpu.MIGUUID(d, gi.Info.Id, ci.Info.Id))
						}
					}
				}
				nd.perGPU, nd.holder = len(spec.MIGLayout), make([]types.UID, len(nd.migIDs))
			}
		}
		_ = os.Remove(nd.socket)
		l, err := net.Listen("unix", nd.socket)
		if err != nil {
			return fmt.Errorf("pod resources socket for %s: %w", name, err)
		}
		srv := grpc.NewServer()
		podresourcesv1.RegisterPodResourcesListerServer(srv, &podResources{d: d, node: name})
		go func() { _ = srv.Serve(l) }()
		go func() { <-ctx.Done(); srv.Stop() }()
		d.mu.Lock()
		d.nodes[name] = nd
		d.mu.Unlock()
	}
	return nil
}

// Machine is a simulated node's GPUs; nil for a node Devices does not play.
func (d *Devices) Machine(node string) *simgpu.Machine {
	d.mu.Lock()
	defer d.mu.Unlock()
	if nd := d.nodes[node]; nd != nil {
		return nd.machine
	}
	return nil
}

// Socket is where a simulated node's PodResources API listens.
func (d *Devices) Socket(node string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if nd := d.nodes[node]; nd != nil {
		return nd.socket
	}
	return filepath.Join(d.dir, node+".sock")
}

// RunAgents runs the real agent for every node Devices plays, against the node's mock
// GPUs and PodResources socket, until ctx ends.
func (d *Devices) RunAgents(ctx context.Context, client kubernetes.Interface, metrics *agent.Metrics, interval time.Duration) error {
	d.mu.Lock()
	nodes := make([]*nodeDevices, 0, len(d.nodes))
	for _, nd := range d.nodes {
		nodes = append(nodes, nd)
	}
	d.mu.Unlock()
	// As the chart installs them: Allot's namespace is there before the agents start, so
	// that each writes its Lease before it marks its node (a node marked without a Lease
	// is one whose agent is gone, to the scheduler).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	// An agent run with the chart's rights (no namespaces) leaves that to the installer.
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("namespace %s: %w", v1alpha1.SystemNamespace, err)
	}
	for _, nd := range nodes {
		pr, closeConn, err := agent.DialPodResources(nd.socket)
		if err != nil {
			return err
		}
		// The simulated pool's admin takes slices on trust where it enforces nothing: the
		// simulated kubelet runs no container for a limit to hold.
		a, err := agent.New(client, agent.Options{Node: nd.name, NVML: nd.machine, PodResources: pr, PodResourcesSocket: nd.socket, Sharing: nd.sharing,
			Compute: nd.compute, FractionsOnTrust: true,
			Interval: interval, Metrics: metrics, Version: "simulated",
			SharingRoot: d.SharingRoot, HAMiCoreLibrary: d.HAMiCoreLibrary, MPSControl: d.MPSControl, IgnoredXIDs: d.IgnoredXIDs, OnGPUFailure: d.OnGPUFailure})
		if err != nil {
			closeConn()
			return err
		}
		go func() {
			defer closeConn()
			if err := a.Run(ctx); err != nil && ctx.Err() == nil {
				slog.Warn("simulated node: agent stopped", "node", nd.name, "err", err)
			}
		}()
	}
	// Back once every agent has marked its node (as a DaemonSet's pods are ready): what is
	// placed from then on is placed by the reported devices, never by index because an
	// agent had not started yet.
	var unmarked string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, nd := range nodes {
			n, err := client.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
			if err != nil || n.Annotations[v1alpha1.AnnotationAgent] == "" {
				unmarked = nd.name
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the agent of node %s did not mark its node (annotation %s): %w", unmarked, v1alpha1.AnnotationAgent, err)
	}
	return nil
}

// Allocate hands a starting pod the devices its containers ask for, as the device plugin
// does at admission. It fails, as a kubelet's admission does, when too few are free.
func (d *Devices) Allocate(p *corev1.Pod) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nd := d.nodes[p.Spec.NodeName]
	if nd == nil {
		return false, nil
	}
	if nd.kubelet != nil {
		return true, nd.kubelet.Allocate(p)
	}
	if _, ok := nd.given[p.UID]; ok {
		return true, nil
	}
	gp := &givenPod{namespace: p.Namespace, name: p.Name}
	// As the kubelet's device manager: a plain init container's devices are handed on to
	// the containers after it (it has ended by then); a sidecar's and a container's are
	// their own for the pod's life. So the pod holds v1alpha1.PodAmount of them.
	var taken, reusable []int
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		want := int(v1alpha1.ContainerAsks(&c, GPUResource))
		plainInit := slices.ContainsFunc(p.Spec.InitContainers, func(i corev1.Container) bool { return i.Name == c.Name }) &&
			(c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways)
		n := min(want, len(reusable))
		devs := slices.Clone(reusable[:n])
		if !plainInit {
			reusable = reusable[n:]
		}
		// Then the highest free index first, healthy devices only.
		for g := len(nd.holder) - 1; g >= 0 && len(devs) < want; g-- {
			if nd.holder[g] == "" && !nd.failed[g] && !nd.pluginDown[g] {
				devs = append(devs, g)
				nd.holder[g] = p.UID
				taken = append(taken, g)
				if plainInit {
					reusable = append(reusable, g)
				}
			}
		}
		if len(devs) < want {
			for _, g := range taken {
				nd.holder[g] = ""
			}
			return true, fmt.Errorf("Allocate failed due to requested number of devices unavailable for %s. Requested: %d, Available: %d", GPUResource, want, len(devs))
		}
		if want > 0 {
			sort.Ints(devs)
			gp.containers = append(gp.containers, givenContainer{name: c.Name, devices: devs})
		}
	}
	nd.given[p.UID] = gp
	return true, nil
}

// Release frees what a pod was given.
func (d *Devices) Release(node string, uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nd := d.nodes[node]
	if nd == nil {
		return
	}
	if nd.kubelet != nil {
		nd.kubelet.Release(uid)
		return
	}
	for g, h := range nd.holder {
		if h == uid {
			nd.holder[g] = ""
		}
	}
	delete(nd.given, uid)
}

// fail makes device g of node fail, once.
func (d *Devices) fail(node string, g int) {
	d.mu.Lock()
	nd := d.nodes[node]
	if nd == nil || g < 0 || g >= len(nd.holder) || nd.failed[g] {
		d.mu.Unlock()
		return
	}
	nd.failed[g] = true
	d.mu.Unlock()
	nd.machine.RaiseXID(g, 79)
}

// SetPluginHealth has the device plugin take device g of node out, or list it again, as
// NVIDIA's plugin does on its own health checks: the kubelet's allocatable devices change,
// and no XID is raised.
func (d *Devices) SetPluginHealth(node string, g int, healthy bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nd := d.nodes[node]
	if nd == nil {
		return
	}
	if nd.pluginDown == nil {
		nd.pluginDown = map[int]bool{}
	}
	nd.pluginDown[g] = !healthy
}

// failRequested fails the device a node's AnnotationFailGPU names.
func (d *Devices) failRequested(n *corev1.Node) {
	if v, ok := n.Annotations[AnnotationFailGPU]; ok {
		if g, err := strconv.Atoi(v); err == nil {
			d.fail(n.Name, g)
		}
	}
}

// plays tells whether Devices plays this node.
func (d *Devices) plays(node string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodes[node] != nil
}

// setLoad has each simulated GPU as busy, and its memory as used, as the pods on it make it.
func (d *Devices) setLoad(node string, busy []float64, memUsedMiB []int64) {
	m := d.Machine(node)
	if m == nil {
		return
	}
	for g := range min(len(busy), len(m.Devices)) {
		m.SetLoad(g, uint32(min(100, busy[g])+0.5), uint64(memUsedMiB[g]))
	}
}

// podResources serves one simulated node's kubelet PodResources API.
type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	d    *Devices
	node string
}

func (s *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	nd := s.d.nodes[s.node]
	out := &podresourcesv1.ListPodResourcesResponse{}
	for _, gp := range nd.given {
		out.PodResources = append(out.PodResources, s.podOf(nd, gp))
	}
	sort.Slice(out.PodResources, func(a, b int) bool {
		return out.PodResources[a].Namespace+"/"+out.PodResources[a].Name < out.PodResources[b].Namespace+"/"+out.PodResources[b].Name
	})
	return out, nil
}

func (s *podResources) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	nd := s.d.nodes[s.node]
	for _, gp := range nd.given {
		if gp.namespace == req.PodNamespace && gp.name == req.PodName {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: s.podOf(nd, gp)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s not found", req.PodNamespace, req.PodName)
}

func (s *podResources) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	nd := s.d.nodes[s.node]
	var ids []string
	for g := range nd.holder {
		if !nd.failed[g] && !nd.pluginDown[g] {
			ids = append(ids, nd.deviceID(g))
		}
	}
	return &podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{{ResourceName: v1alpha1.GPUResource, DeviceIds: ids}}}, nil
}

// podOf is one pod's entry, devices named by UUID as the NVIDIA device plugin names them.
func (s *podResources) podOf(nd *nodeDevices, gp *givenPod) *podresourcesv1.PodResources {
	pr := &podresourcesv1.PodResources{Name: gp.name, Namespace: gp.namespace}
	for _, c := range gp.containers {
		ids := make([]string, len(c.devices))
		for i, g := range c.devices {
			ids[i] = nd.deviceID(g)
		}
		pr.Containers = append(pr.Containers, &podresourcesv1.ContainerResources{Name: c.name,
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: v1alpha1.GPUResource, DeviceIds: ids}}})
	}
	return pr
}

// load is how busy each device of a node is and how much of its memory is used, from the
// pods running there: whole devices as the device plugin gave them, shares where the
// scheduler put them.
func (d *Devices) load(node string, gpus int, memMiB int64, pods []*corev1.Pod) ([]float64, []int64) {
	busy, mem := make([]float64, gpus), make([]int64, gpus)
	d.mu.Lock()
	nd := d.nodes[node]
	held := map[types.UID][]int{}
	if nd != nil {
		for uid, gp := range nd.given {
			for _, c := range gp.containers {
				for _, k := range c.devices {
					held[uid] = append(held[uid], nd.gpuOf(k))
				}
			}
		}
	}
	d.mu.Unlock()
	for _, p := range pods {
		percent, ok := podBusy(p)
		if !ok {
			continue
		}
		indices, share := v1alpha1.HeldGPUs(p)
		if h, ok := held[p.UID]; ok {
			indices, share = h, 1
		}
		for _, g := range indices {
			if g >= 0 && g < gpus {
				busy[g] += share * percent
				mem[g] += int64(share * float64(memMiB) * 0.9) // a job fills most of what it holds
			}
		}
	}
	return busy, mem
}

// layOutMIG puts a machine's GPUs in MIG mode and makes the spec's fixed layout on each,
// through NVML as an admin's nvidia-smi (or the MIG manager) would.
func layOutMIG(m *simgpu.Machine, spec Spec) error {
	model, err := spec.migModel()
	if err != nil {
		return err
	}
	for i, d := range m.Devices {
		if r, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: MIG mode: %v", i, r)
		}
		var layout mig.Layout
		for _, name := range spec.MIGLayout {
			p, _ := model.Profile(name)
			start := -1
			for _, s := range p.Starts {
				if model.Valid(layout, p, s) == nil {
					start = s
					break
				}
			}
			if start < 0 {
				return fmt.Errorf("GPU %d: no room for %s beside %v", i, name, spec.MIGLayout)
			}
			if _, err := agent.CreateMIGInstance(d, model, name, start); err != nil {
				return fmt.Errorf("GPU %d: %w", i, err)
			}
			layout = append(layout, mig.Placed{Profile: p, Start: start})
		}
	}
	return nil
}
