package clusterversion

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics registers the gauges of v on r.
func registerMetrics(r prometheus.Registerer, v *Versions) error {
	version := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spillway_cluster_version",
		Help: "The cluster version in force on this replica (1: a770d6c's; a single replica runs its binary's highest at once).",
	}, func() float64 { return float64(v.Version()) })
	supported := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spillway_cluster_version_supported",
		Help: "The highest cluster version this replica's binary supports.",
	}, func() float64 { return Current })
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spillway_cluster_version_held",
		Help: "1 while the cluster version hold is set (no replica raises the version), else 0.",
	}, func() float64 {
		if v.State().Hold {
			return 1
		}
		return 0
	})
	return errors.Join(r.Register(version), r.Register(supported), r.Register(held))
}
