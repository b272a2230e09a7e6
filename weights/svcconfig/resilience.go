package svcconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

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
	// On lists the status codes retried, of RetryCodes, each once
	// (Parse also reads them with '_', as resource_exhausted); default
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
	// GRPCStatus is the code, 1..16, written as its lowercase name
	// (unavailable, resource_exhausted or resource-exhausted, ...) or its
	// number; default unavailable (14).
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

// IsZero reports whether r sends no policy at all (a config without a
// resilience block, or with an empty one).
func (r Resilience) IsZero() bool {
	return r.OutlierDetection == nil && r.MaxRequests == 0 && r.Timeout == 0 && r.Retry == nil && r.Fault == nil && r.LB == nil
}

// grpcCodes are the names of the gRPC status codes, by number.
var grpcCodes = []string{
	"ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
	"permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
	"unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
}

// codeUnavailable is grpcCodes' unavailable, the default abort.
const codeUnavailable = 14

// Limits of the resilience block.
const (
	maxCount    = 1_000_000 // max_requests, max_active_faults, request_volume
	maxRingSize = 8 << 20   // grpc-go and Envoy refuse larger rings
)

// resilience reads the resilience block into r. Every block that is set
// gets the defaults Resilience's comments give for the fields it leaves
// out, so that the config shown is what is sent; blocks left out stay
// nil (zero).
func (p parser) resilience(n *yaml.Node, r *Resilience) error {
	const f = "resilience"
	m, err := p.Mapping(n, f, "outlier_detection", "max_requests", "timeout", "retry", "fault", "lb")
	if err != nil {
		return err
	}
	if v := m["outlier_detection"]; v != nil {
		if r.OutlierDetection, err = p.outlierDetection(v, f+".outlier_detection"); err != nil {
			return err
		}
	}
	if err := p.u32(m, f, "max_requests", 1, maxCount, &r.MaxRequests); err != nil {
		return err
	}
	if v := m["timeout"]; v != nil {
		if r.Timeout, err = p.positiveDuration(v, f+".timeout", time.Hour); err != nil {
			return err
		}
	}
	if v := m["retry"]; v != nil {
		if r.Retry, err = p.retry(v, f+".retry"); err != nil {
			return err
		}
	}
	if v := m["fault"]; v != nil {
		if r.Fault, err = p.fault(v, f+".fault"); err != nil {
			return err
		}
	}
	if v := m["lb"]; v != nil {
		if r.LB, err = p.lb(v, f+".lb"); err != nil {
			return err
		}
	}
	return nil
}

func (p parser) outlierDetection(n *yaml.Node, f string) (*OutlierDetection, error) {
	m, err := p.Mapping(n, f, "interval", "base_ejection_time", "max_ejection_time", "max_ejection_percent", "success_rate", "failure_percentage")
	if err != nil {
		return nil, err
	}
	od := &OutlierDetection{
		Interval:           Duration(10 * time.Second),
		BaseEjectionTime:   Duration(30 * time.Second),
		MaxEjectionTime:    Duration(300 * time.Second),
		MaxEjectionPercent: 10,
	}
	if err := p.dur(m, f, "interval", 100*time.Millisecond, time.Hour, &od.Interval); err != nil {
		return nil, err
	}
	if err := p.dur(m, f, "base_ejection_time", 100*time.Millisecond, time.Hour, &od.BaseEjectionTime); err != nil {
		return nil, err
	}
	if err := p.dur(m, f, "max_ejection_time", 100*time.Millisecond, 24*time.Hour, &od.MaxEjectionTime); err != nil {
		return nil, err
	}
	if err := atLeast(p, m, n, f, "base_ejection_time", "max_ejection_time", time.Duration(od.BaseEjectionTime), time.Duration(od.MaxEjectionTime)); err != nil {
		return nil, err
	}
	if err := p.u32(m, f, "max_ejection_percent", 0, 100, &od.MaxEjectionPercent); err != nil {
		return nil, err
	}
	if v := m["success_rate"]; v != nil {
		sf := f + ".success_rate"
		sm, err := p.Mapping(v, sf, "stdev_factor", "enforcement_percent", "minimum_hosts", "request_volume")
		if err != nil {
			return nil, err
		}
		sr := &SuccessRateEjection{StdevFactor: 1.9, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 100}
		if err := p.flt(sm, sf, "stdev_factor", 0, 10, true, &sr.StdevFactor); err != nil {
			return nil, err
		}
		if err := p.ejection(sm, sf, &sr.EnforcementPercent, &sr.MinimumHosts, &sr.RequestVolume); err != nil {
			return nil, err
		}
		od.SuccessRate = sr
	}
	if v := m["failure_percentage"]; v != nil {
		ff := f + ".failure_percentage"
		fm, err := p.Mapping(v, ff, "threshold", "enforcement_percent", "minimum_hosts", "request_volume")
		if err != nil {
			return nil, err
		}
		fp := &FailurePercentageEjection{Threshold: 85, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 50}
		if err := p.u32(fm, ff, "threshold", 1, 100, &fp.Threshold); err != nil {
			return nil, err
		}
		if err := p.ejection(fm, ff, &fp.EnforcementPercent, &fp.MinimumHosts, &fp.RequestVolume); err != nil {
			return nil, err
		}
		od.FailurePercentage = fp
	}
	if od.SuccessRate == nil && od.FailurePercentage == nil {
		return nil, p.Errf(n, f, "set success_rate or failure_percentage (or both, e.g. success_rate: {}): with neither, no endpoint is ever ejected")
	}
	return od, nil
}

// ejection reads the fields success_rate and failure_percentage share.
func (p parser) ejection(m map[string]*yaml.Node, f string, enforcement, minHosts, volume *uint32) error {
	if err := p.u32(m, f, "enforcement_percent", 1, 100, enforcement); err != nil {
		return err
	}
	// Below 2, failure_percentage ejects a service's only endpoint when
	// it fails (the first ejection always passes max_ejection_percent),
	// leaving the clients nothing to send to.
	if err := p.u32(m, f, "minimum_hosts", 2, 1000, minHosts); err != nil {
		return err
	}
	return p.u32(m, f, "request_volume", 1, maxCount, volume)
}

func (p parser) retry(n *yaml.Node, f string) (*Retry, error) {
	m, err := p.Mapping(n, f, "on", "num_retries", "base_interval", "max_interval")
	if err != nil {
		return nil, err
	}
	r := &Retry{On: []string{"unavailable"}, NumRetries: 1, BaseInterval: Duration(25 * time.Millisecond)}
	if v := m["on"]; v != nil {
		items, err := p.List(v, f+".on")
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, p.Errf(v, f+".on", "empty: name at least one of %s (or leave on out for [unavailable])", strings.Join(RetryCodes, ", "))
		}
		r.On = make([]string, 0, len(items))
		for i, it := range items {
			fi := fmt.Sprintf("%s.on[%d]", f, i)
			s, err := p.String(it, fi)
			if err != nil {
				return nil, err
			}
			code := strings.ReplaceAll(s, "_", "-") // resource_exhausted as grpc_status spells it
			if !slices.Contains(RetryCodes, code) {
				return nil, p.Errf(it, fi, "%q is not one of %s (the codes gRPC clients retry on)", s, strings.Join(RetryCodes, ", "))
			}
			if j := slices.Index(r.On, code); j >= 0 {
				return nil, p.Errf(it, fi, "%q is on[%d] too", s, j)
			}
			r.On = append(r.On, code)
		}
	}
	if err := p.u32(m, f, "num_retries", 1, 4, &r.NumRetries); err != nil {
		return nil, err
	}
	if err := p.dur(m, f, "base_interval", time.Millisecond, time.Minute, &r.BaseInterval); err != nil {
		return nil, err
	}
	r.MaxInterval = min(10*r.BaseInterval, Duration(5*time.Minute))
	if err := p.dur(m, f, "max_interval", time.Millisecond, 5*time.Minute, &r.MaxInterval); err != nil {
		return nil, err
	}
	if err := atLeast(p, m, n, f, "base_interval", "max_interval", time.Duration(r.BaseInterval), time.Duration(r.MaxInterval)); err != nil {
		return nil, err
	}
	return r, nil
}

func (p parser) fault(n *yaml.Node, f string) (*Fault, error) {
	m, err := p.Mapping(n, f, "delay", "abort", "header", "max_active_faults")
	if err != nil {
		return nil, err
	}
	ft := &Fault{}
	if v := m["delay"]; v != nil {
		df := f + ".delay"
		dm, err := p.Mapping(v, df, "fixed", "percent")
		if err != nil {
			return nil, err
		}
		if err := p.required(dm, v, df, "fixed", "percent"); err != nil {
			return nil, err
		}
		d := &FaultDelay{}
		if err := p.dur(dm, df, "fixed", time.Millisecond, time.Minute, &d.Fixed); err != nil {
			return nil, err
		}
		if err := p.flt(dm, df, "percent", 0, 100, true, &d.Percent); err != nil {
			return nil, err
		}
		ft.Delay = d
	}
	if v := m["abort"]; v != nil {
		af := f + ".abort"
		am, err := p.Mapping(v, af, "grpc_status", "percent")
		if err != nil {
			return nil, err
		}
		if err := p.required(am, v, af, "percent"); err != nil {
			return nil, err
		}
		a := &FaultAbort{GRPCStatus: codeUnavailable}
		if s := am["grpc_status"]; s != nil {
			if a.GRPCStatus, err = p.grpcStatus(s, af+".grpc_status"); err != nil {
				return nil, err
			}
		}
		if err := p.flt(am, af, "percent", 0, 100, true, &a.Percent); err != nil {
			return nil, err
		}
		ft.Abort = a
	}
	if v := m["header"]; v != nil {
		if ft.Header, err = p.header(v, f+".header"); err != nil {
			return nil, err
		}
	}
	if err := p.u32(m, f, "max_active_faults", 1, maxCount, &ft.MaxActiveFaults); err != nil {
		return nil, err
	}
	if ft.Delay == nil && ft.Abort == nil {
		return nil, p.Errf(n, f, "set delay or abort (or both): with neither, nothing is injected")
	}
	return ft, nil
}

// grpcStatus reads a status code by name (unavailable, resource_exhausted
// or resource-exhausted) or number, 1..16: OK is not a fault.
func (p parser) grpcStatus(n *yaml.Node, f string) (uint32, error) {
	s, err := p.Scalar(n, f)
	if err != nil {
		return 0, err
	}
	if n.Tag == "!!int" {
		c, err := p.integer(n, f, 1, int64(len(grpcCodes)-1))
		return uint32(c), err
	}
	if i := slices.Index(grpcCodes, strings.ReplaceAll(s, "-", "_")); i > 0 && n.Tag == "!!str" {
		return uint32(i), nil
	}
	return 0, p.Errf(n, f, "%q is not a gRPC status code other than ok: want a lowercase name (unavailable, resource_exhausted, deadline_exceeded, ...) or a number 1..16", s)
}

// headerRE is what a metadata key may hold (gRPC's rule for keys, less
// the upper case that gRPC lowercases on the wire).
var headerRE = regexp.MustCompile(`^[a-z0-9_.-]+$`)

// header reads a request metadata key that a fault is gated on or a ring
// is hashed on: one an application sets and a client sends as text.
func (p parser) header(n *yaml.Node, f string) (string, error) {
	s, err := p.String(n, f)
	if err != nil {
		return "", err
	}
	switch {
	case s == "":
		return "", p.Errf(n, f, "empty: want a request metadata key such as x-user")
	case strings.HasPrefix(s, ":"):
		return "", p.Errf(n, f, "%q is a pseudo-header: want a request metadata key such as x-user", s)
	case strings.ToLower(s) != s:
		return "", p.Errf(n, f, "%q is not lowercase: gRPC metadata keys are", s)
	case !headerRE.MatchString(s):
		return "", p.Errf(n, f, "%q has a character other than a-z, 0-9, '-', '_' and '.'", s)
	case strings.HasPrefix(s, "grpc-"):
		return "", p.Errf(n, f, "%q starts with grpc-, which gRPC reserves for itself", s)
	case strings.HasSuffix(s, "-bin"):
		return "", p.Errf(n, f, "%q is a binary header (-bin), which gRPC clients neither match nor hash", s)
	}
	return s, nil
}

func (p parser) lb(n *yaml.Node, f string) (*LB, error) {
	policies := []string{"ring_hash", "least_request", "client_wrr"}
	m, err := p.Mapping(n, f, policies...)
	if err != nil {
		return nil, err
	}
	var first string
	for i := 0; i+1 < len(n.Content); i += 2 { // in file order, to blame the second
		k := n.Content[i]
		if first != "" {
			return nil, p.Errf(k, f+"."+k.Value, "%s.%s is set too: a service has one endpoint-picking policy", f, first)
		}
		first = k.Value
	}
	lb := &LB{}
	switch first {
	case "":
		return nil, p.Errf(n, f, "set one of %s (or leave lb out for round robin)", strings.Join(policies, ", "))
	case "ring_hash":
		lb.RingHash, err = p.ringHash(m[first], f+".ring_hash")
	case "least_request":
		lb.LeastRequest, err = p.leastRequest(m[first], f+".least_request")
	case "client_wrr":
		lb.ClientWRR, err = p.clientWRR(m[first], f+".client_wrr")
	}
	if err != nil {
		return nil, err
	}
	return lb, nil
}

func (p parser) leastRequest(n *yaml.Node, f string) (*LeastRequest, error) {
	m, err := p.Mapping(n, f, "choice_count")
	if err != nil {
		return nil, err
	}
	// grpc-go takes more than 10 and uses 10: refused, not shown as sent.
	lr := &LeastRequest{ChoiceCount: 2}
	if err := p.u32(m, f, "choice_count", 2, 10, &lr.ChoiceCount); err != nil {
		return nil, err
	}
	return lr, nil
}

func (p parser) ringHash(n *yaml.Node, f string) (*RingHash, error) {
	m, err := p.Mapping(n, f, "header", "min_ring_size", "max_ring_size")
	if err != nil {
		return nil, err
	}
	if m["header"] == nil {
		return nil, p.Errf(n, f+".header", "missing: the request metadata key to hash, e.g. x-user (without it every RPC picks a random endpoint)")
	}
	rh := &RingHash{MinRingSize: 1024, MaxRingSize: 4096}
	if rh.Header, err = p.header(m["header"], f+".header"); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		k string
		v *uint64
	}{{"min_ring_size", &rh.MinRingSize}, {"max_ring_size", &rh.MaxRingSize}} {
		if v := m[s.k]; v != nil {
			i, err := p.integer(v, f+"."+s.k, 1, maxRingSize)
			if err != nil {
				return nil, err
			}
			*s.v = uint64(i)
		}
	}
	if err := atLeast(p, m, n, f, "min_ring_size", "max_ring_size", rh.MinRingSize, rh.MaxRingSize); err != nil {
		return nil, err
	}
	return rh, nil
}

func (p parser) clientWRR(n *yaml.Node, f string) (*ClientWRR, error) {
	m, err := p.Mapping(n, f, "blackout_period", "weight_expiration_period", "weight_update_period", "error_utilization_penalty", "oob_reporting_period")
	if err != nil {
		return nil, err
	}
	w := &ClientWRR{
		BlackoutPeriod:          Duration(10 * time.Second),
		WeightExpirationPeriod:  Duration(3 * time.Minute),
		WeightUpdatePeriod:      Duration(time.Second),
		ErrorUtilizationPenalty: 1,
	}
	if err := p.dur(m, f, "blackout_period", time.Second, 10*time.Minute, &w.BlackoutPeriod); err != nil {
		return nil, err
	}
	if err := p.dur(m, f, "weight_expiration_period", time.Second, time.Hour, &w.WeightExpirationPeriod); err != nil {
		return nil, err
	}
	if err := atLeast(p, m, n, f, "blackout_period", "weight_expiration_period", time.Duration(w.BlackoutPeriod), time.Duration(w.WeightExpirationPeriod)); err != nil {
		return nil, err
	}
	if err := p.dur(m, f, "weight_update_period", 100*time.Millisecond, time.Minute, &w.WeightUpdatePeriod); err != nil {
		return nil, err
	}
	if err := p.flt(m, f, "error_utilization_penalty", 0, 10, true, &w.ErrorUtilizationPenalty); err != nil {
		return nil, err
	}
	if v := m["oob_reporting_period"]; v != nil {
		d, err := p.duration(v, f+".oob_reporting_period", 0, 10*time.Minute)
		if err != nil {
			return nil, err
		}
		if d != 0 && d < Duration(30*time.Second) {
			return nil, p.Errf(v, f+".oob_reporting_period", "%v is out of range: want 0 (weights from the RPCs' trailers) or [30s, 10m0s] (grpc-go servers report no faster than every 30s)", time.Duration(d))
		}
		w.OOBReportingPeriod = d
	}
	return w, nil
}

// u32 reads m[k], when set, as an integer in [lo, hi] into dst.
func (p parser) u32(m map[string]*yaml.Node, f, k string, lo, hi int64, dst *uint32) error {
	if v := m[k]; v != nil {
		i, err := p.integer(v, f+"."+k, lo, hi)
		if err != nil {
			return err
		}
		*dst = uint32(i)
	}
	return nil
}

// dur reads m[k], when set, as a duration in [lo, hi] into dst.
func (p parser) dur(m map[string]*yaml.Node, f, k string, lo, hi time.Duration, dst *Duration) error {
	if v := m[k]; v != nil {
		d, err := p.duration(v, f+"."+k, lo, hi)
		if err != nil {
			return err
		}
		*dst = d
	}
	return nil
}

// flt reads m[k], when set, as a number in [lo, hi] ((lo, hi] with
// loOpen) into dst.
func (p parser) flt(m map[string]*yaml.Node, f, k string, lo, hi float64, loOpen bool, dst *float64) error {
	if v := m[k]; v != nil {
		x, err := p.float(v, f+"."+k, lo, hi, loOpen)
		if err != nil {
			return err
		}
		*dst = x
	}
	return nil
}

// positiveDuration reads a duration in (0, hi].
func (p parser) positiveDuration(n *yaml.Node, f string, hi time.Duration) (Duration, error) {
	d, err := p.duration(n, f, 0, hi)
	if err == nil && d == 0 {
		err = p.Errf(n, f, "0s is out of range (0s, %v]: leave the field out for none", hi)
	}
	return d, err
}

// required refuses a block n (at path f) that lacks one of keys.
func (p parser) required(m map[string]*yaml.Node, n *yaml.Node, f string, keys ...string) error {
	for _, k := range keys {
		if m[k] == nil {
			return p.Errf(n, f+"."+k, "missing")
		}
	}
	return nil
}

// atLeast refuses hi < lo, two fields of block n at path f, naming hiKey
// at its line when the file sets it, else loKey (hi is then hiKey's
// default, which the file must raise).
func atLeast[T int64 | uint64 | time.Duration](p parser, m map[string]*yaml.Node, n *yaml.Node, f, loKey, hiKey string, lo, hi T) error {
	if hi >= lo {
		return nil
	}
	show := func(v T) string {
		if d, ok := any(v).(time.Duration); ok {
			return d.String()
		}
		return fmt.Sprint(v)
	}
	if v := m[hiKey]; v != nil {
		return p.Errf(v, f+"."+hiKey, "%s is below %s %s", show(hi), loKey, show(lo))
	}
	at := m[loKey]
	if at == nil {
		at = n
	}
	return p.Errf(at, f+"."+loKey, "%s is above %s (default %s): set %s too", show(lo), hiKey, show(hi), hiKey)
}

// resilienceWarnings lists what of c.Resilience, though valid, does not
// combine well with the endpoint weights c's strategy computes (a blend
// counts when either side computes PID weights, as the planner's).
func (c Config) resilienceWarnings() []string {
	lb := c.Resilience.LB
	if lb == nil {
		return nil
	}
	type use struct{ field, strategy string }
	uses := []use{{"strategy", c.Strategy}}
	if c.Blend != nil {
		uses = append(uses, use{"blend.from", c.Blend.From}, use{"blend.to", c.Blend.To})
	}
	pid := ""
	for _, u := range uses {
		if u.strategy == PID || u.strategy == ZoneAwarePID {
			pid = u.field + " " + u.strategy
			break
		}
	}
	switch {
	case pid == "":
		return nil
	case lb.LeastRequest != nil, lb.ClientWRR != nil:
		policy := "least_request"
		if lb.ClientWRR != nil {
			policy = "client_wrr"
		}
		return []string{fmt.Sprintf("resilience.lb.%s: gRPC clients ignore endpoint weights under least_request/client_wrr: PID weights (%s) will not apply; locality weights still do", policy, pid)}
	case lb.RingHash != nil:
		return []string{fmt.Sprintf("resilience.lb.ring_hash: the ring is built from the endpoint weights: every PID weight change (%s) rebuilds the ring and moves keys", pid)}
	}
	return nil
}
