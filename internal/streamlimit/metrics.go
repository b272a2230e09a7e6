package streamlimit

import "github.com/prometheus/client_golang/prometheus"

// Register adds the Limiter's gauges and counter to reg. No metric has a
// caller's identity in its labels.
func (l *Limiter) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_grpc_streams_open",
			Help: "gRPC streams open, counted by the per-identity stream limit.",
		}, func() float64 { return float64(l.Stats().Open) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_grpc_stream_identities",
			Help: "Callers (identities, or anonymous peer IPs) with at least one gRPC stream open.",
		}, func() float64 { return float64(l.Stats().Identities) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "spillway_grpc_streams_refused_total",
			Help:        "gRPC streams refused with RESOURCE_EXHAUSTED, by reason (identity: the caller already held its per-identity limit).",
			ConstLabels: prometheus.Labels{"reason": "identity"},
		}, func() float64 { return float64(l.refused.Load()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
