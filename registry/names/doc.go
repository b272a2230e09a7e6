// Package names validates the names spillway serves: DNS labels (endpoint
// ids, port names, zones) and service names (dot-joined labels). It is a
// leaf package, imported by both the server (package registry, which
// re-exports it) and the client library, so that clientlib accepts exactly
// the names the server does without linking the registry store.
//
// Every error is a *FieldError naming the field, and wraps ErrInvalid.
//
// # Concurrency
//
// Every function is pure and safe for concurrent use.
package names
