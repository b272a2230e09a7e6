// Package regions orders a service's regions for one client: the region
// priorities that xds writes as LocalityLbEndpoints.priority and resolver
// writes as the SRV priority field, so that xDS clients and DNS queriers
// of the same region fail over in the same order.
//
// # Order
//
// For a client in region R (xDS: node.locality.region; DNS: the region of
// the querier's zone), Order gives R priority 0 and every other region of
// the service the next priority, in the order of the Preference for R
// (regions it lists, in that order), then the regions it does not list,
// by name, each at its own priority. Only regions with endpoints count,
// so priorities are contiguous from 0 as grpc-go requires. A client of
// no region, or of a region with neither endpoints nor a Preference entry,
// gets every region at priority 0 (no failover order: what it got before
// regions had priorities).
//
// # Rules (regional redirects)
//
// A Redirect {From: R, To: R2} gives clients in R the order of a client in
// R2's place: R2 at priority 0, then R's Preference (without R2), then the
// rest by name, R itself last. A redirect to a region without endpoints
// does not apply (Order reports it). An Exclude {Region: R} leaves R's
// endpoints out for every client, unless that leaves no region: then
// nothing is excluded (fail open) and Order reports it. A rule with a
// non-zero Until applies while now is before Until; Next gives the
// earliest expiry still to come, so a caller can push when it passes.
//
// # Concurrency
//
// Order and the Rules methods are pure functions. A Table is safe for
// concurrent use; Run owns its expiry timer.
package regions
