// Package security is the root of who may do what in spillway: authn
// says who a caller is (a verified client certificate or a bearer
// token), authz says what that identity may do (the --authz-file policy),
// tlsconfig keeps the listeners' certificates fresh from disk, audit
// records every admin change and every denied write, and webguard keeps
// web pages out of the HTTP API (cross-site writes, DNS rebinding).
//
// Each API package (registryapi, migrationapi, svcconfig, xds, admin)
// declares the small Authorizer interface it consumes; authz.Policy
// implements it.
package security
