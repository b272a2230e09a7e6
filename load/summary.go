package load

import "time"

// Summary is what one replica tells the owner of some services about
// their load, each report interval: the LRS reports it received, per
// client zone and upstream zone, and its connected xDS clients.
type Summary struct {
	Replica  string        // the sender's replica id
	At       time.Time     // when it was taken, by the sender's clock
	Interval time.Duration // the sender's report interval
	Services []ServiceSummary
	// Shards are the shards, with their ownership epoch, that the sender
	// routes to the summary's recipient by its own view of the ownership
	// records: its acknowledgement that it sends that owner the load of
	// those shards. Sent even when Services is empty.
	Shards []ShardEpoch
}

// ShardEpoch names one hold of a shard: the shard and the epoch of its
// ownership record.
type ShardEpoch struct {
	Shard int
	Epoch int64
}

// ServiceSummary is one service's part of a Summary.
type ServiceSummary struct {
	Service string
	// Flows has one entry per (client zone, upstream zone) with a fresh
	// report.
	Flows []Flow
	// Clients counts the service's xDS streams connected to the sender,
	// per client zone.
	Clients []ClientCount
	// Endpoints has the latest utilization report of each of the
	// service's endpoints that reported to the sender (its
	// UtilizationTable), sorted by ID. Utilization is derived from CPU,
	// InFlight and Limit; Reported is on the clock of whoever holds the
	// summary (the sender's, then the owner's once Merged stores it).
	Endpoints []EndpointUtilization
}

// Flow is the load clients in ClientZone send to the service's endpoints
// in Zone, summed over the sender's fresh reporters. Rates are per second.
type Flow struct {
	ClientZone, Zone           string
	Issued, Succeeded, Errored float64
	InProgress                 uint64
	Reporters                  int
	Updated                    time.Time // the newest report summed
}

// ClientCount is how many xDS streams of a service are connected in Zone.
type ClientCount struct {
	Zone  string
	Count int
}
