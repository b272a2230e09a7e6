package clientlib

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes a Conn's Status as metrics, read at scrape time. Every
// series carries the labels service (the caller) and target.
type collector struct {
	c                                                 *Conn
	active, reason, switches, eligible, flag, flagErr *prometheus.Desc
	polls, rolloutErr                                 *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(c *Conn) *collector {
	l := prometheus.Labels{"service": c.opts.service, "target": c.target}
	return &collector{
		c: c,
		active: prometheus.NewDesc("spillway_client_active_channel",
			"1 for the channel new RPCs use (dns or xds), 0 for the other.", []string{"channel"}, l),
		reason: prometheus.NewDesc("spillway_client_reason",
			"1 for the reason the active channel is the one it is (see clientlib.Reason); one series per Conn.", []string{"reason"}, l),
		switches: prometheus.NewDesc("spillway_client_switches_total",
			"Switches of the active channel, by the channel switched to and the reason.", []string{"to", "reason"}, l),
		eligible: prometheus.NewDesc("spillway_client_eligible",
			"1 when the rollout config lets the caller use xDS, else 0; rule is the deciding rule's index (-1: none).", []string{"rule"}, l),
		flag: prometheus.NewDesc("spillway_client_panic_flag_xds",
			"The last panic flag read: 1 for xds=on, 0 for xds=off; absent before the first read.", nil, l),
		flagErr: prometheus.NewDesc("spillway_client_panic_flag_errors_total",
			"Failed reads of the panic flag (TXT _xds.<domain>).", nil, l),
		polls: prometheus.NewDesc("spillway_client_polls_total",
			"Polls begun: each re-reads the rollout config and, while eligible, the panic flag.", nil, l),
		rolloutErr: prometheus.NewDesc("spillway_client_rollout_errors_total",
			"Failed reads of the rollout config (the last decision is kept).", nil, l),
	}
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.active
	ch <- m.reason
	ch <- m.switches
	ch <- m.eligible
	ch <- m.flag
	ch <- m.flagErr
	ch <- m.polls
	ch <- m.rolloutErr
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	s := m.c.status.Load()
	for _, c := range []Channel{DNS, XDS} {
		v := 0.0
		if s.Channel == c {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.active, prometheus.GaugeValue, v, c.String())
	}
	ch <- prometheus.MustNewConstMetric(m.reason, prometheus.GaugeValue, 1, string(s.Reason))
	for k, n := range s.switchCounts {
		ch <- prometheus.MustNewConstMetric(m.switches, prometheus.CounterValue, float64(n), k.to.String(), string(k.reason))
	}
	e := 0.0
	if s.Eligibility.Eligible {
		e = 1
	}
	ch <- prometheus.MustNewConstMetric(m.eligible, prometheus.GaugeValue, e, strconv.Itoa(s.Eligibility.Rule))
	switch s.Flag {
	case "on":
		ch <- prometheus.MustNewConstMetric(m.flag, prometheus.GaugeValue, 1)
	case "off":
		ch <- prometheus.MustNewConstMetric(m.flag, prometheus.GaugeValue, 0)
	}
	ch <- prometheus.MustNewConstMetric(m.flagErr, prometheus.CounterValue, float64(s.FlagErrors))
	ch <- prometheus.MustNewConstMetric(m.polls, prometheus.CounterValue, float64(s.Polls))
	ch <- prometheus.MustNewConstMetric(m.rolloutErr, prometheus.CounterValue, float64(s.RolloutErrors))
}
