package exchange

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry/names"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// Bounds on one Summary message. A sender splits an owner's services over
// several messages of at most MaxServices services (and about
// maxChunkBytes) each.
const (
	// MaxReplicaLen bounds a replica id.
	MaxReplicaLen = 128
	// MaxServices bounds the services of one message.
	MaxServices = 4096
	// MaxFlows bounds the flows of one service: 32 client zones × 32
	// upstream zones.
	MaxFlows = 1024
	// MaxClientZones bounds the client counts of one service.
	MaxClientZones = 256
	// MaxCount bounds one client count and one flow's reporters.
	MaxCount = 1 << 24
	// MaxInterval bounds a sender's report interval.
	MaxInterval = 10 * time.Minute
	// MaxAge bounds a flow's age (At minus its newest report), and an
	// endpoint report's.
	MaxAge = time.Hour
	// MaxEndpoints bounds the endpoint utilization reports of one
	// service.
	MaxEndpoints = 10_000
	// MaxShards bounds a shard number (0..MaxShards-1) and so the shards
	// a summary lists: ownership.MaxShards, which cmd/spillway checks.
	MaxShards = 100
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid load summary")

// fieldError names the field of a Summary that failed validation, in
// the proto's spelling (summary.services[3].flows[0].issued).
type fieldError struct {
	field, reason string
}

func (e *fieldError) Error() string { return e.field + ": " + e.reason }
func (e *fieldError) Unwrap() error { return ErrInvalid }

func errorf(field, format string, args ...any) error {
	return &fieldError{field: field, reason: fmt.Sprintf(format, args...)}
}

// ToProto encodes s for the wire. A flow's Updated travels as its age
// relative to At, so that the owner can place it on its own clock.
func ToProto(s load.Summary) *meshv1.Summary {
	m := &meshv1.Summary{
		Replica:    s.Replica,
		AtUnixNano: s.At.UnixNano(),
		IntervalMs: s.Interval.Milliseconds(),
		Services:   make([]*meshv1.ServiceSummary, len(s.Services)),
	}
	for i, ss := range s.Services {
		m.Services[i] = serviceToProto(ss, s.At)
	}
	m.Shards = shardsToProto(s.Shards)
	return m
}

func shardsToProto(shards []load.ShardEpoch) []*meshv1.ShardEpoch {
	if len(shards) == 0 {
		return nil
	}
	out := make([]*meshv1.ShardEpoch, len(shards))
	for i, se := range shards {
		out[i] = &meshv1.ShardEpoch{Shard: uint32(se.Shard), Epoch: se.Epoch}
	}
	return out
}

func serviceToProto(ss load.ServiceSummary, at time.Time) *meshv1.ServiceSummary {
	ms := &meshv1.ServiceSummary{Service: ss.Service}
	if len(ss.Flows) > 0 {
		ms.Flows = make([]*meshv1.Flow, len(ss.Flows))
		for j, f := range ss.Flows {
			var age int64
			if !f.Updated.IsZero() {
				age = max(at.Sub(f.Updated).Milliseconds(), 0)
			}
			ms.Flows[j] = &meshv1.Flow{
				ClientZone: f.ClientZone, Zone: f.Zone,
				Issued: f.Issued, Succeeded: f.Succeeded, Errored: f.Errored,
				InProgress: f.InProgress, Reporters: uint32(f.Reporters), AgeMs: age,
			}
		}
	}
	if len(ss.Clients) > 0 {
		ms.Clients = make([]*meshv1.ClientCount, len(ss.Clients))
		for j, c := range ss.Clients {
			ms.Clients[j] = &meshv1.ClientCount{Zone: c.Zone, Count: uint32(c.Count)}
		}
	}
	if len(ss.Endpoints) > 0 {
		ms.Endpoints = make([]*meshv1.EndpointReport, len(ss.Endpoints))
		for j, e := range ss.Endpoints {
			var age int64
			if !e.Reported.IsZero() {
				age = max(at.Sub(e.Reported).Milliseconds(), 0)
			}
			ms.Endpoints[j] = &meshv1.EndpointReport{
				Id: e.ID, Cpu: e.CPU, InFlight: e.InFlight, Limit: e.Limit,
				AgeMs: age, IntervalMs: e.Interval.Milliseconds(),
				Rps: e.RPS, Eps: e.EPS, LatencyMs: e.LatencyMs,
			}
		}
	}
	return ms
}

// FromProto decodes and validates a Summary received from another
// replica: untrusted input. The error names the first bad field and
// wraps ErrInvalid.
func FromProto(m *meshv1.Summary) (load.Summary, error) {
	if m == nil {
		return load.Summary{}, errorf("summary", "missing")
	}
	if m.IntervalMs <= 0 || m.IntervalMs > MaxInterval.Milliseconds() {
		return load.Summary{}, errorf("summary.interval_ms", "%d, want 1..%d", m.IntervalMs, MaxInterval.Milliseconds())
	}
	if m.AtUnixNano <= 0 {
		return load.Summary{}, errorf("summary.at_unix_nano", "%d, want a time after 1970", m.AtUnixNano)
	}
	if len(m.Services) > MaxServices {
		return load.Summary{}, errorf("summary.services", "%d services, at most %d in one message", len(m.Services), MaxServices)
	}
	if len(m.Shards) > MaxShards {
		return load.Summary{}, errorf("summary.shards", "%d shards, at most %d", len(m.Shards), MaxShards)
	}
	s := load.Summary{
		Replica:  m.Replica,
		At:       time.Unix(0, m.AtUnixNano),
		Interval: time.Duration(m.IntervalMs) * time.Millisecond,
		Services: make([]load.ServiceSummary, len(m.Services)),
	}
	for i, ms := range m.Services {
		if ms == nil {
			return load.Summary{}, errorf(fmt.Sprintf("summary.services[%d]", i), "missing")
		}
		ss := load.ServiceSummary{Service: ms.Service}
		if len(ms.Flows) > MaxFlows {
			return load.Summary{}, errorf(fmt.Sprintf("summary.services[%d].flows", i), "%d flows, at most %d", len(ms.Flows), MaxFlows)
		}
		if len(ms.Clients) > MaxClientZones {
			return load.Summary{}, errorf(fmt.Sprintf("summary.services[%d].clients", i), "%d zones, at most %d", len(ms.Clients), MaxClientZones)
		}
		if len(ms.Flows) > 0 {
			ss.Flows = make([]load.Flow, len(ms.Flows))
		}
		for j, f := range ms.Flows {
			field := fmt.Sprintf("summary.services[%d].flows[%d]", i, j)
			if f == nil {
				return load.Summary{}, errorf(field, "missing")
			}
			if f.AgeMs < 0 || f.AgeMs > MaxAge.Milliseconds() {
				return load.Summary{}, errorf(field+".age_ms", "%d, want 0..%d", f.AgeMs, MaxAge.Milliseconds())
			}
			if f.Reporters > MaxCount {
				return load.Summary{}, errorf(field+".reporters", "%d, at most %d", f.Reporters, MaxCount)
			}
			ss.Flows[j] = load.Flow{
				ClientZone: f.ClientZone, Zone: f.Zone,
				Issued: f.Issued, Succeeded: f.Succeeded, Errored: f.Errored,
				InProgress: f.InProgress, Reporters: int(f.Reporters),
				Updated: s.At.Add(-time.Duration(f.AgeMs) * time.Millisecond),
			}
		}
		if len(ms.Clients) > 0 {
			ss.Clients = make([]load.ClientCount, len(ms.Clients))
		}
		for j, c := range ms.Clients {
			if c == nil {
				return load.Summary{}, errorf(fmt.Sprintf("summary.services[%d].clients[%d]", i, j), "missing")
			}
			if c.Count > MaxCount {
				return load.Summary{}, errorf(fmt.Sprintf("summary.services[%d].clients[%d].count", i, j), "%d, at most %d", c.Count, MaxCount)
			}
			ss.Clients[j] = load.ClientCount{Zone: c.Zone, Count: int(c.Count)}
		}
		if len(ms.Endpoints) > MaxEndpoints {
			return load.Summary{}, errorf(fmt.Sprintf("summary.services[%d].endpoints", i), "%d endpoints, at most %d", len(ms.Endpoints), MaxEndpoints)
		}
		if len(ms.Endpoints) > 0 {
			ss.Endpoints = make([]load.EndpointUtilization, len(ms.Endpoints))
		}
		for j, e := range ms.Endpoints {
			field := fmt.Sprintf("summary.services[%d].endpoints[%d]", i, j)
			if e == nil {
				return load.Summary{}, errorf(field, "missing")
			}
			if e.AgeMs < 0 || e.AgeMs > MaxAge.Milliseconds() {
				return load.Summary{}, errorf(field+".age_ms", "%d, want 0..%d", e.AgeMs, MaxAge.Milliseconds())
			}
			if e.IntervalMs < load.MinReportInterval.Milliseconds() || e.IntervalMs > load.MaxReportInterval.Milliseconds() {
				return load.Summary{}, errorf(field+".interval_ms", "%d, want %d..%d", e.IntervalMs, load.MinReportInterval.Milliseconds(), load.MaxReportInterval.Milliseconds())
			}
			ss.Endpoints[j] = load.EndpointUtilization{
				ID: e.Id, CPU: e.Cpu, InFlight: e.InFlight, Limit: e.Limit,
				Utilization: load.UtilizationOf(e.Cpu, e.InFlight, e.Limit),
				Reported:    s.At.Add(-time.Duration(e.AgeMs) * time.Millisecond),
				Interval:    time.Duration(e.IntervalMs) * time.Millisecond,
				// Absent (a sender before these fields): 0, not reported.
				RPS: e.Rps, EPS: e.Eps, LatencyMs: e.LatencyMs,
			}
		}
		s.Services[i] = ss
	}
	if len(m.Shards) > 0 {
		s.Shards = make([]load.ShardEpoch, len(m.Shards))
	}
	for i, se := range m.Shards {
		if se == nil {
			return load.Summary{}, errorf(fmt.Sprintf("summary.shards[%d]", i), "missing")
		}
		if se.Shard >= MaxShards {
			return load.Summary{}, errorf(fmt.Sprintf("summary.shards[%d].shard", i), "%d, want 0..%d", se.Shard, MaxShards-1)
		}
		s.Shards[i] = load.ShardEpoch{Shard: int(se.Shard), Epoch: se.Epoch}
	}
	if err := Validate(s); err != nil {
		return load.Summary{}, err
	}
	return s, nil
}

// Validate checks a Summary: the sender's replica id, the interval, every
// service name (registry rules), zone (a DNS label or ""), rate (finite,
// non-negative) and count (bounded), and that no service, flow or client
// zone appears twice; every shard is 0..MaxShards-1 with an epoch >= 1,
// listed once. The error names the field in the proto's spelling
// and wraps ErrInvalid.
func Validate(s load.Summary) error {
	if err := validateReplica(s.Replica); err != nil {
		return err
	}
	if s.Interval <= 0 || s.Interval > MaxInterval {
		return errorf("summary.interval_ms", "%v, want (0, %v]", s.Interval, MaxInterval)
	}
	if s.At.IsZero() {
		return errorf("summary.at_unix_nano", "missing")
	}
	if len(s.Services) > MaxServices {
		return errorf("summary.services", "%d services, at most %d in one message", len(s.Services), MaxServices)
	}
	seen := make(map[string]struct{}, len(s.Services))
	for i, ss := range s.Services {
		if err := names.ValidateService("", ss.Service); err != nil {
			err = names.ValidateService(fmt.Sprintf("summary.services[%d].service", i), ss.Service)
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
		if _, dup := seen[ss.Service]; dup {
			return errorf(fmt.Sprintf("summary.services[%d].service", i), "%q appears twice", ss.Service)
		}
		seen[ss.Service] = struct{}{}
		if err := validateService(i, ss, s.At); err != nil {
			return err
		}
	}
	return validateShards(s.Shards)
}

// validateShards checks a summary's shard acknowledgements.
func validateShards(shards []load.ShardEpoch) error {
	if len(shards) > MaxShards {
		return errorf("summary.shards", "%d shards, at most %d", len(shards), MaxShards)
	}
	var seen [MaxShards]bool
	for i, se := range shards {
		switch {
		case se.Shard < 0 || se.Shard >= MaxShards:
			return errorf(fmt.Sprintf("summary.shards[%d].shard", i), "%d, want 0..%d", se.Shard, MaxShards-1)
		case se.Epoch < 1:
			return errorf(fmt.Sprintf("summary.shards[%d].epoch", i), "%d, want >= 1", se.Epoch)
		case seen[se.Shard]:
			return errorf(fmt.Sprintf("summary.shards[%d].shard", i), "%d appears twice", se.Shard)
		}
		seen[se.Shard] = true
	}
	return nil
}

// validateService checks service i of a summary taken at at.
func validateService(i int, ss load.ServiceSummary, at time.Time) error {
	field := "summary.services[" + strconv.Itoa(i) + "]"
	if len(ss.Flows) > MaxFlows {
		return errorf(field+".flows", "%d flows, at most %d", len(ss.Flows), MaxFlows)
	}
	if len(ss.Clients) > MaxClientZones {
		return errorf(field+".clients", "%d zones, at most %d", len(ss.Clients), MaxClientZones)
	}
	type pair struct{ c, z string }
	flows := make(map[pair]struct{}, len(ss.Flows))
	for j, f := range ss.Flows {
		// Field names are built only for an error: this runs for every
		// flow of every summary.
		ff := func(sub string) string { return fmt.Sprintf("%s.flows[%d]%s", field, j, sub) }
		if !validZone(f.ClientZone) {
			return validateZone(ff(".client_zone"), f.ClientZone)
		}
		if !validZone(f.Zone) {
			return validateZone(ff(".zone"), f.Zone)
		}
		if _, dup := flows[pair{f.ClientZone, f.Zone}]; dup {
			return errorf(ff(""), "client zone %q to zone %q appears twice", f.ClientZone, f.Zone)
		}
		flows[pair{f.ClientZone, f.Zone}] = struct{}{}
		for _, r := range [...]struct {
			name string
			v    float64
		}{{"issued", f.Issued}, {"succeeded", f.Succeeded}, {"errored", f.Errored}} {
			if !(r.v >= 0 && r.v <= math.MaxFloat64) { // also NaN
				return errorf(ff("."+r.name), "%v, want a finite rate >= 0", r.v)
			}
		}
		if f.Reporters < 0 || f.Reporters > MaxCount {
			return errorf(ff(".reporters"), "%d, want 0..%d", f.Reporters, MaxCount)
		}
		if !f.Updated.IsZero() && (f.Updated.After(at) || at.Sub(f.Updated) > MaxAge) {
			return errorf(ff(".age_ms"), "updated %v, want within %v before the summary's time %v", f.Updated, MaxAge, at)
		}
	}
	zones := make(map[string]struct{}, len(ss.Clients))
	for j, c := range ss.Clients {
		cf := func(sub string) string { return fmt.Sprintf("%s.clients[%d]%s", field, j, sub) }
		if !validZone(c.Zone) {
			return validateZone(cf(".zone"), c.Zone)
		}
		if _, dup := zones[c.Zone]; dup {
			return errorf(cf(".zone"), "%q appears twice", c.Zone)
		}
		zones[c.Zone] = struct{}{}
		if c.Count < 0 || c.Count > MaxCount {
			return errorf(cf(".count"), "%d, want 0..%d", c.Count, MaxCount)
		}
	}
	return validateEndpoints(field, ss.Endpoints, at)
}

// validateEndpoints checks a service's endpoint utilization reports (the
// registry API's bounds, load.ValidateUtilization) under field: the
// optional rps, eps and latency_ms too (0 is not reported).
func validateEndpoints(field string, eps []load.EndpointUtilization, at time.Time) error {
	if len(eps) > MaxEndpoints {
		return errorf(field+".endpoints", "%d endpoints, at most %d", len(eps), MaxEndpoints)
	}
	if len(eps) == 0 {
		return nil
	}
	ids := make(map[string]struct{}, len(eps))
	for j, e := range eps {
		ef := func(sub string) string { return fmt.Sprintf("%s.endpoints[%d]%s", field, j, sub) }
		if err := names.ValidateLabel("", e.ID); err != nil {
			return fmt.Errorf("%w: %w", names.ValidateLabel(ef(".id"), e.ID), ErrInvalid)
		}
		if _, dup := ids[e.ID]; dup {
			return errorf(ef(".id"), "%q appears twice", e.ID)
		}
		ids[e.ID] = struct{}{}
		switch {
		case !(e.CPU >= 0 && e.CPU <= load.MaxCPU): // also NaN
			return errorf(ef(".cpu"), "%v, want 0..%v", e.CPU, load.MaxCPU)
		case e.InFlight > load.MaxLimit:
			return errorf(ef(".in_flight"), "%d, want 0..%d", e.InFlight, load.MaxLimit)
		case e.Limit > load.MaxLimit:
			return errorf(ef(".limit"), "%d, want 0..%d", e.Limit, load.MaxLimit)
		case e.Limit == 0 && e.InFlight != 0:
			return errorf(ef(".limit"), "0 (in-flight unknown) but in_flight is %d", e.InFlight)
		case e.Interval < load.MinReportInterval || e.Interval > load.MaxReportInterval:
			return errorf(ef(".interval_ms"), "%d, want %d..%d", e.Interval.Milliseconds(), load.MinReportInterval.Milliseconds(), load.MaxReportInterval.Milliseconds())
		case e.Reported.IsZero() || e.Reported.After(at) || at.Sub(e.Reported) > MaxAge:
			return errorf(ef(".age_ms"), "reported %v, want within %v before the summary's time %v", e.Reported, MaxAge, at)
		case e.Utilization != load.UtilizationOf(e.CPU, e.InFlight, e.Limit):
			return errorf(ef(".cpu"), "utilization %v does not match cpu, in_flight and limit", e.Utilization)
		case !(e.RPS >= 0 && e.RPS <= load.MaxRPS): // also NaN
			return errorf(ef(".rps"), "%v, want 0..%g", e.RPS, float64(load.MaxRPS))
		case !(e.EPS >= 0 && e.EPS <= e.RPS):
			return errorf(ef(".eps"), "%v, want 0..rps (%v)", e.EPS, e.RPS)
		case !(e.LatencyMs >= 0 && e.LatencyMs <= load.MaxLatencyMs):
			return errorf(ef(".latency_ms"), "%v, want 0..%g", e.LatencyMs, float64(load.MaxLatencyMs))
		}
	}
	return nil
}

// validZone is validateZone without the error, for the hot path.
func validZone(z string) bool {
	return z == "" || names.ValidateLabel("", z) == nil
}

func validateZone(field, z string) error {
	if z == "" {
		return nil
	}
	if err := names.ValidateLabel(field, z); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	return nil
}

func validateReplica(id string) error {
	if id == "" {
		return errorf("summary.replica", "must not be empty")
	}
	if len(id) > MaxReplicaLen {
		return errorf("summary.replica", "%d characters, at most %d", len(id), MaxReplicaLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || isReplicaPunct(c)) {
			return errorf("summary.replica", "%q: character %q not allowed (letters, digits and -_.:=@+)", id, c)
		}
	}
	return nil
}

func isReplicaPunct(c byte) bool {
	switch c {
	case '-', '_', '.', ':', '=', '@', '+':
		return true
	}
	return false
}
