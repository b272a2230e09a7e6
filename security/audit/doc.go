// Package audit records every admin change (panic flag, rollout, service
// config, policy reload) and every denied call: who (the authn identity),
// how they proved it, from where (the peer address), what (action and
// resource), the outcome (allowed, denied, failed) and the value before
// and after. Each entry is a structured slog line and a JSON record in
// the shared KV, so that GET /v1/audit and spillwayctl audit list the
// entries of every replica.
//
// # Usage
//
//	l, err := audit.New(audit.Config{KV: kv, Replica: id, Logger: log, Registerer: metrics})
//	go l.Run(ctx) // trims
//	ctl, _ := migration.NewController(migration.ControllerConfig{..., Audit: l})
//	mux.Handle(audit.Path, l.Handler(policy)) // needs read_audit
//	httpSrv.Handler = audit.HTTPPeer(mux)     // r.RemoteAddr as the peer
//
// Callers declare their own one-method interface, Record(ctx, Entry),
// and fill Action, Resource, Outcome, Reason, Old and New; Record fills
// Time, Identity and Method (authn.FromContext) and Peer (WithPeer, else
// the gRPC peer) when they are unset. Denied and PolicyReloaded fit the
// policy's hooks.
//
// # Storage
//
// Entries live under audit/<time>-<replica>-<sequence>, the time UTC and
// fixed width so that keys sort by time; List reads the store (not a
// local copy), newest first. Old and New are at most MaxValue (4 KiB)
// each, the other fields MaxField or MaxReason; a longer value is cut and
// ends with "…(N bytes)". Trim keeps the newest Keep (default 10,000)
// and drops entries older than MaxAge (default 30 days); Run trims every
// TrimEvery on every replica, which is safe: a delete of a key already
// gone is not an error. Without a KV the entries are kept in a memory
// ring of Keep entries.
//
// Record never fails its caller: a store error is logged and counted
// (spillway_audit_write_failures_total), and the write is bounded by
// WriteTimeout even if the caller's context is canceled. Denials are
// all logged but only DeniedRate a second (burst DeniedBurst) are stored,
// so that a flood of refused calls is not a flood of store writes
// (spillway_audit_denials_not_stored_total counts the rest).
//
// # Metrics
//
// spillway_audit_entries_total{outcome}, spillway_audit_write_failures_total,
// spillway_audit_denials_not_stored_total.
//
// # Concurrency
//
// A Log is safe for concurrent use; its configuration is read-only after
// New.
package audit
