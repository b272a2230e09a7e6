package registry

import "github.com/prometheus/client_golang/prometheus"

var (
	descVersion   = prometheus.NewDesc("spillway_registry_version", "Global version of the registry store.", nil, nil)
	descServices  = prometheus.NewDesc("spillway_registry_services", "Known services.", nil, nil)
	descEndpoints = prometheus.NewDesc("spillway_registry_endpoints", "Endpoints across all services.", nil, nil)
	descWrites    = prometheus.NewDesc("spillway_registry_writes_total", "Store writes that changed something.", nil, nil)
	descSynced    = prometheus.NewDesc("spillway_registry_synced", "1 once every source delivered its initial state.", nil, nil)
)

// Collector exports the store's size and version at scrape time; it adds
// nothing to the write path.
type Collector struct{ s *Store }

// NewCollector returns a prometheus.Collector for s.
func NewCollector(s *Store) Collector { return Collector{s: s} }

var _ prometheus.Collector = Collector{}

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVersion, descServices, descEndpoints, descWrites, descSynced} {
		ch <- d
	}
	c.describeServing(ch)
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.Snapshot()
	synced := 0.0
	if c.s.Synced() {
		synced = 1
	}
	ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, float64(snap.Version()))
	ch <- prometheus.MustNewConstMetric(descServices, prometheus.GaugeValue, float64(snap.Len()))
	ch <- prometheus.MustNewConstMetric(descEndpoints, prometheus.GaugeValue, float64(snap.EndpointCount()))
	ch <- prometheus.MustNewConstMetric(descWrites, prometheus.CounterValue, float64(c.s.Writes()))
	ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, synced)
	c.collectServing(ch)
}
