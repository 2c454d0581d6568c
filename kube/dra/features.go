package dra

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"

	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/structured"
)

// The allocator must be given the DRA features the API server serves: a field of a feature
// it does not serve is dropped at the write, and an allocator told of a feature the slices
// cannot carry (or not told of one they do) drops devices without a word (KAI-Scheduler
// issue 2100). The API server says which gates it runs with in its own metrics,
// kubernetes_feature_enabled{name="…"}, which is what ReadFeatures reads.

// DefaultFeatures are Kubernetes 1.35's defaults, for an API server whose metrics cannot be
// read: prioritized lists and admin access (beta, on), the rest alpha and off (the embedded
// API server, with kube-apiserver's defaults, reports exactly these).
var DefaultFeatures = structured.Features{PrioritizedList: true, AdminAccess: true}

var featureLine = regexp.MustCompile(`^kubernetes_feature_enabled\{[^}]*name="([A-Za-z0-9]+)"[^}]*\} ([01])`)

// ParseFeatures reads the allocator's features from an API server's /metrics page; ok is
// false when the page lists no feature gate at all.
func ParseFeatures(metrics []byte) (f structured.Features, ok bool) {
	on := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := featureLine.FindSubmatch(sc.Bytes()); m != nil {
			on[string(m[1])] = string(m[2]) == "1"
			ok = true
		}
	}
	if sc.Err() != nil {
		ok = false // a page cut short: its gates are not all known
	}
	f = structured.Features{
		AdminAccess:            on["DRAAdminAccess"],
		ConsumableCapacity:     on["DRAConsumableCapacity"],
		DeviceBindingAndStatus: on["DRADeviceBindingConditions"] && on["DRAResourceClaimDeviceStatus"],
		DeviceTaints:           on["DRADeviceTaints"],
		PartitionableDevices:   on["DRAPartitionableDevices"],
		PrioritizedList:        on["DRAPrioritizedList"],
	}
	return f, ok
}

// ReadFeatures asks the API server for its gates (GET /metrics, which the chart's role
// allows); where it cannot, it returns DefaultFeatures and says why.
func ReadFeatures(ctx context.Context, rc rest.Interface) (structured.Features, error) {
	body, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return DefaultFeatures, fmt.Errorf("reading the API server's feature gates from /metrics: %w; using Kubernetes 1.35's defaults", err)
	}
	f, ok := ParseFeatures(body)
	if !ok {
		return DefaultFeatures, fmt.Errorf("the API server's /metrics lists no kubernetes_feature_enabled; using Kubernetes 1.35's defaults")
	}
	return f, nil
}
