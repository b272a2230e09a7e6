package resolver

import (
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	qtypeLabels = []string{"A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY", "other"}
	rcodeLabels = []string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "other"}
)

func qtypeIndex(t uint16) int {
	switch t {
	case dns.TypeA:
		return 0
	case dns.TypeAAAA:
		return 1
	case dns.TypeSRV:
		return 2
	case dns.TypeTXT:
		return 3
	case dns.TypeSOA:
		return 4
	case dns.TypeNS:
		return 5
	case dns.TypeANY:
		return 6
	}
	return 7
}

func rcodeIndex(rc int) int {
	switch {
	case rc >= 0 && rc <= 3:
		return rc
	case rc == dns.RcodeNotImplemented:
		return 4
	case rc == dns.RcodeRefused:
		return 5
	case rc == dns.RcodeBadVers:
		return 6
	}
	return 7
}

type metrics struct {
	queries   *prometheus.CounterVec
	byLabel   [8][8]prometheus.Counter // resolved once so the hot path does no label lookup
	latency   prometheus.Histogram
	truncated prometheus.Counter
	subsets   prometheus.Counter
	glueCut   prometheus.Counter
	zonedVec  *prometheus.CounterVec
	zoned     [2]prometheus.Counter // by zoneByECS, zoneBySource

	rrlDropped, rrlSlipped prometheus.Counter
	rrlExemptVec           *prometheus.CounterVec
	rrlExempt              [len(exemptLabels)]prometheus.Counter // by exemptCookie, exemptPrefix
	cookiesVec             *prometheus.CounterVec
	cookies                [len(cookieLabels)]prometheus.Counter // by cookieValid, ...
	tcpRefused             prometheus.Counter
}

// How a querier's zone was known.
const (
	zoneByECS = iota
	zoneBySource
)

func newMetrics() *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_dns_queries_total", Help: "DNS queries answered, by query type and response code.",
		}, []string{"qtype", "rcode"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "spillway_dns_request_duration_seconds", Help: "Time to answer a DNS query, from parsed request to response written.",
			Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.025},
		}),
		truncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_dns_truncated_total", Help: "UDP answers sent with TC set because the answer did not fit.",
		}),
		subsets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_dns_subset_answers_total", Help: "TCP answers that carried a rotating subset because the whole answer would pass 65,535 bytes.",
		}),
		glueCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_dns_glue_dropped_total", Help: "UDP SRV answers sent whole but with some or all of their glue left out, because the SRV records fit and the glue did not (RFC 2181 9: no TC).",
		}),
		zonedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_dns_zone_answers_total", Help: "SRV answers whose weights follow the zone-aware split of the querier's zone, by how the zone was known (ecs: EDNS Client Subnet, source: source address).",
		}, []string{"by"}),
	}
	m.rrlDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_dns_rrl_dropped_total", Help: "UDP responses not sent because the querier's source prefix was past its response rate (--dns-rrl-rate).",
	})
	m.rrlSlipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_dns_rrl_slipped_total", Help: "UDP responses past the querier's prefix rate sent as an empty TC response instead (every --dns-rrl-slip-th), so a real client retries over TCP.",
	})
	m.rrlExemptVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_dns_rrl_exempt_total", Help: "UDP responses the rate limiter let through without counting them, by reason: cookie (the query carried a valid server cookie, so its source is not forged) or prefix (the source is in --dns-rrl-exempt).",
	}, []string{"reason"})
	for i, l := range exemptLabels {
		m.rrlExempt[i] = m.rrlExemptVec.WithLabelValues(l)
	}
	m.cookiesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_dns_cookies_total", Help: "Queries with a DNS COOKIE option (RFC 7873), by result: valid (a server cookie of ours for the querier's address, within its hour), invalid (another server cookie), client_only (no server cookie yet), malformed (a length other than 8 or 16..40 bytes: FORMERR).",
	}, []string{"result"})
	for i, l := range cookieLabels {
		m.cookies[i] = m.cookiesVec.WithLabelValues(l)
	}
	m.tcpRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_dns_tcp_refused_total", Help: "TCP connections closed on accept because --dns-tcp-max-conns were open.",
	})
	m.zoned[zoneByECS] = m.zonedVec.WithLabelValues("ecs")
	m.zoned[zoneBySource] = m.zonedVec.WithLabelValues("source")
	for i, q := range qtypeLabels {
		for j, r := range rcodeLabels {
			m.byLabel[i][j] = m.queries.WithLabelValues(q, r)
		}
	}
	return m
}

func (m *metrics) observe(qtype uint16, rcode int, d time.Duration) {
	if rcode < 0 {
		return // nothing was sent
	}
	m.byLabel[qtypeIndex(qtype)][rcodeIndex(rcode)].Inc()
	m.latency.Observe(d.Seconds())
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.queries, m.latency, m.truncated, m.subsets, m.glueCut, m.zonedVec, m.rrlDropped, m.rrlSlipped, m.rrlExemptVec, m.cookiesVec, m.tcpRefused} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
