package heartbeat

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a prometheus.Collector that exposes the agent's Status
// at scrape time, every series labelled with the service:
//
//   - spillway_agent_active_server{server}: 1 for the server in use.
//   - spillway_agent_failovers_total: moves from one server to another.
//   - spillway_agent_registered: 1 while the agent holds a lease.
//
// Register it with one registry per Agent.
func (a *Agent) Collector() prometheus.Collector {
	l := prometheus.Labels{"service": a.service}
	return &collector{
		a:          a,
		active:     prometheus.NewDesc("spillway_agent_active_server", "1 for the registry server the heartbeat agent uses.", []string{"server"}, l),
		failovers:  prometheus.NewDesc("spillway_agent_failovers_total", "Moves of the heartbeat agent from one registry server to another.", nil, l),
		registered: prometheus.NewDesc("spillway_agent_registered", "1 while the heartbeat agent holds a lease, else 0.", nil, l),
	}
}

type collector struct {
	a                             *Agent
	active, failovers, registered *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.active
	ch <- c.failovers
	ch <- c.registered
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.Status()
	if st.Active != "" {
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, 1, st.Active)
	}
	ch <- prometheus.MustNewConstMetric(c.failovers, prometheus.CounterValue, float64(st.Failovers))
	reg := 0.0
	if st.LeaseID != "" {
		reg = 1
	}
	ch <- prometheus.MustNewConstMetric(c.registered, prometheus.GaugeValue, reg)
}
