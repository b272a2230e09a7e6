package xds

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	streams    *prometheus.GaugeVec
	pushes     *prometheus.CounterVec
	suppressed *prometheus.CounterVec
	// pushesBy and suppressedBy are pushes and suppressed by type index,
	// looked up once: the send path does not hash label values.
	pushesBy, suppressedBy [4]prometheus.Counter
	stale                  *prometheus.CounterVec
	nacks                  *prometheus.CounterVec
	invalid                *prometheus.CounterVec
	pushLatency            prometheus.Histogram
	lrsReports             prometheus.Counter
	lrsRequests            *prometheus.CounterVec
	lrsDropped             *prometheus.CounterVec
	subsetKept             prometheus.Counter
}

func newMetrics(*Server) *metrics {
	m := newMetricVecs()
	for t, url := range typeURLs {
		m.pushesBy[t] = m.pushes.WithLabelValues(shortType(url))
		m.suppressedBy[t] = m.suppressed.WithLabelValues(shortType(url))
	}
	return m
}

func newMetricVecs() *metrics {
	return &metrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_xds_streams", Help: "Connected ADS streams by protocol (sotw, delta) and client zone.",
		}, []string{"protocol", "zone"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_xds_pushes_total", Help: "xDS responses sent, by type.",
		}, []string{"type"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_xds_pushes_suppressed_total", Help: "Responses not sent because the stream already had that content (or rejected it).",
		}, []string{"type"}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_xds_stale_requests_total", Help: "Requests answering an older response nonce, ignored.",
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_xds_nacks_total", Help: "Responses rejected by clients, by type and service.",
		}, []string{"type", "service"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_xds_invalid_resources_total", Help: "Resources that failed validation and were not pushed.",
		}, []string{"type"}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spillway_xds_push_latency_seconds",
			Help:    "From a store change to the Send of a response carrying it (includes the debounce).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10},
		}),
		subsetKept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_xds_subset_streams_unchanged_total", Help: "Streams of a changed service that were not woken: their subset's endpoints and weights stayed as last built.",
		}),
		lrsReports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_lrs_cluster_reports_total", Help: "Per-cluster load reports received over LRS.",
		}),
		lrsRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_lrs_requests_total", Help: "Requests reported over LRS, by client zone, upstream zone and result.",
		}, []string{"client_zone", "upstream_zone", "result"}),
		lrsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_lrs_dropped_total", Help: "Load reports not recorded: per cluster for an unknown cluster (not a service) or no interval, per upstream locality for a locality where the service has no endpoint.",
		}, []string{"reason"}),
	}
}

// freeZone deletes the series of a client zone that lost its slot in the
// zone set; no stream holds it.
func (m *metrics) freeZone(zone string) {
	m.streams.DeletePartialMatch(prometheus.Labels{"zone": zone})
	m.lrsRequests.DeletePartialMatch(prometheus.Labels{"client_zone": zone})
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.streams, m.pushes, m.suppressed, m.stale, m.nacks, m.invalid, m.pushLatency, m.lrsReports, m.lrsRequests, m.lrsDropped, m.subsetKept} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
