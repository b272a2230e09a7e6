package registrysync

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	up            prometheus.GaugeFunc
	decider       prometheus.GaugeFunc
	writes        prometheus.Counter
	stampsWritten prometheus.Counter
	stampsRead    prometheus.Counter
	resyncs       prometheus.Counter
	elected       prometheus.Counter
}

func newMetrics(r *Replica) *metrics {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	return &metrics{
		up: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_store_up", Help: "1 while the shared store answers this replica, else 0 (serving from memory, writes refused, nothing expires).",
		}, func() float64 { return b(r.up.Load()) }),
		decider: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_expiry_decider", Help: "1 while this replica holds the expiry election.",
		}, func() float64 { return b(r.leader.Load()) }),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_lastseen_writes_total", Help: "Store writes of last-seen stamp shards (compare with spillway_vm_heartbeats_total).",
		}),
		stampsWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_lastseen_stamps_written_total", Help: "Lease stamps carried by those writes.",
		}),
		stampsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_lastseen_stamps_read_total", Help: "Other replicas' lease stamps applied here.",
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_store_resyncs_total", Help: "Lists of a store prefix (at start and after a failed watch).",
		}),
		elected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_expiry_elections_won_total", Help: "Times this replica became the expiry decider.",
		}),
	}
}

func (x *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{x.up, x.decider, x.writes, x.stampsWritten, x.stampsRead, x.resyncs, x.elected} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
