package weights

import "github.com/prometheus/client_golang/prometheus"

type plannerMetrics struct {
	sameZone      *prometheus.GaugeVec
	sameZoneFleet prometheus.Gauge
	fallbacks     *prometheus.GaugeVec
	// subsetSize and subsetBalance describe the subsets of the services
	// that have them; a service without loses its series.
	subsetSize    *prometheus.GaugeVec
	subsetBalance *prometheus.GaugeVec
	subsetSlots   *prometheus.GaugeVec
}

func newPlannerMetrics() *plannerMetrics {
	return &plannerMetrics{
		sameZone: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_zoneaware_same_zone_ratio", Help: "Estimated share of a service's traffic served in the client's own zone under the pushed weights.",
		}, []string{"service"}),
		sameZoneFleet: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spillway_zoneaware_fleet_same_zone_ratio", Help: "Estimated same-zone share of all measured traffic, weighted by demand.",
		}),
		fallbacks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_zoneaware_services", Help: "Services by the state of their zone-aware weights (none = computed from load reports; others are fallbacks).",
		}, []string{"state"}),
		subsetSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_subset_size", Help: "The subset size a service's config asks for (subset_size), for services whose clients get subsets.",
		}, []string{"service"}),
		subsetBalance: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_subset_clients_per_endpoint_max_over_avg", Help: "Of a service with subsets: the most client slots holding one healthy endpoint over the average (1 is perfectly even).",
		}, []string{"service"}),
		subsetSlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_subset_slots", Help: "Of a service with subsets: the client slots (streams of every replica this planner counts) given a subset.",
		}, []string{"service"}),
	}
}

func (m *plannerMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.sameZone, m.sameZoneFleet, m.fallbacks, m.subsetSize, m.subsetBalance, m.subsetSlots} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
