// Package replica is the root of what several spillway replicas on one
// shared store (etcd or Spanner) do together. It holds no code: each step
// is a package of its own, and data passes through them in this order:
//
//  1. registrysync keeps this replica in step with the others: it lists
//     and watches the registrations and settings (panic flag, rollout) in
//     the store and applies them here, writes the last-seen stamps of the
//     heartbeats this replica took in batches, runs the election of the one
//     replica that decides lease expiry, and probes the store's health.
//  2. ownership gives each shard of services one owner replica at a time,
//     through leases (elections) in the store, and tells every replica who
//     owns what.
//  3. exchange carries each replica's load summaries (what its LRS streams
//     and utilization reports saw) to the owner of each service, which
//     merges them; exchange/meshv1 is the wire (spillway.mesh.v1).
//  4. meshweights lets the owner compute each service's weights from the
//     merged load and publish them through the store; its Selector makes
//     every replica, the owner included, serve the published plan while it
//     is fresh and its own local plan otherwise.
//
// Beside them, clusterversion says which cluster version the replicas run
// at: raised in the store once every live member's binary supports it and
// no operator holds it, never lowered; a feature of a newer release (the
// load exchange's strict certificate binding, version 2) is on only from
// then, and a binary below the store's version refuses to start.
//
// With one replica on bbolt (the default) none of the tree runs: that
// replica holds every lease, decides expiry and plans every service's
// weights itself (package weights). With --mesh-load=false on a shared
// store only registrysync runs, and each replica plans from its own load.
//
// The replica tree feeds the registry store and the weights; it imports
// nothing of what serves them (xds, resolver, admin), a rule that
// e2e/layering_test.go enforces.
//
// See docs/replication.md for the store keys, the consistency model and
// the figures, and docs/architecture.md for where the tree sits among the
// other packages.
package replica
