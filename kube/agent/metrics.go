package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// Metrics are the agent's per-device gauges, named and labelled as NVIDIA's DCGM exporter
// names them where it has one, so that Grafana boards made for it read the agent's.
type Metrics struct {
	util, fbUsed, fbFree, xid, healthy *prometheus.GaugeVec
}

// dcgmLabels are the DCGM exporter's labels for a device.
var dcgmLabels = []string{"gpu", "UUID", "device", "modelName", "Hostname"}

// NewMetrics makes the gauges; register Collectors. One set serves every agent of a
// process (the simulated nodes of allot up), told apart by Hostname.
func NewMetrics() *Metrics {
	m := &Metrics{
		util:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL", Help: "GPU utilization (in %)."}, dcgmLabels),
		fbUsed:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED", Help: "Framebuffer memory used (in MiB)."}, dcgmLabels),
		fbFree:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_FREE", Help: "Framebuffer memory free (in MiB)."}, dcgmLabels),
		xid:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_XID_ERRORS", Help: "Value of the last XID error encountered."}, dcgmLabels),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_agent_gpu_healthy", Help: "1 while the device is healthy, 0 once the agent found it failed (an XID error, a double-bit ECC error, off the bus)."}, dcgmLabels),
	}
	return m
}

// Collectors are the series to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.util, m.fbUsed, m.fbFree, m.xid, m.healthy}
}

func (m *Metrics) observe(node string, inv []v1alpha1.GPUInfo, s Sample, unhealthy map[int]v1alpha1.UnhealthyGPU, lastXID map[int]uint64) {
	if m == nil {
		return
	}
	for i, g := range inv {
		if i < len(s.Utilization) {
			l := labels(node, i, g)
			if s.Utilization[i] < 0 {
				// Not read (UtilizationUnknown): no series, rather than a -1 a dashboard
				// would average in.
				m.util.Delete(l)
			} else {
				m.util.With(l).Set(float64(s.Utilization[i]))
			}
			m.fbUsed.With(l).Set(float64(s.MemoryUsed[i]))
			m.fbFree.With(l).Set(float64(max(g.MemoryMiB-s.MemoryUsed[i], 0)))
		}
	}
	m.observeHealth(node, inv, unhealthy, lastXID)
}

// observeHealth sets the health series at once when a device fails, not at the next load
// report.
func (m *Metrics) observeHealth(node string, inv []v1alpha1.GPUInfo, unhealthy map[int]v1alpha1.UnhealthyGPU, lastXID map[int]uint64) {
	if m == nil {
		return
	}
	for i, g := range inv {
		l := labels(node, i, g)
		m.xid.With(l).Set(float64(lastXID[i]))
		h := 1.0
		if _, bad := unhealthy[i]; bad {
			h = 0
		}
		m.healthy.With(l).Set(h)
	}
}

func labels(node string, i int, g v1alpha1.GPUInfo) prometheus.Labels {
	return prometheus.Labels{"gpu": strconv.Itoa(i), "UUID": g.UUID, "device": "nvidia" + strconv.Itoa(i), "modelName": g.Model, "Hostname": node}
}
