// Package clusterversion lets replicas of different releases share one
// store safely: a feature that older replicas would not understand is
// turned on only once every live replica runs a binary that supports it,
// and once on it stays on (CockroachDB's version finalisation, etcd's
// cluster version).
//
// A cluster version is a small integer. Baseline (1) is a770d6c's, and
// that of every member record that names none; this binary supports
// Current (2), StrictSenderBinding: over mTLS the load exchange binds a
// certificate only to the identity a member record names (package
// replica/exchange).
//
// # Protocol
//
//   - Each replica publishes in its member record (package
//     replica/ownership, "members/<id>") the highest version its binary
//     supports: "max_version", absent (0) read as Baseline.
//   - The finalised version is the record under Key, "cluster/version":
//     {"version", "hold", "at", "by", "hold_at", "hold_by"}; absent means
//     Baseline, no hold. Fields a later release adds are kept by every
//     write of this one.
//   - Every replica reads Key every Config.Interval (2 s; Run) and, when
//     it may, raises it from V to V+1 with a conditional write on the
//     record's revision (systemstore.CondPutter): of replicas racing one
//     wins, the others read its record. It may when the hold is off, its
//     view of the members has settled (ownership.Owners.Settled), every
//     live member (Members, this replica included) supports V+1, and no
//     member record in the store that has not expired by its own
//     "expires" supports less. A member that is gone (its record expired
//     or deleted) does not block. One step at a time, never down: a
//     stored version below the one in force (the key deleted by hand) is
//     logged and written back.
//   - The hold (CockroachDB's preserve_downgrade_option): while set, no
//     replica raises the version, so a rollback to the previous release
//     stays possible. SetHold (HTTP POST Path, spillwayctl cluster-version
//     hold|release) sets and clears it; it takes the panic right
//     (HoldAction).
//   - A binary whose Current is below the store's version refuses to
//     start (Init: ErrUnsupported, naming both versions, who finalised
//     it and when) and stops if it sees one while running (Run). An older
//     release (a770d6c) knows nothing of Key and cannot refuse: rolling
//     back after finalisation is unsupported.
//
// With Config.KV nil (bbolt or memory: one replica) Current is in force
// from New on and nothing is stored.
//
// # Usage
//
//	v, err := clusterversion.New(clusterversion.Config{KV: kv, ID: id, Registerer: reg})
//	if err := v.Init(ctx); err != nil { ... } // refuse to start
//	go v.Run(ctx, owners)                     // owners: *ownership.Owners, or nil outside the mesh
//	if v.Active(clusterversion.StrictSenderBinding) { ... }
//
// # Concurrency
//
// Every method is safe for concurrent use; Version and Active are one
// atomic load. Run is called once.
//
// # Metrics and logs
//
// spillway_cluster_version (the version in force),
// spillway_cluster_version_supported (Current) and
// spillway_cluster_version_held (1 while held). Every change of the
// version or the hold is logged ("cluster version changed", "cluster
// version finalised", "cluster version hold changed").
package clusterversion
