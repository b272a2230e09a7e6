package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/replica/clusterversion"
)

// openClusterVersion reads the cluster version of a shared store
// (replica/clusterversion): a store finalised past this binary's
// version refuses the start, naming both versions. On bbolt or in memory
// (one replica) this binary's version is in force at once and nothing is
// stored.
func openClusterVersion(ctx context.Context, sys *systemStore, id string, reg prometheus.Registerer, log *slog.Logger) (*clusterversion.Versions, error) {
	cfg := clusterversion.Config{Logger: log, Registerer: reg}
	if sys.shared {
		cfg.KV, cfg.ID = sys.kv, id
	}
	v, err := clusterversion.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := v.Init(ctx); err != nil {
		return nil, fmt.Errorf("--store %s: %w", sys.name, err)
	}
	return v, nil
}

// clusterMembers is who raises the cluster version: the mesh's live
// members, whose records publish what each binary supports; nil without
// the mesh (--mesh-load=false, zone-aware weights off, or one replica),
// where this replica only follows the version.
func (s *server) clusterMembers() clusterversion.Members {
	if s.mesh == nil {
		return nil
	}
	return s.mesh.owners
}
