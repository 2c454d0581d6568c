package nodeinstall_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/helmtool"
	allotclient "github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/realnode"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simgpu"
)

// The chart as a user installs it (helm install, nothing else), on a cluster whose GPU node
// is made of the real kubelet, containerd and runc (kube/realnode), in each of the GPU
// Operator's two setups (docs/gpu-nodes.md):
//
//	gpu-1 (2 GPUs): allot-system/allot ×2       the scheduler and its webhooks (one leads)
//	                allot-system/allot-dashboard
//	                allot-system/allot-agent-gpu [nri (sidecar), agent]
//	                team-a/train: 1 GPU, naming no scheduler: adopted by the chart's
//	                webhook, placed by its scheduler, started by the kubelet with exactly
//	                one device
//	                team-a/half: 0.5 GPU of an image with its own preload list: one
//	                device, HAMi-core's list and the image's
//	                (the leader's pod deleted) team-a/after-failover: 0.5 GPU, placed by
//	                the other replica
//	                alice's ways past her queue's books: each refused, or no GPU seen
//
// Every Allot pod runs as the chart makes it: its image (Allot's own, built here from this
// checkout), its service account and RBAC, its mounts, probes and security context.
func TestChartOnTheRealNode(t *testing.T) {
	if err := realnode.CheckMachine(); err != nil {
		if errors.Is(err, realnode.ErrUnsupported) {
			t.Skipf("REAL-NODE TEST NOT RUN: %v", err)
		}
		t.Fatal(err)
	}
	if testing.Short() {
		t.Skip("REAL-NODE TEST NOT RUN: -short")
	}
	// No limit on the builds (minutes on a cold cache) or on the wait for the machine's
	// kubelet paths (kubeletlock: another package's real node may hold them); each setup
	// has one.
	ctx := context.Background()
	dir := t.TempDir()
	wd, _ := os.Getwd()
	tools, err := realnode.BuildTools(ctx, realnode.DefaultToolsDir(), wd, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if err := realnode.BuildLegacyRuntime(ctx, tools, legacyToolkit, os.Stderr); err != nil {
		t.Fatal(err)
	}
	image, err := allotImage(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	preloaded, err := realnode.PreloadingImageOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, setup := range []struct {
		name   string
		legacy bool   // NVIDIA's runtime in legacy mode as containerd's default
		values string // beside the sharing root and HAMi-core's library; NRI_SOCKET is the node's
	}{{
		// CDI on, NVIDIA's NRI plugin off (the operator's default since 25.10), as
		// docs/gpu-nodes.md says to set it: the agent's devices come by Allot's NRI plugin,
		// not a runtime class. The node's containerd serves NRI at the rig's socket, not
		// /var/run/nri (one machine's path).
		name: "cdi", values: `agent:
  runtimeClassName: ""
  nriSocket: NRI_SOCKET
  pools:
    - name: gpu
      nodeSelector: {nvidia.com/gpu.present: "true"}
      sharing: hami-core
      delivery: cdi
`}, {
		// CDI off: NVIDIA's runtime in legacy mode is containerd's default, and the
		// operator's RuntimeClass nvidia (the chart's agent.runtimeClassName) names it.
		// Allot's NRI plugin runs there too (HAMi-core keeps an image's own preload by it).
		name: "env", legacy: true, values: `agent:
  nriSocket: NRI_SOCKET
  pools:
    - name: gpu
      nodeSelector: {nvidia.com/gpu.present: "true"}
      sharing: hami-core
      delivery: env
`}} {
		t.Run(setup.name, func(t *testing.T) {
			installAndRun(t, ctx, tools, []realnode.Image{image, preloaded}, setup.legacy, setup.values)
		})
	}
}

// legacyToolkit is the NVIDIA container toolkit release whose legacy runtime the env setup
// runs (the GPU Operator 26.7's).
const legacyToolkit = "v1.20.2"

// installAndRun starts a control plane and the real node, installs the chart with values,
// and checks what runs.
func installAndRun(t *testing.T, ctx context.Context, tools realnode.Tools, images []realnode.Image, legacy bool, values string) {
	dir := t.TempDir()
	cluster, err := localcluster.Start(ctx, filepath.Join(dir, "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cluster.Config)
	gpus := simgpu.New(simgpu.Spec{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 2})
	opts := realnode.Options{Name: "gpu-1", Dir: filepath.Join(dir, "node"), Kubeconfig: kubeconfig,
		Config: cluster.Config, Tools: tools, UUIDs: []string{gpus.UUID(0), gpus.UUID(1)},
		Labels: map[string]string{"nvidia.com/gpu.present": "true"}, Images: images}
	if legacy {
		// The device plugin names each GPU in NVIDIA_VISIBLE_DEVICES, as with CDI off.
		opts.Legacy, opts.ListStrategy = &realnode.LegacyRuntime{Version: legacyToolkit, Default: true}, realnode.ListEnvvar
		// What the operator makes beside its runtime, naming the rig's handler of it.
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: realnode.HandlerLegacy}
		if _, err := client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node, err := realnode.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	// From here, one setup's whole run: what waits in vain fails, not hangs.
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()

	// HAMi-core's library as an admin installs it on the node: an empty file stands for it
	// (no driver; the busybox containers are static, their loader reads no preload list).
	hami := filepath.Join(dir, "hami", "libvgpu.so")
	if err := os.MkdirAll(filepath.Dir(hami), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hami, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sharingRoot := filepath.Join(dir, "sharing")
	valuesFile := filepath.Join(dir, "values.yaml")
	values = strings.Replace(values, "agent:\n", "agent:\n  sharingRoot: "+sharingRoot+"\n  hamiCore: {library: "+hami+"}\n", 1)
	if err := os.WriteFile(valuesFile, []byte(strings.ReplaceAll(values, "NRI_SOCKET", node.NRISocket())), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := helmtool.Run(t.TempDir(), "install", "allot", chart, "--kubeconfig", kubeconfig, "--namespace", v1alpha1.SystemNamespace,
		"--create-namespace", "--values", valuesFile, "--wait", "--timeout", "4m")
	if err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, allotPods(ctx, client))
	}
	installed := time.Since(start)
	// helm's --wait counts a DaemonSet of one pod ready with none (it allows its
	// maxUnavailable of 1), so the pods are waited for here: the scheduler's, the
	// dashboard's and the agent's (by the chart's name labels), each Running and Ready.
	var pods *corev1.PodList
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if pods, err = client.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if !ready(&p) {
				return false, nil
			}
		}
		return len(pods.Items) >= 4, nil
	})
	t.Logf("helm install --wait: %s; every pod Ready: %s\n%s", installed.Round(time.Second), time.Since(start).Round(time.Second), allotPods(ctx, client))
	if pods == nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for _, p := range pods.Items {
		byName[p.Labels["app.kubernetes.io/name"]]++
		if !ready(&p) {
			t.Errorf("pod %s is not Running and Ready: %s", p.Name, realnode.PodState(&p))
		}
	}
	// The chart's two scheduler replicas (its default), one dashboard, one agent.
	for name, want := range map[string]int{"allot": 2, "allot-dashboard": 1, "allot-agent": 1} {
		if byName[name] != want {
			t.Errorf("%d pods named %s by app.kubernetes.io/name, want %d:\n%s", byName[name], name, want, allotPods(ctx, client))
		}
	}

	// The agent container read the GPUs through NVML (the rig's stand-in for the driver's
	// library, which the management CDI device mounts) and declared the pool's delivery.
	var inv []v1alpha1.GPUInfo
	var labels map[string]string
	err = wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		labels = n.Labels
		inv, _ = v1alpha1.ParseInventory(n.Annotations[v1alpha1.AnnotationGPUInventory])
		return len(inv) == 2 && labels[v1alpha1.LabelGPUDelivery] != "", nil
	})
	if err != nil {
		t.Fatalf("the agent never reported gpu-1 (inventory %+v, labels %v): %v\n%s", inv, labels, err, allotPods(ctx, client))
	}
	want := v1alpha1.DeliveryCDI
	if legacy {
		want = v1alpha1.DeliveryEnv
	}
	if inv[0].UUID != gpus.UUID(0) || inv[1].UUID != gpus.UUID(1) || labels[v1alpha1.LabelGPUSharing] != v1alpha1.SharingHAMiCore || labels[v1alpha1.LabelGPUDelivery] != want {
		t.Errorf("the agent reported %+v, sharing %q, delivery %q; want the node's GPUs %s and %s, hami-core and %s", inv,
			labels[v1alpha1.LabelGPUSharing], labels[v1alpha1.LabelGPUDelivery], gpus.UUID(0), gpus.UUID(1), want)
	}

	// A tenant's GPU pod, through the chart's webhook (adopted: it names no scheduler) and
	// scheduler, started by the kubelet with one device.
	const ns = "team-a"
	tenant := kubetest.Tenant(t, ctx, cluster.Config, ns, "alice")
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	q.Spec.GPU.Quota = 2
	q.Spec.Namespaces = []string{ns}
	if _, err := allotclient.NewForConfigOrDie(jsonConfig(cluster.Config)).AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	whole := shellPod(ns, "train", realnode.BusyboxImage)
	whole.Spec.Containers[0].Resources.Limits = gpu
	// The webhook adopts a tenant's GPU pod once its informers have seen team-a's Queue;
	// asked with a server-side dry run until it does.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := tenant.CoreV1().Pods(ns).Create(ctx, whole.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && p.Spec.SchedulerName == v1alpha1.SchedulerName, nil
	})
	if err != nil {
		t.Fatalf("the chart's webhook never adopted team-a's GPU pod: %v", err)
	}
	got, saw := runAs(t, ctx, client, tenant, whole, allotPods)
	t.Logf("team-a/train on %s (scheduler %s): /dev has %v", got.Spec.NodeName, got.Spec.SchedulerName, saw.dev)
	if got.Spec.NodeName != "gpu-1" || got.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Errorf("team-a/train: node %q scheduler %q, want gpu-1 and %s", got.Spec.NodeName, got.Spec.SchedulerName, v1alpha1.SchedulerName)
	}
	if n := gpuDevices(saw.dev); n != 1 {
		t.Errorf("team-a/train sees %d GPU devices (%v), want exactly its one", n, saw.dev)
	}

	// Half a GPU, of an image that preloads a library of its own: one device (by Allot's
	// NRI plugin on cdi, NVIDIA's hook reading the scheduler's variable on env), and
	// HAMi-core's library first in /etc/ld.so.preload, then the image's.
	half := shellPod(ns, "half", realnode.PreloadingImage)
	half.Spec.SchedulerName = v1alpha1.SchedulerName
	half.Annotations = map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}
	got, saw = runAs(t, ctx, client, tenant, half, allotPods)
	t.Logf("team-a/half on %s: /dev has %v; /etc/ld.so.preload %q", got.Spec.NodeName, saw.dev, saw.preload)
	if n := gpuDevices(saw.dev); n != 1 {
		t.Errorf("team-a/half sees %d GPU devices (%v), want exactly its one", n, saw.dev)
	}
	if want := v1alpha1.HAMiCoreLibrary(sharingRoot) + " " + realnode.PreloadingLibrary; saw.preload != want {
		t.Errorf("team-a/half reads %q as its /etc/ld.so.preload, want HAMi-core's library, then the image's own: %q", saw.preload, want)
	}

	failOver(t, ctx, client, tenant, ns)
	tenantReachesNoMore(t, ctx, client, tenant, ns, gpus.UUID(1), legacy)
}

// failOver deletes the pod of the replica that leads (the Lease names it: a replica's name
// there is <pod>_<start>) and checks that the other replica takes the Lease, then places
// the tenant's next pod, half a GPU beside team-a/half.
func failOver(t *testing.T, ctx context.Context, client, tenant kubernetes.Interface, ns string) {
	leases := client.CoordinationV1().Leases("kube-system")
	holder := func() string {
		l, err := leases.Get(ctx, scheduler.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return pod
	}
	leader := holder()
	replicas, err := client.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=allot"})
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, p := range replicas.Items {
		if p.Name != leader {
			other = p.Name
		}
	}
	if leader == "" || other == "" || len(replicas.Items) != 2 || !slices.ContainsFunc(replicas.Items, func(p corev1.Pod) bool { return p.Name == leader }) {
		t.Fatalf("the Lease's holder %q is not one of the two replicas' pods (%d of them)", leader, len(replicas.Items))
	}
	start := time.Now()
	if err := client.CoreV1().Pods(v1alpha1.SystemNamespace).Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// The other replica, not the one the Deployment makes in the leader's place.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return holder() == other, nil
	}); err != nil {
		t.Fatalf("%s never took the Lease from %s (holder: %q): %v", other, leader, holder(), err)
	}
	took := time.Since(start)
	next := shellPod(ns, "after-failover", realnode.BusyboxImage)
	next.Spec.SchedulerName = v1alpha1.SchedulerName
	next.Annotations = map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}
	got, saw := runAs(t, ctx, client, tenant, next, allotPods)
	t.Logf("leader %s deleted; %s took the Lease in %s, and placed team-a/after-failover on %s: /dev has %v",
		leader, other, took.Round(100*time.Millisecond), got.Spec.NodeName, saw.dev)
	if gpuDevices(saw.dev) != 1 {
		t.Errorf("team-a/after-failover sees %v, want one GPU", saw.dev)
	}
}

// tenantReachesNoMore tries, as a tenant with edit in ns, the ways to a GPU that its queue
// does not book, against the chart's webhooks and policies as installed (their selectors,
// failure policies and CEL rules, which the in-process tests register their own way): each
// pod is refused at creation, or its container sees no GPU.
func tenantReachesNoMore(t *testing.T, ctx context.Context, client, tenant kubernetes.Interface, ns, uuid string, legacy bool) {
	if _, err := tenant.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "devices", Namespace: ns},
		Data: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	all := []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	type attempt struct {
		name     string
		change   func(*corev1.Pod)
		refuser  string // who refuses it at creation; "" where it runs and must see no GPU
		envSetup bool   // only where NVIDIA's runtime reads the environment (runc ignores it)
	}
	cases := []attempt{
		{"env", func(p *corev1.Pod) { p.Spec.Containers[0].Env = all }, "", true},
		{"envfrom", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "devices"}}}}
		}, "", true},
		{"runtime-class", func(p *corev1.Pod) {
			p.Spec.RuntimeClassName = ptr.To("nvidia")
			p.Spec.Containers[0].Env = all
		}, "", true},
		{"allot-cdi", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"cdi.allot.dev/main": realnode.PluginKind + "=" + uuid}
		}, "allot-cdi-annotations", false},
		{"nvidia-cdi", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"nvidia.cdi.k8s.io/container.main": realnode.PluginKind + "=" + uuid}
		}, "allot-cdi-annotations", false},
		{"management", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"cdi.allot.dev/main": realnode.ManagementKind + "=all"}
		}, "allot-cdi-annotations", false},
		{"by-hand", func(p *corev1.Pod) {
			p.Spec.NodeName = "gpu-1"
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}, "pods.validate.allot.dev", false},
	}
	for _, c := range cases {
		if c.envSetup && !legacy {
			continue
		}
		p := shellPod(ns, "tenant-"+c.name, realnode.BusyboxImage)
		c.change(p)
		if c.refuser != "" {
			_, err := tenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			switch {
			case err == nil:
				t.Errorf("tenant pod %s was admitted", c.name)
			case !strings.Contains(err.Error(), c.refuser):
				t.Errorf("tenant pod %s refused by another than %s: %v", c.name, c.refuser, err)
			default:
				t.Logf("tenant pod %s refused: %s", c.name, shortened(err.Error()))
			}
			continue
		}
		_, saw := runAs(t, ctx, client, tenant, p, allotPods)
		t.Logf("tenant pod %s, asking no GPU, sees %v", c.name, saw.dev)
		if n := gpuDevices(saw.dev); n != 0 {
			t.Errorf("tenant pod %s, asking no GPU, sees %d GPUs: %v", c.name, n, saw.dev)
		}
	}
}

// shortened is s cut short for a log line.
func shortened(s string) string {
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

// shellPod is a pod of team-a's queue, of one busybox container of image that prints its
// GPU devices and its preload list, then stays.
func shellPod(ns, name, image string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", `echo "DEV $(ls /dev | grep nvidia | tr '\n' ' ')"; echo "PRELOAD $(cat /etc/ld.so.preload 2>/dev/null | tr '\n' ' ')"; echo END; exec sleep 3600`}}}}}
}

// seen is what a shellPod's container printed.
type seen struct {
	dev     []string
	preload string
}

// runAs creates p as the tenant and waits until its container has printed what it got.
func runAs(t *testing.T, ctx context.Context, client, tenant kubernetes.Interface, p *corev1.Pod, state func(context.Context, kubernetes.Interface) string) (*corev1.Pod, seen) {
	t.Helper()
	if _, err := tenant.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	var log string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if got, err = client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		log, _ = realnode.ContainerLog(got, "main")
		return strings.Contains(log, "\nEND\n"), nil
	})
	if err != nil {
		t.Fatalf("%s/%s never ran: %v; %s\n%s", p.Namespace, p.Name, err, realnode.PodState(got), state(ctx, client))
	}
	var s seen
	for _, line := range strings.Split(log, "\n") {
		if v, ok := strings.CutPrefix(line, "DEV "); ok {
			s.dev = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "PRELOAD "); ok {
			s.preload = strings.TrimSpace(v)
		}
	}
	return got, s
}

// gpuDevices counts the GPUs among a container's /dev/nvidia* entries (nvidiaN, not the
// control devices).
func gpuDevices(devs []string) int {
	n := 0
	for _, d := range devs {
		if i := strings.TrimPrefix(d, "nvidia"); i != d && i != "" && strings.Trim(i, "0123456789") == "" {
			n++
		}
	}
	return n
}

// chart is Allot's Helm chart in this checkout.
const chart = "../helm/allot"

// TestMain removes the helm built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	helmtool.Cleanup()
	os.Exit(code)
}

// allotImage builds cmd/allot from this checkout as the Dockerfile does (cgo, for NVML) and
// makes it the image the chart names: its repository and the chart's appVersion.
func allotImage(ctx context.Context, dir string) (realnode.Image, error) {
	bin := filepath.Join(dir, "allot")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "../../cmd/allot")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return realnode.Image{}, fmt.Errorf("go build ../../cmd/allot: %v\n%s", err, out)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return realnode.Image{}, err
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		return realnode.Image{}, err
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	if b, err = os.ReadFile(filepath.Join(chart, "values.yaml")); err != nil {
		return realnode.Image{}, err
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		return realnode.Image{}, err
	}
	return realnode.AllotImage(values.Image.Repository+":"+meta.AppVersion, bin)
}

// ready says whether every container of p runs and is ready.
func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// allotPods is a table of the pods in Allot's namespace, and each one's last log lines
// where it is not ready.
func allotPods(ctx context.Context, client kubernetes.Interface) string {
	pods, err := client.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tNODE\tSTATE")
	for _, p := range pods.Items {
		fmt.Fprintf(w, "%s\t%s\t%s\n", p.Name, p.Spec.NodeName, realnode.PodState(&p))
	}
	w.Flush()
	for _, p := range pods.Items {
		if ready(&p) {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if log, err := realnode.ContainerLog(&p, c.Name); err == nil {
				lines := strings.Split(strings.TrimSpace(log), "\n")
				fmt.Fprintf(&b, "--- %s/%s:\n%s\n", p.Name, c.Name, strings.Join(lines[max(0, len(lines)-10):], "\n"))
			}
		}
	}
	return b.String()
}

// jsonConfig is c for clients of Allot's kinds, which have no protobuf encoding.
func jsonConfig(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.ContentType = "application/json"
	return c
}
