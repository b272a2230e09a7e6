package tlsconfig

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are shared by every Reloader of one process registered on the
// same Registerer: a second registration reuses the first's collectors.
type metrics struct {
	reloads  prometheus.Counter
	failures prometheus.Counter
	notAfter *prometheus.GaugeVec // file
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_tls_reloads_total",
			Help: "Certificate, key or CA files loaded again because their content changed on disk.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_tls_reload_failures_total",
			Help: "Changed certificate, key or CA files that could not be loaded (the old material stays in use); counted once per distinct bad content.",
		}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_tls_certificate_not_after_seconds",
			Help: "Expiry (Unix seconds) of the certificate in use, by certificate file.",
		}, []string{"file"}),
	}
	if reg == nil {
		return m
	}
	m.reloads = register(reg, m.reloads)
	m.failures = register(reg, m.failures)
	m.notAfter = register(reg, m.notAfter)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
