package weights

import "github.com/prometheus/client_golang/prometheus"

type plannerMetrics struct {
	sameZone      *prometheus.GaugeVec
	sameZoneFleet prometheus.Gauge
	fallbacks     *prometheus.GaugeVec
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
	}
}

func (m *plannerMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.sameZone, m.sameZoneFleet, m.fallbacks} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
