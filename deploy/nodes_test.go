package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// The chart as it lands on the two GPU node setups people run, checked for what a stock
// node needs of the agent: an identity that reaches the kubelet's PodResources socket
// (root's own, mode 0750) and nothing more, the socket's directory mounted, probes, and
// the device path of its setup (a runtime class, or the NRI plugin's annotation); and of
// the scheduler, the delivery settings of that setup.
func TestHelmGPUNodeSetups(t *testing.T) {
	for _, c := range []struct {
		name         string
		set          []string // helm template arguments
		runtimeClass string   // the agent's
		nri          bool     // the agent's devices by NRI annotation
		delivery     string
		schedArgs    []string
	}{
		{"GPU Operator with CDI and its NRI plugin", []string{"--set", "agent.runtimeClassName=", "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true", "--set", "agent.pools[0].sharing=none", "--set", "agent.pools[0].delivery=cdi"}, "", true, "cdi",
			[]string{"--cdi-kind=k8s.device-plugin.nvidia.com/gpu"}},
		{"GPU Operator with CDI, no NRI plugin", []string{"--set", "sharing.runtimeClassName=nvidia-legacy"}, "nvidia", false, "auto",
			[]string{"--sharing-runtime-class=nvidia-legacy"}},
		{"NVIDIA's runtime as the node's default", []string{"--set", "agent.runtimeClassName=", "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true", "--set", "agent.pools[0].sharing=none", "--set", "agent.pools[0].delivery=env"}, "", false, "env", nil},
		// The plugin delivers nothing there, but keeps a sharing image's own preload.
		{"NVIDIA's runtime as the node's default, HAMi-core", []string{"--set", "agent.runtimeClassName=", "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true", "--set", "agent.pools[0].sharing=hami-core", "--set", "agent.pools[0].delivery=env"}, "", false, "env", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := deploy.Render(t, c.set...)
			ds := as[appsv1.DaemonSet](t, objs["DaemonSet/allot-agent-gpu"])
			pod := ds.Spec.Template
			agent := pod.Spec.Containers[0]
			sc := agent.SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				(sc.Privileged != nil && *sc.Privileged) {
				t.Errorf("agent securityContext %s: want uid 0 with every capability dropped, read-only, unprivileged", string(deploy.MustJSON(t, sc)))
			}
			var mounted bool
			for _, m := range agent.VolumeMounts {
				if m.MountPath == "/var/lib/kubelet/pod-resources" && m.ReadOnly {
					mounted = true
				}
			}
			if !mounted || !slices.Contains(agent.Args, "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock") {
				t.Errorf("the kubelet's socket is not mounted read-only where the agent dials it: %v %v", agent.VolumeMounts, agent.Args)
			}
			if agent.LivenessProbe == nil || agent.LivenessProbe.HTTPGet.Path != "/healthz" || agent.ReadinessProbe == nil || agent.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("agent probes: liveness %v readiness %v", agent.LivenessProbe, agent.ReadinessProbe)
			}
			if got := ptr.Deref(pod.Spec.RuntimeClassName, ""); got != c.runtimeClass {
				t.Errorf("agent runtime class %q, want %q", got, c.runtimeClass)
			}
			if got := pod.Annotations["cdi.allot.dev/agent"]; (got != "") != c.nri || (c.nri && got != "management.nvidia.com/gpu=all") {
				t.Errorf("agent CDI device annotation %q (want one: %v)", got, c.nri)
			}
			if _, ok := pod.Annotations["nvidia.cdi.k8s.io/container.agent"]; ok {
				t.Error("the agent's pod names its devices for NVIDIA's NRI plugin, which gives none outside the GPU Operator's namespace (toolkit 1.19) or none of management's (1.20)")
			}
			// Allot's NRI plugin wherever a pool's sharing pods may get their device by CDI,
			// started before the agent (a sidecar with a startup probe), which is told to
			// declare cdi only once it is registered; and on HAMi-core pools of env delivery
			// (it keeps a sharing image's own preload), where the agent waits on it for nothing.
			hasNRI := len(pod.Spec.InitContainers) == 1 && pod.Spec.InitContainers[0].Name == "nri" &&
				ptr.Deref(pod.Spec.InitContainers[0].RestartPolicy, "") == corev1.ContainerRestartPolicyAlways
			cdi := c.delivery != "env"
			wantNRI := cdi || slices.Contains(c.set, "agent.pools[0].sharing=hami-core")
			if hasNRI != wantNRI || slices.Contains(agent.Args, "--nri-ready-file=/run/allot-nri/ready") != cdi ||
				slices.Contains(agent.Args, "--cdi-device-ids=uuid") != cdi || (hasNRI && (pod.Spec.InitContainers[0].StartupProbe != nil) != cdi) {
				t.Errorf("nri sidecar %v (want it: %v, the agent waiting on it: %v), agent args %v", pod.Spec.InitContainers, wantNRI, cdi, agent.Args)
			}
			if !slices.Contains(agent.Args, "--delivery="+c.delivery) {
				t.Errorf("agent args %v lack --delivery=%s", agent.Args, c.delivery)
			}
			sched := as[appsv1.Deployment](t, objs["Deployment/allot"]).Spec.Template.Spec.Containers[0]
			for _, want := range c.schedArgs {
				if !slices.Contains(sched.Args, want) {
					t.Errorf("scheduler args %v lack %s", sched.Args, want)
				}
			}
		})
	}
}

// The chart's allot-pod-fields policy is the one the scheduler installs where the chart
// is not used, with the agent's account as the only device recorder.
func TestHelmFieldsPolicyIsTheSchedulers(t *testing.T) {
	objs := deploy.Render(t)
	chart := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs["ValidatingAdmissionPolicy/allot-pod-fields"])
	want, _ := scheduler.FieldsPolicy([]string{"system:serviceaccount:allot-system:allot-agent"})
	if a, b := string(deploy.MustJSON(t, chart.Spec)), string(deploy.MustJSON(t, want.Spec)); a != b {
		t.Errorf("the chart's policy differs from the scheduler's:\nchart:     %s\nscheduler: %s", a, b)
	}
	if objs["ValidatingAdmissionPolicyBinding/allot-pod-fields"] == nil {
		t.Error("no binding for allot-pod-fields")
	}
}

// The chart's allot-gpu-configmaps policy is the one the scheduler installs where the
// chart is not used, with the scheduler's account as the writer.
func TestHelmGPUConfigMapsPolicyIsTheSchedulers(t *testing.T) {
	objs := deploy.Render(t)
	chart := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs["ValidatingAdmissionPolicy/"+scheduler.ConfigMapsPolicyName])
	want, _ := scheduler.ConfigMapsPolicy([]string{"system:serviceaccount:allot-system:allot"})
	if a, b := string(deploy.MustJSON(t, chart.Spec)), string(deploy.MustJSON(t, want.Spec)); a != b {
		t.Errorf("the chart's policy differs from the scheduler's:\nchart:     %s\nscheduler: %s", a, b)
	}
	if objs["ValidatingAdmissionPolicyBinding/"+scheduler.ConfigMapsPolicyName] == nil {
		t.Error("no binding for " + scheduler.ConfigMapsPolicyName)
	}
}

// A pool whose device plugin names GPUs by index (DEVICE_ID_STRATEGY=index) says so
// through its agent, so that the bind names a fraction's CDI device the same way.
func TestHelmPoolDeviceIDStrategy(t *testing.T) {
	objs := deploy.Render(t, "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true",
		"--set", "agent.pools[0].sharing=none", "--set", "agent.pools[0].delivery=cdi", "--set", "agent.pools[0].deviceIDStrategy=index")
	agent := as[appsv1.DaemonSet](t, objs["DaemonSet/allot-agent-gpu"]).Spec.Template.Spec.Containers[0]
	if !slices.Contains(agent.Args, "--cdi-device-ids=index") {
		t.Errorf("agent args %v lack --cdi-device-ids=index", agent.Args)
	}
}

// An mps pool runs the MPS daemons from a container of their own in the agent's pod, so
// that they outlive the agent's restarts: the agent is told to leave starting them to it,
// and it may change user (the control daemon starts servers as their clients' user) and
// set a GPU's compute mode (SYS_ADMIN, which the driver asks for), nothing else.
func TestHelmMPSDaemonsHaveAContainerOfTheirOwn(t *testing.T) {
	objs := deploy.Render(t, "--set", "agent.pools[0].name=gpu", "--set-string", "agent.pools[0].nodeSelector.nvidia\\.com/gpu\\.present=true",
		"--set", "agent.pools[0].sharing=mps")
	pod := as[appsv1.DaemonSet](t, objs["DaemonSet/allot-agent-gpu"]).Spec.Template.Spec
	if len(pod.Containers) != 2 || pod.Containers[1].Name != "mps" {
		t.Fatalf("containers %v, want the agent and mps", len(pod.Containers))
	}
	if !slices.Contains(pod.Containers[0].Args, "--mps-host") {
		t.Errorf("agent args %v lack --mps-host", pod.Containers[0].Args)
	}
	mps := pod.Containers[1]
	if mps.Args[0] != "mps-host" || !slices.Contains(mps.Args, "--sharing-root=/run/allot/sharing") {
		t.Errorf("mps container args %v", mps.Args)
	}
	sc := mps.SecurityContext
	if sc == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"SETUID", "SETGID", "SYS_ADMIN"}) ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("mps container securityContext %s", string(deploy.MustJSON(t, sc)))
	}
	// The daemons' /dev/shm is the directory the scheduler names as /dev/shm to the
	// sharing pods of an mps node (ALLOT_SHM_DIR), which mps-host checks is its own.
	want := []corev1.VolumeMount{{Name: "sharing", MountPath: "/run/allot/sharing"},
		{Name: "sharing", MountPath: "/dev/shm", SubPath: "shm/" + v1alpha1.ShmMPS}}
	if !slices.Equal(mps.VolumeMounts, want) || slices.ContainsFunc(mps.Args, func(a string) bool { return strings.HasPrefix(a, "--shm") }) {
		t.Errorf("mps container mounts %+v (args %v), want the sharing root and its shm/mps as /dev/shm, checked at mps-host's default --shm", mps.VolumeMounts, mps.Args)
	}
}

// The chart's allot-cdi-annotations policy on a real API server: a pod of any scheduler
// that names a CDI device in NVIDIA's NRI annotations or Allot's is refused, adding one later too,
// while Allot's bind writes them for a fraction on a cdi node and the fraction's other
// fields stay editable.
func TestCDIAnnotationsOnlyFromTheBind(t *testing.T) {
	objs := deploy.Render(t)
	e := kubetest.Start(t, 1, 2)
	install(t, e, objs, "ValidatingAdmissionPolicy/allot-cdi-annotations", "ValidatingAdmissionPolicyBinding/allot-cdi-annotations")
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"` + v1alpha1.LabelGPUDelivery + `":"cdi"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 2, nil)
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sneaky", Namespace: "default",
		Annotations: map[string]string{"nvidia.cdi.k8s.io/container.main": "k8s.device-plugin.nvidia.com/gpu=all"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	e.WaitFor(t, "the policy in force", func() (bool, string) {
		_, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, bare, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "CDI device annotations"), fmt.Sprint(err)
	})
	// Allot's own NRI plugin's key, which would give a pod of any scheduler the device.
	ours := bare.DeepCopy()
	ours.Name, ours.Annotations = "sneaky-allot", map[string]string{"cdi.allot.dev/main": "k8s.device-plugin.nvidia.com/gpu=all"}
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, ours, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "CDI device annotations") {
		t.Errorf("a pod naming its own device for Allot's NRI plugin: %v", err)
	}
	plain := bare.DeepCopy()
	plain.Name, plain.Annotations = "plain", nil
	if _, err := e.Client.CoreV1().Pods("default").Create(e.Ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	add := []byte(`{"metadata":{"annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=all"}}}`)
	if _, err := e.Client.CoreV1().Pods("default").Patch(e.Ctx, "plain", "application/merge-patch+json", add, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "CDI device annotations") {
		t.Errorf("a CDI annotation added to a running pod: %v", err)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "nb", Queue: "team-a", Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}})
	e.WaitFor(t, "nb running with its CDI annotation", func() (bool, string) {
		p := e.Pods(t, "default")["nb"]
		return kubetest.Running(p) && p.Annotations["cdi.allot.dev/main"] != "", fmt.Sprint(p.Status.Phase, p.Annotations)
	})
	if _, err := e.Client.CoreV1().Pods("default").Patch(e.Ctx, "nb", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"experiment":"7"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label of its own on nb: %v", err)
	}
}

// The scheduler's container is told its memory limit (ALLOT_MEMORY_LIMIT, from
// resources.limits.memory), which it keeps the Go runtime to (internal/cli/memlimit.go), and
// the chart sets one.
func TestHelmSchedulerKnowsItsMemoryLimit(t *testing.T) {
	d := as[appsv1.Deployment](t, deploy.Render(t)["Deployment/allot"])
	c := d.Spec.Template.Spec.Containers[0]
	if c.Resources.Limits.Memory().IsZero() {
		t.Fatalf("the scheduler has no memory limit: %+v", c.Resources)
	}
	for _, e := range c.Env {
		if e.Name == "ALLOT_MEMORY_LIMIT" {
			if e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
				t.Errorf("ALLOT_MEMORY_LIMIT is %+v, want limits.memory", e)
			}
			return
		}
	}
	t.Errorf("the scheduler's container has no ALLOT_MEMORY_LIMIT: %+v", c.Env)
}
