package deploy_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/scheduler"
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
				t.Errorf("agent securityContext %s: want uid 0 with every capability dropped, read-only, unprivileged", mustJSON(t, sc))
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
			if got := ptrOr(pod.Spec.RuntimeClassName); got != c.runtimeClass {
				t.Errorf("agent runtime class %q, want %q", got, c.runtimeClass)
			}
			if got := pod.Annotations["nvidia.cdi.k8s.io/container.agent"]; (got != "") != c.nri || (c.nri && got != "management.nvidia.com/gpu=all") {
				t.Errorf("agent NRI device annotation %q (want one: %v)", got, c.nri)
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
	if a, b := mustJSON(t, chart.Spec), mustJSON(t, want.Spec); a != b {
		t.Errorf("the chart's policy differs from the scheduler's:\nchart:     %s\nscheduler: %s", a, b)
	}
	if objs["ValidatingAdmissionPolicyBinding/allot-pod-fields"] == nil {
		t.Error("no binding for allot-pod-fields")
	}
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(fmt.Sprint(string(b)))
}

// An mps pool runs the MPS daemons from a container of their own in the agent's pod, so
// that they outlive the agent's restarts: the agent is told to leave starting them to it,
// and it may change user (the control daemon starts servers as their clients' user) and
// nothing else.
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
	if sc == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"SETUID", "SETGID"}) ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("mps container securityContext %s", mustJSON(t, sc))
	}
	if len(mps.VolumeMounts) != 1 || mps.VolumeMounts[0].MountPath != "/run/allot/sharing" {
		t.Errorf("mps container mounts %v, want the sharing root", mps.VolumeMounts)
	}
}
