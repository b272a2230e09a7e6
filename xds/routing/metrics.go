package routing

import "github.com/prometheus/client_golang/prometheus"

var brokenDesc = prometheus.NewDesc("spillway_routes_broken",
	"Route rules of a service left out of its route configuration because a target is not registered (their RPCs take the default route); only services with rules have a series.",
	[]string{"service"}, nil)

// Collector returns the metric spillway_routes_broken{service}: the
// service's broken rules (Broken), one series per service with rules.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- brokenDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, svc := range c.s.Services() {
		ch <- prometheus.MustNewConstMetric(brokenDesc, prometheus.GaugeValue, float64(len(c.s.Broken(svc))), svc)
	}
}
