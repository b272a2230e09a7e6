package registry

import "time"

// UtilizationReport is one backend's utilization at one moment, as its
// utilization reporter (clientlib/utilization, spillwayctl agent) sends
// it through the registry API. The registry API receives it and hands it
// to a sink (package load keeps the latest per endpoint, and bounds and
// validates it).
type UtilizationReport struct {
	Service    string
	EndpointID string
	// CPU is the share of the backend's CPU quota in use.
	CPU float64
	// InFlight is the RPCs in flight and Limit the in-flight count that
	// counts as 100%. Limit 0 means the in-flight count is unknown (a VM
	// agent that runs no Go code); InFlight must then be 0.
	InFlight, Limit uint32
	// Interval is the sender's report interval.
	Interval time.Duration
	// RPS and EPS are the requests completed and failed per second over
	// the sender's last window, LatencyMs their mean latency; 0 means not
	// reported (a sender older than these fields, or one that counts no
	// RPCs, such as spillwayctl agent).
	RPS, EPS, LatencyMs float64
}
