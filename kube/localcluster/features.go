package localcluster

import (
	"fmt"
	"sync"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// gates are the feature gates the embedded control plane runs with beyond Kubernetes'
// defaults. DRAConsumableCapacity (alpha in 1.35) lets a device be allocated to several
// claims, each consuming part of its capacity: the way a pod shares a GPU through DRA
// (docs/dra.md), which allot up --dra and the tests show. A real cluster enables it on its
// API server and scheduler; Allot reads which gates its API server runs with.
// HPAScaleToZero (alpha) lets a HorizontalPodAutoscaler's minimum be 0: an inference
// service submitted with --replicas 0:N rests at zero (docs/inference.md); a real cluster
// enables it on its API server and controller manager.
var gates = map[string]bool{"DRAConsumableCapacity": true, "HPAScaleToZero": true}

var gatesOnce sync.Once
var gatesErr error

// setGates sets the gates once per process: the API server and the controllers of this
// process read the one global gate.
func setGates() error {
	gatesOnce.Do(func() {
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
			gatesErr = fmt.Errorf("feature gates %v: %w", gates, err)
			return
		}
		// The gauge kubernetes_feature_enabled on /metrics, as kube-apiserver's command
		// registers it: how Allot's scheduler learns the DRA features the server runs.
		utilfeature.DefaultMutableFeatureGate.AddMetrics()
	})
	return gatesErr
}
