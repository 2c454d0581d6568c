package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/simgpu"
)

// What a node declares, by the pool's setting, the GPU Operator's ClusterPolicy (auto),
// whether Allot's NRI plugin is registered, and the sharing runtime class: cdi only while
// the plugin is registered; env under CDI only with a runtime class that reads it; else
// nothing, with the reason naming what to set.
func TestDeliveryDeclaredOnlyWhereItReachesTheContainer(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	missing := filepath.Join(dir, "missing")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	policy := func(cdi, nri string) string {
		return `{"items":[{"spec":{"cdi":{"enabled":` + cdi + `,"nriPluginEnabled":` + nri + `}}}]}`
	}
	for _, c := range []struct {
		name, delivery, policy, readyFile, runtimeClass string
		want, problem                                   string
	}{
		{"cdi, plugin registered", v1alpha1.DeliveryCDI, "", ready, "", v1alpha1.DeliveryCDI, ""},
		{"cdi, plugin not registered", v1alpha1.DeliveryCDI, "", missing, "", "", "Allot's NRI plugin"},
		{"env as set", v1alpha1.DeliveryEnv, "", missing, "", v1alpha1.DeliveryEnv, ""},
		{"auto, CDI off", DeliveryAuto, policy("false", "false"), missing, "", v1alpha1.DeliveryEnv, ""},
		{"auto, CDI on, operator's NRI off, Allot's registered (the operator's default setup)", DeliveryAuto, policy("true", "false"), ready, "", v1alpha1.DeliveryCDI, ""},
		{"auto, CDI on with the operator's NRI plugin", DeliveryAuto, policy("true", "true"), ready, "", v1alpha1.DeliveryCDI, ""},
		{"auto, CDI on, no NRI, a legacy runtime class", DeliveryAuto, policy("true", "false"), missing, "nvidia-legacy", v1alpha1.DeliveryEnv, ""},
		{"auto, CDI on, no NRI, no runtime class: fractions would run under runc and see no GPU", DeliveryAuto, policy("true", "false"), missing, "", "", "sharing.runtimeClassName"},
		{"auto, no ClusterPolicy", DeliveryAuto, "", ready, "", "", "no GPU Operator ClusterPolicy"},
		{"auto, an operator before 25.10 (no cdi in its ClusterPolicy)", DeliveryAuto, `{"items":[{"spec":{}}]}`, ready, "", v1alpha1.DeliveryEnv, ""},
		{"auto, not the chart's agent (no ready file), CDI on, no NRI: as before", DeliveryAuto, policy("true", "false"), "", "", v1alpha1.DeliveryEnv, ""},
		{"auto, not the chart's agent, the operator's NRI plugin: as before", DeliveryAuto, policy("true", "true"), "", "", v1alpha1.DeliveryCDI, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != clusterPolicyPath || c.policy == "" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(c.policy))
			}))
			defer srv.Close()
			client := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
			a, err := New(client, Options{Node: "n", NVML: simgpu.DGXA100(), Delivery: c.delivery, NRIReadyFile: c.readyFile, SharingRuntimeClass: c.runtimeClass})
			if err != nil {
				t.Fatal(err)
			}
			got, problem, _ := a.delivery(context.Background())
			if got != c.want || (c.problem == "") != (problem == "") || !strings.Contains(problem, c.problem) {
				t.Errorf("declared %q (problem %q), want %q (problem with %q)", got, problem, c.want, c.problem)
			}
		})
	}
}

// A file of the sharing root that the kubelet made a directory (a pod mounted its subPath
// before the agent wrote it) is written over when the directory is empty; a directory
// holding something is refused with its path, never removed.
func TestSharingFileWrittenOverTheKubeletsEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "hami-core", "ld.so.preload")
	if err := os.MkdirAll(list, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(list, []byte("/lib/libvgpu.so\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(list); err != nil || string(b) != "/lib/libvgpu.so\n" {
		t.Errorf("the list reads %q, %v", b, err)
	}
	full := filepath.Join(dir, "other")
	if err := os.MkdirAll(filepath.Join(full, "kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(full, []byte("x")); err == nil || !strings.Contains(err.Error(), full) {
		t.Errorf("a directory holding something: %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, "kept")); err != nil {
		t.Errorf("what the directory held is gone: %v", err)
	}
}
