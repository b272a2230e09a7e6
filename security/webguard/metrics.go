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
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
	}
	return c
}

// newToolWrites returns spillway_http_untyped_tool_writes_total,
// registered on reg like newRefused.
func newToolWrites(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_http_untyped_tool_writes_total",
		Help: "Writes served from clients that are not browsers (no Origin, no Sec-Fetch-Site) with a Content-Type other than application/json or application/yaml, such as curl -d's form type: accepted for scripts written for earlier releases; send Content-Type: application/json.",
	})
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(prometheus.Counter); ok {
				return existing
			}
		}
	}
	return c
}
