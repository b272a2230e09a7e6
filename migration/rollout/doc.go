// Package rollout is the rollout config and its matching: ordered rules
// matching a calling service's metadata, each with a percentage, and the
// stable hash (Bucket) that makes a percentage pick the same services
// every time, so that growing from 10% to 20% keeps the first 10%.
//
// It is a leaf package: the server (package migration, which re-exports
// it) and the client library (clientlib, which re-reads the config while
// running) both import it, and it imports neither.
//
// # Rollout config
//
//	rules:
//	  - name: tier3-us-east1     # optional, shown in decisions
//	    match: {tier: "3", region: us-east1}
//	    percent: 10
//	  - name: everyone-else
//	    match: {}                # matches every service
//	    percent: 0
//
// Rules are tried in order; the first whose match keys all equal the
// service's metadata decides. No matching rule means not eligible. The
// service name is metadata key "service". A service is eligible under a
// rule with percent p when its bucket, a hash of its name in [0, 10000), is
// below p*100.
//
// # Concurrency
//
// Config values are immutable after Parse; every function is safe for
// concurrent use.
package rollout
