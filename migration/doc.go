// Package migration holds what decides, for one calling service, whether it
// talks to its targets over xDS or over DNS: the rollout config (ordered
// rules matching service metadata, each with a percentage) and the stable
// hash that makes a percentage pick the same services every time, so that
// growing from 10% to 20% keeps the first 10%. The panic flag (TXT
// _xds.<domain>) overrides it for everyone.
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
package migration
