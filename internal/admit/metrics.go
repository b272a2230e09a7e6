package admit

import "github.com/prometheus/client_golang/prometheus"

// Register adds the Listener's gauges and counters to reg.
func (a *Listener) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_grpc_admit_in_setup",
			Help: "New gRPC connections handed to the server and not yet answered.",
		}, func() float64 { return float64(a.Stats().InSetup) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_grpc_admit_waiting",
			Help: "Accepted gRPC connections waiting for a place in setup.",
		}, func() float64 { return float64(a.Stats().Waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_grpc_admit_accepted_total",
			Help: "gRPC connections accepted.",
		}, func() float64 { return float64(a.accepted.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_grpc_admit_refused_total",
			Help: "gRPC connections closed at once because the admission queue was full.",
		}, func() float64 { return float64(a.refused.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_grpc_admit_setup_timeouts_total",
			Help: "gRPC connections that left setup by the setup timeout, without an answer.",
		}, func() float64 { return float64(a.timedOut.Load()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
