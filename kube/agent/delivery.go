package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// DeliveryAuto has the agent read the node's delivery from the GPU Operator.
const DeliveryAuto = "auto"

// clusterPolicyPath is the GPU Operator's ClusterPolicy list (nvidia.com/v1, one object).
const clusterPolicyPath = "/apis/nvidia.com/v1/clusterpolicies"

// clusterPolicy holds the fields of the GPU Operator's ClusterPolicy that say how devices
// reach containers: CDI on or off, and its NRI plugin (operator 26.3 and later), which
// alone injects devices named in a pod's annotations.
type clusterPolicy struct {
	Items []struct {
		Spec struct {
			CDI struct {
				Enabled          *bool `json:"enabled"`
				NRIPluginEnabled *bool `json:"nriPluginEnabled"`
			} `json:"cdi"`
		} `json:"spec"`
	} `json:"items"`
}

// delivery is the node's delivery: the one configured, or with DeliveryAuto the one the
// GPU Operator's ClusterPolicy implies. problem says why none could be had; the node is
// then not labelled, and fractions are not placed there (their reason names the setting).
// transient: the problem may go by itself (the API server did not answer), so a label
// already there is kept.
func (a *Agent) delivery(ctx context.Context) (delivery, problem string, transient bool) {
	switch a.opts.Delivery {
	case "":
		return "", "", false
	case v1alpha1.DeliveryCDI:
		d, problem := a.cdiDelivery()
		return d, problem, false
	case v1alpha1.DeliveryEnv:
		return v1alpha1.DeliveryEnv, "", false
	case DeliveryAuto:
	default:
		return "", fmt.Sprintf("--delivery %q is not one of cdi, env, auto", a.opts.Delivery), false
	}
	raw, err := a.client.Discovery().RESTClient().Get().AbsPath(clusterPolicyPath).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return "", "--delivery auto: no GPU Operator ClusterPolicy in the cluster; set the pool's delivery (cdi or env) in the chart's agent.pools[].delivery", false
	}
	if err != nil {
		return "", fmt.Sprintf("--delivery auto: reading the GPU Operator's ClusterPolicy: %v", err), true
	}
	var cp clusterPolicy
	if err := json.Unmarshal(raw, &cp); err != nil || len(cp.Items) == 0 {
		return "", fmt.Sprintf("--delivery auto: no GPU Operator ClusterPolicy to read (%v); set the pool's delivery in the chart's agent.pools[].delivery", err), false
	}
	c := cp.Items[0].Spec.CDI
	nri := c.NRIPluginEnabled != nil && *c.NRIPluginEnabled
	if a.opts.NRIReadyFile == "" {
		// Not told where Allot's NRI plugin says it is registered (not the chart's agent):
		// as before it, cdi where the operator runs an NRI plugin, else env.
		if nri {
			return v1alpha1.DeliveryCDI, "", false
		}
		return v1alpha1.DeliveryEnv, "", false
	}
	// An operator before 25.10 leaves cdi out of its ClusterPolicy: CDI off, as it was.
	if cdiOn := (c.Enabled != nil && *c.Enabled) || nri; !cdiOn {
		// The operator makes NVIDIA's runtime (legacy mode) containerd's default: it
		// reads NVIDIA_VISIBLE_DEVICES under any pod.
		return v1alpha1.DeliveryEnv, "", false
	}
	// CDI on: the device plugin and the toolkit write CDI specs, which Allot's NRI plugin
	// names (whether or not the operator's own NRI plugin is on: containerd 2 serves NRI
	// by default).
	d, problem := a.cdiDelivery()
	switch {
	case d != "":
		return d, "", false
	case a.opts.SharingRuntimeClass != "":
		// Without NRI, the environment is read only under the operator's nvidia-legacy
		// class, which the webhook gives sharing pods.
		return v1alpha1.DeliveryEnv, "", false
	default:
		return "", "--delivery auto: the GPU Operator runs with CDI on, where NVIDIA's runtime reads no device variable of a pod under the default runtime, and " +
			problem + "; either let Allot's NRI plugin register (containerd 1.7.30+ with NRI enabled, or 2.x), or set the chart's sharing.runtimeClassName to nvidia-legacy for env delivery", false
	}
}

// cdiDelivery is cdi while Allot's NRI plugin is registered with the runtime (or where the
// agent is not told to check), else the problem.
func (a *Agent) cdiDelivery() (string, string) {
	if a.opts.NRIReadyFile == "" {
		return v1alpha1.DeliveryCDI, ""
	}
	if _, err := os.Stat(a.opts.NRIReadyFile); err != nil {
		return "", "Allot's NRI plugin (the agent pod's nri container) is not registered with the container runtime (" + a.opts.NRIReadyFile +
			" missing): containerd must serve NRI (1.7.30+ with [plugins.\"io.containerd.nri.v1.nri\"] disable = false, or 2.x) at the chart's agent.nriSocket"
	}
	return v1alpha1.DeliveryCDI, ""
}
