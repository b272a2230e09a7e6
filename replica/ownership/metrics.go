package ownership

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	owned   prometheus.GaugeFunc
	members prometheus.GaugeFunc
	changes *prometheus.CounterVec
}

func newMetrics(o *Owners) *metrics {
	return &metrics{
		owned: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_mesh_shards_owned",
			Help: "Shards whose election this replica holds.",
		}, func() float64 { return float64(o.nOwned.Load()) }),
		members: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_mesh_members",
			Help: "Live mesh members as this replica sees them, itself included.",
		}, func() float64 { return float64(len(*o.members.Load())) }),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_ownership_changes_total",
			Help: "Shards this replica took (change=acquired) or gave up (change=released).",
		}, []string{"change"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.owned), r.Register(m.members), r.Register(m.changes))
}
