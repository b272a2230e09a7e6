// Package load holds the measured traffic of every service: the load
// step of load reports -> load -> weights -> pushes. Its Table aggregates
// the LRS reports xds receives (xds decodes the protocol and calls
// Record and Forget) into one Load per flow (client zone, client service,
// service, upstream locality); the admin API reads it with Loads, the
// weights planner with AppendLoads into a buffer it keeps. Summary is what
// one replica tells another about its load.
//
// # Bounds
//
// Every part of a flow's key is chosen by clients, and none makes the table
// grow without bound. A report for a cluster that is not a service in the
// registry snapshot, or for a locality where the service has no endpoint,
// is not recorded (Record returns DropUnknownCluster, DropUnknownLocality
// or DropNoInterval, which xds counts in spillway_lrs_dropped_total). A
// client zone that holds no slot in the server's bounded zone set and has
// none of the service's endpoints is recorded as "other" ("invalid" when
// it is not a DNS label). A stream's samples go when it ends (Forget),
// stale ones (three report intervals old) on the next read or Prune, or
// when the samples held have doubled since the last sweep (so Record
// costs O(1) per sample, amortized, and the table holds at most twice the
// fresh samples plus 1,024), and a flow's totals when it has not been reported for the idle period (5 min in
// xds) or three of its intervals if longer; Prune with a snapshot also
// drops the cached localities of services gone from it.
package load
