package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/trainingop"
	"github.com/allot-dev/allot/kube/agent"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/realnode"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simgpu"
	"github.com/allot-dev/allot/kube/stack"
)

// One control plane and one real node serve every test of the package: the node is the
// machine's (one kubelet per machine), and starting it takes a while.
var (
	rig     *realnode.Node
	client  kubernetes.Interface
	cluster *localcluster.Cluster
	rigErr  error
	machine *simgpu.Machine
	tools   realnode.Tools
	rigOpts realnode.Options
)

// restartRig starts the machine's real node again (one node per machine) with the options
// of rigOpts that change sets, as a node's kubelet, runtime and device plugin restart: the
// Node object and what the agent wrote on it stay.
func restartRig(t *testing.T, change func(*realnode.Options)) {
	t.Helper()
	rig.Stop()
	ctx := context.Background()
	o := rigOpts
	change(&o)
	next, err := realnode.Start(ctx, o)
	if err != nil {
		rigErr = fmt.Errorf("starting the real node again: %w", err)
		rig = nil
		t.Fatal(rigErr)
	}
	rig = next
}

// sharingRoot is the directory the agent shares with sharing pods on the real node.
const sharingRoot = "/var/lib/allot-realnode-test/sharing"

// agentOpts are real-1's agent's; stopAgent ends the one running; rootCtx ends with the
// package's tests (TestMain), before the API server stops: an agent still watching would
// hold its shutdown for its whole grace period.
var (
	agentOpts agent.Options
	stopAgent context.CancelFunc
	rootCtx   context.Context
)

// waitNRIRegistered waits, as the chart's startup probe makes the agent wait, until Allot's
// NRI plugin is registered with the node's containerd (a containerd started anew takes it
// again a moment later): the agent reads the node's delivery by it at its start.
func waitNRIRegistered(ctx context.Context) error {
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(rig.NRIReadyFile())
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("Allot's NRI plugin is not registered with the node's containerd: %w", err)
	}
	return nil
}

// runAgent runs real-1's agent with opts in place of the one running, until the next
// runAgent or the package's end, and waits until the node carries the delivery it
// declares.
func runAgent(opts agent.Options) error {
	ctx := rootCtx
	if stopAgent != nil {
		stopAgent()
	}
	if opts.Delivery == v1alpha1.DeliveryCDI {
		if err := waitNRIRegistered(ctx); err != nil {
			return err
		}
	}
	actx, cancel := context.WithCancel(ctx)
	stopAgent = cancel
	if err := rig.RunAgent(actx, client, opts); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "real-1", metav1.GetOptions{})
		return err == nil && n.Labels[v1alpha1.LabelGPUSharing] == opts.Sharing && n.Labels[v1alpha1.LabelGPUDelivery] == opts.Delivery, nil
	})
}

// newAgent is another agent of real-1, as after the agent's restart.
func newAgent() (*agent.Agent, func(), error) { return rig.NewAgent(client, agentOpts) }

// startAllot runs Allot's webhooks and scheduler in this process against the cluster, and
// on real-1 what the chart's agent pod runs there (realnode.RunAllot): Allot's NRI plugin
// and the agent, its GPUs on go-nvml's mock, declaring hami-core sharing and cdi delivery.
func startAllot(ctx context.Context, dir string) error {
	if err := os.RemoveAll(sharingRoot); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// No driver, no HAMi-core: an empty library stands for libvgpu.so (busybox is static,
	// the dynamic loader never reads the list).
	lib := filepath.Join(dir, "libvgpu.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		return err
	}
	// A node's interruption notice stops its pods after interruptionGrace (a minute by
	// default): TestSpotNoticeOnTheRealNode waits it out.
	if _, err := stack.Local(ctx, cluster.Config, dir, scheduler.Options{Interval: 200 * time.Millisecond, SharingRoot: sharingRoot,
		InterruptionGrace: interruptionGrace}); err != nil {
		return err
	}
	agentOpts = agent.Options{NVML: machine, Sharing: v1alpha1.SharingHAMiCore, Delivery: v1alpha1.DeliveryCDI, Interval: time.Second,
		Version: "realnode-test", SharingRoot: sharingRoot, HAMiCoreLibrary: lib}
	// What realnode.RunAllot does, with the agent kept apart so that a test may run
	// another in its place (runAgent).
	if err := rig.RunNRIPlugin(ctx, sharingRoot); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return runAgent(agentOpts)
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := realnode.CheckMachine(); err != nil {
		// Said on every run, not only with -v: the tests below skip with the same words.
		fmt.Fprintf(os.Stderr, "REAL-NODE TESTS DO NOT RUN HERE: %v\n", err)
		rigErr = err
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rootCtx = ctx
	defer trainingop.Cleanup()
	dir, err := os.MkdirTemp("", "allot-realnode-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("ALLOT_REALNODE_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "realnode: keeping", dir)
	}
	wd, _ := os.Getwd()
	tools, err = realnode.BuildTools(ctx, realnode.DefaultToolsDir(), wd, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err = localcluster.Start(ctx, filepath.Join(dir, "cluster"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	defer cancel() // Allot's clients stop before the API server
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client = kubernetes.NewForConfigOrDie(cluster.Config)
	// The GPUs NVML reports to the agent (go-nvml's mock: no driver here) are the devices
	// the node makes, by UUID.
	machine = simgpu.New(simgpu.Spec{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 4})
	var uuids []string
	for i := range 4 {
		uuids = append(uuids, machine.UUID(i))
	}
	start := time.Now()
	preloaded, err := realnode.PreloadingImageOf(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cuda, err := cudaLikeImage()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// NVIDIA's legacy runtime is registered (not the default), as the GPU Operator with CDI
	// on registers its nvidia-legacy class: any pod may name it.
	if err := realnode.BuildLegacyRuntime(ctx, tools, legacyVersion, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rigOpts = realnode.Options{Name: "real-1", Dir: filepath.Join(dir, "node"), Kubeconfig: kubeconfig,
		Config: cluster.Config, Tools: tools, UUIDs: uuids, Images: []realnode.Image{preloaded, cuda},
		Legacy: &realnode.LegacyRuntime{Version: legacyVersion}}
	rig, err = realnode.Start(ctx, rigOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the real node:", err)
		return 1
	}
	defer func() { // the one running then (restartRig), if any
		if rig != nil {
			rig.Stop()
		}
	}()
	fmt.Fprintf(os.Stderr, "realnode: node real-1 Ready with 4 GPUs in %s\n", time.Since(start).Round(100*time.Millisecond))
	if n, err := client.CoreV1().Nodes().Get(ctx, "real-1", metav1.GetOptions{}); err == nil {
		fmt.Fprintf(os.Stderr, "realnode: taints %v addresses %v\n", n.Spec.Taints, n.Status.Addresses)
	}
	if err := startAllot(ctx, filepath.Join(dir, "allot")); err != nil {
		fmt.Fprintln(os.Stderr, "starting Allot on the real node:", err)
		return 1
	}
	return m.Run()
}

// need skips a test where the machine cannot run the node, naming why (TestMain printed
// it too, whatever the flags).
func need(t *testing.T) {
	t.Helper()
	if rigErr != nil {
		if errors.Is(rigErr, realnode.ErrUnsupported) {
			t.Skipf("REAL-NODE TEST NOT RUN: %v", rigErr)
		}
		t.Fatal(rigErr)
	}
}

// shellPod is a pod of busybox containers on the real node, each running script and then
// sleeping, so that what it printed is in its log while it runs.
func shellPod(ns, name string, containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: "real-1", RestartPolicy: corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64)}}
	for _, c := range containers {
		if c.Image == "" {
			c.Image = realnode.BusyboxImage
		}
		c.ImagePullPolicy = corev1.PullNever
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// script is a container that prints what it got (its devices, its environment, its
// mounts), marks the end, and stays.
func script(name string) corev1.Container {
	return corev1.Container{Name: name, Command: []string{"sh", "-c",
		`echo "DEV $(ls /dev | tr '\n' ' ')"; echo "PRELOAD $(cat /etc/ld.so.preload 2>&1 | tr '\n' ' ')"; echo "SHARING $(cd ` + sharingRoot + ` 2>/dev/null && find . | sort | tr '\n' ' ')"; env | sed 's/^/ENV /'; sed 's/^/MNT /' /proc/self/mounts; echo END; exec sleep 3600`}}
}

// Seen is what one container printed.
type Seen struct {
	Dev     []string
	Preload string   // /etc/ld.so.preload as the container reads it
	Sharing []string // what the container sees under the sharing root
	Env     map[string]string
	Mounts  []string
}

func (s Seen) NVIDIA() []string {
	var out []string
	for _, d := range s.Dev {
		if strings.HasPrefix(d, "nvidia") {
			out = append(out, d)
		}
	}
	return out
}

// runAndRead creates p, waits until each container of names has printed END, and reads
// what each printed.
func runAndRead(t *testing.T, p *corev1.Pod, names ...string) map[string]Seen {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{}); err != nil {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return runAndReadAs(t, client, p, names...)
}

// runAndReadAs is runAndRead with the pod created by as (a tenant), in a namespace that is
// there.
func runAndReadAs(t *testing.T, as kubernetes.Interface, p *corev1.Pod, names ...string) map[string]Seen {
	t.Helper()
	ctx := context.Background()
	if _, err := as.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	out := map[string]Seen{}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = realnode.PodState(cur)
		for _, name := range names {
			if _, ok := out[name]; ok {
				continue
			}
			// The kubelet's own log files of the container: the API server cannot reach
			// the kubelet's API (the kubelet takes no loopback node address, and the rig
			// gives it no other).
			b, err := realnode.ContainerLog(cur, name)
			if err != nil || !strings.Contains(b, "\nEND\n") {
				return false, nil
			}
			out[name] = parseSeen(b)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v; last state: %s\nits Events: %s\n%s", p.Namespace, p.Name, err, last, events(p.Namespace, p.Name), nodeLogs(p.Name))
	}
	return out
}

func parseSeen(log string) Seen {
	s := Seen{Env: map[string]string{}}
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(line, "DEV "):
			s.Dev = strings.Fields(strings.TrimPrefix(line, "DEV "))
		case strings.HasPrefix(line, "SHARING "):
			s.Sharing = strings.Fields(strings.TrimPrefix(line, "SHARING "))
		case strings.HasPrefix(line, "PRELOAD "):
			s.Preload = strings.TrimSpace(strings.TrimPrefix(line, "PRELOAD "))
		case strings.HasPrefix(line, "ENV "):
			k, v, _ := strings.Cut(strings.TrimPrefix(line, "ENV "), "=")
			s.Env[k] = v
		case strings.HasPrefix(line, "MNT "):
			s.Mounts = append(s.Mounts, strings.TrimPrefix(line, "MNT "))
		}
	}
	return s
}

// events are the Events of a pod, a line each.
func events(ns, name string) string {
	list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, "\n")
}

// nodeLogs are the kubelet's and containerd's last lines that name a pod, or that are
// errors: what a test that waited in vain prints.
func nodeLogs(pod string) string {
	var b strings.Builder
	for _, name := range []string{"kubelet", "containerd"} {
		data, _ := os.ReadFile(rig.Log(name))
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, pod) || strings.HasPrefix(l, "E") || strings.Contains(l, "level=error") {
				lines = append(lines, l)
			}
		}
		lines = lines[max(0, len(lines)-15):]
		fmt.Fprintf(&b, "--- %s (%s), last lines naming %s or errors:\n%s\n", name, rig.Log(name), pod, strings.Join(lines, "\n"))
	}
	return b.String()
}

// withNVIDIANRI runs NVIDIA's NRI plugin of toolkit version for the rest of the test.
func withNVIDIANRI(t *testing.T, version string, managementNamespaces ...string) {
	t.Helper()
	if err := realnode.BuildToolkit(context.Background(), tools, version, os.Stderr); err != nil {
		t.Fatal(err)
	}
	p, err := rig.StartNVIDIANRI(context.Background(), version, managementNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
}
