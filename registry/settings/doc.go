// Package settings is the one mechanism behind every per-service setting
// that operators and service teams edit: the weight strategy config
// (weights/svcconfig), the route rules (xds/routing), and the settings
// later issues add. A setting's package describes its kind once (a Kind:
// name, KV prefix, strict parser, audit and authz action, tombstone
// policy) and gets from here the rest, the same for every kind:
//
//   - the replicated view (Store: Get, Services, Changed, Version, Init,
//     Run), one JSON record per service under the kind's KV prefix, kept
//     in step on every replica by registry/systemstore's Records;
//   - Set and Delete (and Undelete), each recorded in the audit log
//     (security/audit) with the old and the new text, refused and failed
//     ones too;
//   - tombstones, when the kind has them: a deleted setting keeps applying,
//     shown as deleted, for the tombstone time, can be undeleted, and is
//     then swept;
//   - a directory of SERVICE.yaml files (Dir), when the kind takes one,
//     which wins over the API;
//   - the HTTP API's skeleton (Store.Handler): list, get, put, delete, and
//     undelete where tombstones are on, each change authorized (Auth),
//     errors answered through internal/httpjson naming the field.
//
// What a setting means (its type, parse, extra checks, the JSON view, a
// dry run) stays in its package.
//
// # Usage
//
//	var kind = settings.Kind[Config]{
//		Name: "svcconfig", Noun: "service config", Prefix: "svcconfig/",
//		Path: "/v1/config", Parse: Parse, Action: authz.Config,
//		ErrInvalid: ErrInvalid, ErrNotFound: ErrNotFound,
//		Tombstone: 7 * 24 * time.Hour, Sources: true, ...
//	}
//	store, err := settings.New(kind, settings.Config[Config]{KV: kv, Audit: log})
//	store.Init(ctx)
//	go store.Run(ctx, 0)
//	mux := store.Handler(settings.HandlerConfig{Auth: store.PolicyAuth(az, logf), View: view})
//
// # Records
//
// A record is {"yaml", "source", "file", "updated_at", "deleted_at"}:
// the text as written (every replica parses it again), where it came
// from ("source", "file": only for kinds with Sources), when it was set,
// and, for a tombstone, when it was deleted. Fields a kind does not use
// are never written, so each kind's records keep the shape earlier
// releases wrote and read. Decoding is not strict: a field a replica
// does not know is ignored, which is why a kind must not start writing
// tombstones (deleted_at) while replicas that would ignore them run.
//
// # Concurrency
//
// Every Store method is safe for concurrent use; Get takes no lock.
// Writes go to the KV, then to the view; Changed returns a channel closed
// at the next change of the view.
package settings
