// Package routing is per-service route rules: an ordered list of rules,
// each matching RPCs by request headers (exact, prefix, present, RE2
// regex) and/or a gRPC method path prefix, sending them to one target
// service or to weighted targets, then a default route (the service
// itself, or Rules.Default). Package xds serves them as the service's
// RouteConfiguration; see docs/routing.md.
//
// # Usage
//
//	rules:
//	  - name: synthetic
//	    match:
//	      headers: [{name: x-traffic-class, exact: synthetic}]
//	    to: payments-synthetic
//	  - name: canary
//	    split: [{to: payments, weight: 90}, {to: payments-canary, weight: 10}]
//
// Parse is strict: an unknown field, a wrong type, a rule with no or two
// kinds of target, weights that do not sum to a positive total no larger
// than 2^32-1, or a regex that is not RE2 is an *Error "FILE:LINE:
// field: problem". Store.Set also refuses (a *TargetError naming the
// field, HTTP 409) a target that is not registered (ErrNoTarget) and a
// rule whose weight all goes to targets without a healthy endpoint
// (ErrUnreachable), and, with StoreConfig.Check, rules whose route
// configuration a gRPC client would reject. A refused Set changes
// nothing.
//
// A target that is deregistered after Set keeps its rule stored and
// visible as broken (Store.Broken, GET /v1/routes/S, the metric
// spillway_routes_broken{service}); the server leaves the rule out of
// the route configuration, so its RPCs take the default route.
//
// # Storage
//
// Records live in the shared KV under routes/<service>, with the YAML as
// written; every replica's Store watches the prefix (Run) and parses it
// again. Every Set and Delete (and every refused or failed one) is
// recorded with StoreConfig.Audit: action routes, the old and new YAML.
// The Store, the audit and the API's skeleton are package
// registry/settings's, with Rules as the kind; this package keeps the
// rules, their target checks, Broken and the dry run. Route rules have
// no tombstones: Delete removes the record, because a release that
// predates them would read a tombstone as live rules.
//
// # Concurrency
//
// Rules, Get, Services, Broken, Changed and Version are safe for
// concurrent use; Rules and Get take no lock. Changed returns a channel
// closed at the next change.
package routing
