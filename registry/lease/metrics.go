package lease

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	registrations     prometheus.Counter
	heartbeats        prometheus.Counter
	heartbeatsUnknown prometheus.Counter
	// heartbeatsNotShared counts heartbeats taken while this replica
	// could not reach the store (answered UNAVAILABLE).
	heartbeatsNotShared prometheus.Counter
	expirations         prometheus.Counter
	atRisk              prometheus.Gauge
	guard               prometheus.Gauge
	guardTrips          prometheus.Counter
	notOwner            prometheus.Counter
	raced               prometheus.Counter
	leases              prometheus.GaugeFunc
}

func newMetrics(m *Manager) *metrics {
	return &metrics{
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_registrations_total", Help: "VM registrations accepted.",
		}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_heartbeats_total", Help: "Heartbeats that renewed a lease.",
		}),
		heartbeatsUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_heartbeats_unknown_total", Help: "Heartbeats for unknown or expired leases.",
		}),
		heartbeatsNotShared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_heartbeats_not_shared_total", Help: "Heartbeats that renewed a lease here while this replica could not reach the store: answered UNAVAILABLE so that the agent heartbeats another replica.",
		}),
		expirations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_lease_expirations_total", Help: "Leases removed because their TTL passed without a heartbeat.",
		}),
		atRisk: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spillway_vm_leases_at_risk", Help: "Leases with less than half their TTL left at the last expiry round.",
		}),
		guard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spillway_vm_mass_expiry_guard_active", Help: "1 while the mass-expiry guard pauses lease expiry.",
		}),
		guardTrips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_mass_expiry_guard_trips_total", Help: "Times the mass-expiry guard switched on.",
		}),
		notOwner: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_lease_not_owner_total", Help: "Heartbeats, deregistrations, reports and re-registrations refused because the caller is not the identity that made the lease.",
		}),
		raced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_vm_registration_races_total", Help: "Registrations whose record another replica had changed since this one saw it (each is judged again by the record there).",
		}),
		leases: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_vm_leases", Help: "Live VM leases.",
		}, func() float64 { return float64(m.Len()) }),
	}
}

func (x *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{x.registrations, x.heartbeats, x.heartbeatsUnknown, x.heartbeatsNotShared, x.expirations, x.atRisk, x.guard, x.guardTrips, x.notOwner, x.raced, x.leases} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
