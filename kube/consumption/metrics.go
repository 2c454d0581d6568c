package consumption

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the consumption as Prometheus counters, for dashboards that read Prometheus
// (deploy/grafana): GPU-seconds given, measured and used, by queue, user, node pool and GPU
// model, added as each look is written. The days in ConfigMaps stay the record: a counter
// starts again at a restart, which Prometheus's increase() and rate() allow for.
type Metrics struct {
	given, measured, used *prometheus.CounterVec
}

// NewMetrics makes the counters; register them with Collectors.
func NewMetrics() *Metrics {
	labels := []string{"queue", "user", "pool", "model"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &Metrics{
		given:    counter("allot_gpu_seconds_allocated_total", "GPU-seconds given to running pods (a share of a GPU counts as that share)."),
		measured: counter("allot_gpu_seconds_measured_total", "Of the GPU-seconds given, those whose utilisation the GPUs' agent reported."),
		used:     counter("allot_gpu_seconds_used_total", "Of the measured GPU-seconds, the busy part (measured × utilisation)."),
	}
}

// Collectors are the counters, to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.given, m.measured, m.used}
}

func (m *Metrics) add(k Key, f Figures) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"queue": k.Queue, "user": k.User, "pool": k.Pool, "model": k.Model}
	m.given.With(l).Add(f.Allocated)
	m.measured.With(l).Add(f.Measured)
	m.used.With(l).Add(f.Used)
}
