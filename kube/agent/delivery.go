package agent

import (
	"context"
	"encoding/json"
	"fmt"

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
func (a *Agent) delivery(ctx context.Context) (delivery, problem string) {
	switch a.opts.Delivery {
	case "":
		return "", ""
	case v1alpha1.DeliveryCDI, v1alpha1.DeliveryEnv:
		return a.opts.Delivery, ""
	case DeliveryAuto:
	default:
		return "", fmt.Sprintf("--delivery %q is not one of cdi, env, auto", a.opts.Delivery)
	}
	raw, err := a.client.Discovery().RESTClient().Get().AbsPath(clusterPolicyPath).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return "", "--delivery auto: no GPU Operator ClusterPolicy in the cluster; set the pool's delivery (cdi or env) in the chart's agent.pools[].delivery"
	}
	if err != nil {
		return "", fmt.Sprintf("--delivery auto: reading the GPU Operator's ClusterPolicy: %v", err)
	}
	var cp clusterPolicy
	if err := json.Unmarshal(raw, &cp); err != nil || len(cp.Items) == 0 {
		return "", fmt.Sprintf("--delivery auto: no GPU Operator ClusterPolicy to read (%v); set the pool's delivery in the chart's agent.pools[].delivery", err)
	}
	c := cp.Items[0].Spec.CDI
	if c.NRIPluginEnabled != nil && *c.NRIPluginEnabled {
		return v1alpha1.DeliveryCDI, ""
	}
	// CDI without the NRI plugin reads no pod annotation: the device goes by environment,
	// under the operator's nvidia-legacy runtime class where CDI is on (the chart's
	// sharing.runtimeClassName), or its nvidia class where it is off.
	return v1alpha1.DeliveryEnv, ""
}
