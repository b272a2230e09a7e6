package exchange

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are shared by the Server and the Sender of one process: both
// register the same vectors, and the second registration reuses the
// first's.
type metrics struct {
	summaries *prometheus.CounterVec // result: accepted, invalid, full, denied, sent, delivered, dropped
	bytes     *prometheus.CounterVec // direction: received, sent
	unrouted  prometheus.Counter
	// refused: reason not_member, peer_address, peer_identity, not_bound,
	// identity_missing.
	refused *prometheus.CounterVec
	// droppedServices: reason unregistered, not_owned, budget.
	droppedServices *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		summaries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_load_summaries_total",
			Help: "Load summary messages between replicas, by result: accepted, invalid, full, denied (owner side); sent, delivered (to this replica itself), dropped (sender side).",
		}, []string{"result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_load_bytes_total",
			Help: "Encoded bytes of load summary messages, by direction: received, sent.",
		}, []string{"direction"}),
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_mesh_load_unrouted_services_total",
			Help: "Services whose load summary was not sent because they had no owner.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_load_refused_total",
			Help: "Load exchange streams refused (owner side), by reason: not_member (the sender replica id is not a live member), peer_address (a peer without a verified certificate is not at a live member's address), peer_identity (a verified certificate's identity is no live member's), not_bound (the summary's replica is a live member but not the stream's peer), identity_missing (over a certificate, the live member's record names no identity, which cluster version 2 requires).",
		}, []string{"reason"}),
		droppedServices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_load_dropped_services_total",
			Help: "Services of received load summaries not stored (owner side), by reason: unregistered, not_owned (by this replica), budget (past the sender's byte budget).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m
	}
	m.summaries = register(reg, m.summaries)
	m.bytes = register(reg, m.bytes)
	m.unrouted = register(reg, m.unrouted)
	m.refused = register(reg, m.refused)
	m.droppedServices = register(reg, m.droppedServices)
	return m
}

// register registers c, or returns the collector already registered under
// its name.
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
