package svcconfig

// Resilience is what a service's xDS clients are told to do about
// failures and load (issue 30): outlier detection, a circuit breaker,
// a timeout, retries, fault injection and the endpoint-picking policy.
// It goes out in the service's Cluster, RouteConfiguration and Listener
// (package xds), the way grpc-go accepts them (gRFCs A50, A32, A31, A44,
// A33, A42, A48, A58). The zero value sends none of them: clients keep
// their own defaults, as before this field existed.
//
// Pointers are nil when unset; a set block is sent as the config says,
// its own unset fields taking the defaults the comments give (those of
// the gRFC, which Parse fills in so that what is shown is what is sent).
type Resilience struct {
	// OutlierDetection ejects endpoints that fail more than the others
	// (A50); nil sends none.
	OutlierDetection *OutlierDetection `json:"outlier_detection,omitempty"`
	// MaxRequests is the circuit breaker (A32): a client process fails an
	// RPC at once (UNAVAILABLE) while this many are in flight to the
	// service, 1..1,000,000; 0 sends none (grpc-go then allows 1,024).
	MaxRequests uint32 `json:"max_requests,omitempty"`
	// Timeout caps every RPC's deadline (A31: max_stream_duration and
	// grpc_timeout_header_max), (0, 1h]; 0 leaves the caller's deadline
	// alone.
	Timeout Duration `json:"timeout,omitempty"`
	// Retry retries failed RPCs (A44); nil sends none.
	Retry *Retry `json:"retry,omitempty"`
	// Fault injects delays and aborts (A33); nil injects none.
	Fault *Fault `json:"fault,omitempty"`
	// LB picks the endpoint-picking policy inside a locality; nil keeps
	// round robin (spillway.wrr, by endpoint weight, where the client
	// has it).
	LB *LB `json:"lb,omitempty"`
}

// OutlierDetection is A50's: every Interval a client ejects, for
// BaseEjectionTime × the times ejected (at most max(BaseEjectionTime,
// MaxEjectionTime)), the endpoints whose success rate is far below the
// others' (SuccessRate) or whose failure share is above a threshold
// (FailurePercentage); at most MaxEjectionPercent of the endpoints at
// once. A failure is any RPC that ends with a status other than OK. At
// least one of SuccessRate and FailurePercentage is set.
type OutlierDetection struct {
	// Interval between ejection sweeps, [100ms, 1h]; default 10s.
	Interval Duration `json:"interval"`
	// BaseEjectionTime, [100ms, 1h]; default 30s.
	BaseEjectionTime Duration `json:"base_ejection_time"`
	// MaxEjectionTime, [BaseEjectionTime, 24h]; default 300s.
	MaxEjectionTime Duration `json:"max_ejection_time"`
	// MaxEjectionPercent, 0..100; default 10.
	MaxEjectionPercent uint32 `json:"max_ejection_percent"`
	// SuccessRate, nil: no success-rate ejection.
	SuccessRate *SuccessRateEjection `json:"success_rate,omitempty"`
	// FailurePercentage, nil: no failure-percentage ejection.
	FailurePercentage *FailurePercentageEjection `json:"failure_percentage,omitempty"`
}

// SuccessRateEjection ejects an endpoint whose success rate is below the
// mean by more than StdevFactor standard deviations.
type SuccessRateEjection struct {
	// StdevFactor, (0, 10]; default 1.9.
	StdevFactor float64 `json:"stdev_factor"`
	// EnforcementPercent is the chance an endpoint found is ejected,
	// 1..100; default 100.
	EnforcementPercent uint32 `json:"enforcement_percent"`
	// MinimumHosts with enough requests for the sweep to judge, 2..1000;
	// default 5.
	MinimumHosts uint32 `json:"minimum_hosts"`
	// RequestVolume an endpoint needs in an interval to be judged,
	// 1..1,000,000; default 100.
	RequestVolume uint32 `json:"request_volume"`
}

// FailurePercentageEjection ejects an endpoint whose failures are more
// than Threshold percent of its RPCs.
type FailurePercentageEjection struct {
	// Threshold, 1..100; default 85.
	Threshold uint32 `json:"threshold"`
	// EnforcementPercent, 1..100; default 100.
	EnforcementPercent uint32 `json:"enforcement_percent"`
	// MinimumHosts, 2..1000; default 5.
	MinimumHosts uint32 `json:"minimum_hosts"`
	// RequestVolume, 1..1,000,000; default 50.
	RequestVolume uint32 `json:"request_volume"`
}

// Retry is A44's retry policy.
type Retry struct {
	// On lists the status codes retried, of RetryCodes; default
	// [unavailable].
	On []string `json:"on"`
	// NumRetries after the first attempt, 1..4; default 1.
	NumRetries uint32 `json:"num_retries"`
	// BaseInterval of the exponential backoff, [1ms, 1m]; default 25ms.
	BaseInterval Duration `json:"base_interval"`
	// MaxInterval, [BaseInterval, 5m]; default 10 × BaseInterval.
	MaxInterval Duration `json:"max_interval"`
}

// RetryCodes are the codes Retry.On may name, as grpc-go reads them.
var RetryCodes = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// Fault is A33's fault injection: each RPC is delayed with Delay's
// chance and, apart, aborted with Abort's. With Header set only RPCs
// that carry that header (any value) are eligible.
type Fault struct {
	// Delay, nil: none. At least one of Delay and Abort is set.
	Delay *FaultDelay `json:"delay,omitempty"`
	// Abort, nil: none.
	Abort *FaultAbort `json:"abort,omitempty"`
	// Header, when set, limits the fault to RPCs with this metadata key:
	// lowercase, not ending in -bin, not starting with ':' or "grpc-".
	Header string `json:"header,omitempty"`
	// MaxActiveFaults bounds the faults in progress in a client process,
	// 1..1,000,000; 0 sends no bound.
	MaxActiveFaults uint32 `json:"max_active_faults,omitempty"`
}

// FaultDelay delays Percent of the RPCs by Fixed.
type FaultDelay struct {
	// Fixed, [1ms, 1m].
	Fixed Duration `json:"fixed"`
	// Percent, (0, 100].
	Percent float64 `json:"percent"`
}

// FaultAbort fails Percent of the RPCs with GRPCStatus.
type FaultAbort struct {
	// GRPCStatus is the code, 1..16, written as its name (unavailable,
	// internal, ...) or its number; default unavailable (14).
	GRPCStatus uint32 `json:"grpc_status"`
	// Percent, (0, 100].
	Percent float64 `json:"percent"`
}

// LB is the endpoint-picking policy: exactly one field is set.
type LB struct {
	// RingHash (A42) hashes a request header to pick the endpoint, so
	// that one value's RPCs go to one endpoint while it stays.
	RingHash *RingHash `json:"ring_hash,omitempty"`
	// LeastRequest (A48) picks the least loaded of ChoiceCount random
	// endpoints.
	LeastRequest *LeastRequest `json:"least_request,omitempty"`
	// ClientWRR (A58) weighs endpoints by the ORCA load reports clients
	// get from the backends, instead of spillway's endpoint weights.
	ClientWRR *ClientWRR `json:"client_wrr,omitempty"`
}

// RingHash is A42's ring hash on a header.
type RingHash struct {
	// Header is the request metadata key hashed: lowercase, not ending
	// in -bin. Required.
	Header string `json:"header"`
	// MinRingSize, 1..8,388,608; default 1024.
	MinRingSize uint64 `json:"min_ring_size"`
	// MaxRingSize, [MinRingSize, 8,388,608]; default 4096 (grpc-go caps
	// both at 4096 unless the client sets GRPC_RING_HASH_CAP).
	MaxRingSize uint64 `json:"max_ring_size"`
}

// LeastRequest is A48's least request.
type LeastRequest struct {
	// ChoiceCount, 2..10; default 2.
	ChoiceCount uint32 `json:"choice_count"`
}

// ClientWRR is A58's client-side weighted round robin.
type ClientWRR struct {
	// BlackoutPeriod: a new endpoint's reports count after it, [1s, 10m];
	// default 10s (grpc-go reads 0 as the default: it cannot be sent).
	BlackoutPeriod Duration `json:"blackout_period"`
	// WeightExpirationPeriod: a weight without a report for this long is
	// dropped, [BlackoutPeriod, 1h]; default 3m.
	WeightExpirationPeriod Duration `json:"weight_expiration_period"`
	// WeightUpdatePeriod, [100ms, 1m]; default 1s.
	WeightUpdatePeriod Duration `json:"weight_update_period"`
	// ErrorUtilizationPenalty: weight = qps / (utilization + eps/qps ×
	// penalty), (0, 10]; default 1.
	ErrorUtilizationPenalty float64 `json:"error_utilization_penalty"`
	// OOBReportingPeriod, 0 (the default): weights from the trailers of
	// RPCs; else the period of out-of-band reports asked of backends,
	// [30s, 10m] (grpc-go servers send no faster than every 30 s).
	OOBReportingPeriod Duration `json:"oob_reporting_period,omitempty"`
}
