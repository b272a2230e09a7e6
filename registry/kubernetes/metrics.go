package kubernetes

import "github.com/prometheus/client_golang/prometheus"

// metrics are the source's Prometheus metrics, labelled by cluster.
type metrics struct {
	stale     *prometheus.GaugeVec
	synced    *prometheus.GaugeVec
	dropped   *prometheus.GaugeVec
	endpoints *prometheus.GaugeVec
	skipped   *prometheus.GaugeVec
	events    *prometheus.CounterVec
	applyErrs prometheus.Counter
	conflicts prometheus.Counter
	badNames  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_kubernetes_cluster_stale",
			Help: "1 while list or watch calls to the cluster fail (or its first sync is late); its last known endpoints are kept.",
		}, []string{"cluster"}),
		synced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_kubernetes_cluster_synced",
			Help: "1 once the cluster's initial state is in the registry.",
		}, []string{"cluster"}),
		dropped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_kubernetes_cluster_dropped",
			Help: "1 while the cluster's endpoints are removed for being stale longer than max_staleness.",
		}, []string{"cluster"}),
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_kubernetes_cluster_endpoints",
			Help: "Healthy and draining endpoints the cluster contributes.",
		}, []string{"cluster"}),
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_kubernetes_cluster_skipped_endpoints",
			Help: "Serving endpoints left out: no usable address, no TCP/UDP port, or an id clash.",
		}, []string{"cluster"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_kubernetes_events_total",
			Help: "Informer notifications by resource and kind (unchanged: an update with no change the source uses, dropped).",
		}, []string{"cluster", "resource", "kind"}),
		applyErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_kubernetes_apply_errors_total",
			Help: "Service updates the registry refused; they are retried.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_kubernetes_id_conflicts_total",
			Help: "Endpoints not applied because their id is taken by another source or another cluster's endpoint.",
		}),
		badNames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_kubernetes_bad_names_total",
			Help: "Endpoints not applied because their DNS name <id>.<service>.<domain> would pass 255 octets or is a service's name.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.stale, m.synced, m.dropped, m.endpoints, m.skipped, m.events, m.applyErrs, m.conflicts, m.badNames)
	}
	return m
}
