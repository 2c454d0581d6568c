package admission

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Metrics are the webhooks' Prometheus series. A refusal is the webhook doing its job
// (a pod that cannot run, said at submission); an error is the webhook failing.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics returns the series, unregistered; Collectors lists them for a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_admission_requests_total",
			Help: "Admission reviews answered, by webhook and result (allowed, refused, error)."}, []string{"webhook", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "allot_admission_duration_seconds",
			Help: "Time to answer an admission review, by webhook.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}, []string{"webhook"}),
	}
}

// Collectors are the series to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration}
}

// instrument counts and times h's answers under name; a nil m leaves h as it is.
func (m *Metrics) instrument(name string, h admission.Handler) admission.Handler {
	if m == nil {
		return h
	}
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		start := time.Now()
		resp := h.Handle(ctx, req)
		m.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(name, result(resp)).Inc()
		return resp
	})
}

// result names an answer: a review the webhook could not decode (400) or failed on (5xx)
// is an error; any other refusal (403) is a pod refused with a reason.
func result(r admission.Response) string {
	if r.Allowed {
		return "allowed"
	}
	if r.Result != nil && (r.Result.Code == http.StatusBadRequest || r.Result.Code >= http.StatusInternalServerError) {
		return "error"
	}
	return "refused"
}
