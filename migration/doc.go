// Package migration holds what decides, for one calling service, whether it
// talks to its targets over xDS or over DNS: the rollout config (ordered
// rules matching service metadata, each with a percentage) and the stable
// hash that makes a percentage pick the same services every time, so that
// growing from 10% to 20% keeps the first 10%. The panic flag (TXT
// _xds.<domain>) overrides it for everyone.
//
// The rollout config (its YAML, Parse, matching and Bucket) is package
// rollout, a leaf that the client library imports too; this package
// re-exports its names (Config, Rule, Parse, Bucket, ErrInvalid).
//
// # Concurrency
//
// Config values are immutable after Parse; every function is safe for
// concurrent use.
//
// # Server side
//
// A Controller is the server's copy of the panic flag and the rollout
// config. Both are stored durably (Storage: settings "migration/panic" and
// "migration/rollout" next to the VM registrations) before they take
// effect, and Restore loads them at start, before the registry store is
// marked synced, so DNS never answers TXT _xds with a stale flag. The flag
// is published in the registry store (registry.FlagXDS), where the DNS
// resolver reads it; the rollout config carries a version that grows with
// every change. Changes are serialized; reads are lock-free and safe for
// concurrent use. Package migrationapi serves them over gRPC and HTTP
// behind the admin token; a store that cannot be reached refuses a change
// with UNAVAILABLE / 503 naming it. With several replicas on one store,
// ApplyStored puts in force what another replica stored (package replica
// feeds it the store's watch), so every replica serves the same flag.
// With ControllerConfig.Audit, every change and every failed change is
// recorded (package security/audit): the identity of the caller's
// context, the old and new value (the flag "on"/"off", the rollout YAML).
package migration
