// Package migrationapi serves the spillway.migration.v1 Migration API: the
// panic flag and the rollout config, over gRPC and as JSON over HTTP:
//
//	GET  /v1/panic             -> PanicState {"panic", "xds", "changed"}
//	POST /v1/panic             {"panic": true} -> PanicState       (token)
//	GET  /v1/rollout           -> {"rules": [...], "version": N}
//	PUT  /v1/rollout           body: the YAML -> {"rules", "version"} (token)
//	POST /v1/rollout/validate  body: the YAML -> ValidateRolloutResponse
//
// GET and PUT /v1/rollout answer exactly the JSON of migration.Config's
// rules plus the version (RolloutJSON), which the client library fetches;
// keep that shape stable. The other answers are the proto messages with
// the proto field names (snake_case), empty fields shown. Errors are
// {"error", "field", "code"}, as in the other JSON APIs.
//
// # Usage
//
//	a, err := migrationapi.New(migrationapi.Config{
//		Panic: ctrl, Rollout: ctrl, Clients: xdsSrv, Registry: store,
//		Authorizer: policy, Logger: log, Registerer: metrics,
//	})
//	a.RegisterGRPC(grpcSrv)
//	for _, p := range migrationapi.Paths {
//		mux.Handle(p, a.Handler()) // more specific than the registry's "/v1/"
//	}
//
// # Admin token
//
// Reads are open. Changes (SetPanic, SetRollout; POST /v1/panic, PUT
// /v1/rollout) need the admin token: gRPC metadata "authorization: Bearer
// <token>", or the HTTP header "Authorization: Bearer <token>", compared in
// constant time. A missing or wrong token is PermissionDenied (HTTP 403)
// and changes nothing. A server without a token (Config.Token "") refuses
// every change with FailedPrecondition (HTTP 403) saying how to configure
// one: changes are never open by default. ReadTokenFile reads the token
// the way the server's --admin-token-file does.
//
// With a Config.Authorizer (cmd/spillway passes its policy) the token is
// not looked at here: the authn layer has turned the caller's
// certificate or token (the admin token included, as identity "admin")
// into an identity, and the Authorizer decides actions "panic" and
// "rollout" (resource ""). The default policy lets only "admin" change
// them, so --admin-token-file alone works as before. A denial is
// PermissionDenied (HTTP 403) with the Authorizer's message, "permission
// denied: IDENTITY may not panic", counted as denied, and changes
// nothing; with Config.NoTokenHint (the default policy) an anonymous
// caller of a server without an admin token still gets
// FailedPrecondition saying how to configure one.
//
// An invalid rollout config (unparsable YAML, an unknown field, a bad
// percentage) is InvalidArgument (HTTP 400) naming the field, in the
// message and in the JSON error's "field" member; the old config stays in
// force.
//
// # Dry run
//
// ValidateRollout decides, for every known client service, what the config
// would decide: the node.cluster of every connected ADS stream and every
// service of the registry. The metadata of each is only its name,
// {"service": name}: the server does not know a client's region, tier or
// labels (the client library reports none), so rules that match on other
// keys show those services as unmatched. Each decision says where the
// service is known from ("xds", "registry").
//
// # Metrics
//
// spillway_admin_changes_total{what="panic"|"rollout", result} counts
// change requests by result: ok, unchanged, denied (token missing or
// wrong), disabled (no token configured), invalid, error (storage).
// spillway_panic and spillway_rollout_version come from
// migration.Controller.
//
// # Concurrency
//
// An API is read-only after New and safe for concurrent use; its state is
// in the PanicSwitch and RolloutKeeper.
package migrationapi
