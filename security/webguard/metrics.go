package webguard

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the check label of spillway_http_refused_total.
const (
	checkHost        = "host"
	checkOrigin      = "origin"
	checkContentType = "content_type"
)

// newRefused returns spillway_http_refused_total, registered on reg (nil:
// not registered); a second registration on the same reg reuses the
// first's counter.
func newRefused(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_http_refused_total",
		Help: "HTTP requests refused before any API saw them, by check: host (a Host that is not a name of this server, DNS rebinding), origin (a browser's cross-origin write), content_type (a write whose Content-Type a page could send cross-site).",
	}, []string{"check"})
	for _, l := range []string{checkHost, checkOrigin, checkContentType} {
		c.WithLabelValues(l)
	}
	return register(reg, c)
}

// newToolWrites returns spillway_http_untyped_tool_writes_total,
// registered on reg like newRefused.
func newToolWrites(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_http_untyped_tool_writes_total",
		Help: "Writes served from clients that are not browsers (no Origin, no Sec-Fetch-Site) with a Content-Type other than application/json or application/yaml, such as curl -d's form type: accepted for scripts written for earlier releases; send Content-Type: application/json.",
	})
	return register(reg, c)
}

// register registers c on reg (nil: not registered) and returns it, or
// the collector of the same kind already registered there, so that two
// Handlers on one Registerer share their counters.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
