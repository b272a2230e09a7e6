package load

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
)

// UtilizationReport is one backend's utilization at one moment, as the
// registry API receives it (registry.UtilizationReport): CPU within
// 0..MaxCPU, Interval within MinReportInterval..MaxReportInterval
// (ValidateUtilization).
type UtilizationReport = registry.UtilizationReport

// EndpointUtilization is the latest report of one endpoint.
type EndpointUtilization struct {
	ID       string
	CPU      float64
	InFlight uint32
	Limit    uint32 // 0: in-flight unknown
	// Utilization is max(CPU, InFlight/Limit), capped at 1 (CPU alone
	// when Limit is 0): the default metric of the PID planner.
	Utilization float64
	// Reported is the report's arrival time; Interval the sender's.
	Reported time.Time
	Interval time.Duration
	// RPS, EPS and LatencyMs are what the backend served over its last
	// window (registry.UtilizationReport); 0 when it does not say.
	RPS, EPS, LatencyMs float64
}

// Bounds of a utilization report.
const (
	// MaxCPU allows a sampled CPU share a little above the quota: a cgroup
	// may burst above its quota within one CFS period, and two samples a
	// few milliseconds off the interval read more than 100%. Reports above
	// it are refused as broken, not clamped.
	MaxCPU            = 1.5
	MaxLimit          = 1 << 20
	MinReportInterval = 100 * time.Millisecond
	MaxReportInterval = 5 * time.Minute
	// MaxRPS bounds a report's request rate, MaxLatencyMs its latency (1 h).
	MaxRPS       = 1e7
	MaxLatencyMs = 3.6e6
	// UtilizationSilent is how long an endpoint's last report is kept.
	UtilizationSilent = 5 * time.Minute
)

// Results of Record, the values of the result label of
// spillway_utilization_reports_total.
const (
	UtilizationAccepted        = "accepted"
	UtilizationInvalid         = "invalid"
	UtilizationUnknownEndpoint = "unknown_endpoint"
	UtilizationWrongLease      = "wrong_lease" // counted by the registry API
)

// ErrUnknownEndpoint is returned by Record for an endpoint that is not in
// the registry snapshot; it wraps registry.ErrNotFound, so the registry
// API answers NotFound without knowing this package.
var ErrUnknownEndpoint = fmt.Errorf("endpoint not in the registry: %w", registry.ErrNotFound)

// Snapshotter gives the current registry snapshot (a *registry.Store).
type Snapshotter interface {
	Snapshot() *registry.Snapshot
}

// UtilizationTable holds the latest utilization report of every endpoint
// that reports one. Only endpoints in the registry are recorded, so it is
// bounded by the registry's size: a report for an unknown endpoint is
// refused (ErrUnknownEndpoint) and counted; an entry goes when its
// endpoint leaves the registry or after UtilizationSilent without a
// report (on the next read of its service, and on a sweep every 4096
// records or Prune). It is safe for concurrent use.
type UtilizationTable struct {
	// Read-only after NewUtilizationTable.
	store   Snapshotter
	results *prometheus.CounterVec

	// mu guards entries and records.
	mu      sync.Mutex
	entries map[string]map[string]EndpointUtilization // service -> endpoint id
	records int                                       // since the last sweep
}

// NewUtilizationTable returns an empty table that checks reports against
// store (non-nil) and registers spillway_utilization_reports_total with
// reg (or nil).
func NewUtilizationTable(store Snapshotter, reg prometheus.Registerer) *UtilizationTable {
	t := &UtilizationTable{
		store: store,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_utilization_reports_total",
			Help: "Utilization reports received, by result: accepted, invalid, unknown_endpoint, wrong_lease.",
		}, []string{"result"}),
		entries: map[string]map[string]EndpointUtilization{},
	}
	for _, r := range []string{UtilizationAccepted, UtilizationInvalid, UtilizationUnknownEndpoint, UtilizationWrongLease} {
		t.results.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(t.results); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				t.results = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return t
}

// Count adds one report with result to the metric (for results decided
// by the caller, e.g. UtilizationWrongLease).
func (t *UtilizationTable) Count(result string) { t.results.WithLabelValues(result).Inc() }

// ValidateUtilization checks r; the error is a *registry.FieldError
// naming the wire field (service, endpoint_id, cpu, in_flight, limit,
// interval_ms, rps, eps, latency_ms). Service must already be normalised.
// rps, eps and latency_ms are optional (0: not reported); when set they
// are finite, rps within 0..MaxRPS, eps within 0..rps and latency_ms
// within 0..MaxLatencyMs.
func ValidateUtilization(r UtilizationReport) error {
	if err := registry.ValidateService("service", r.Service); err != nil {
		return err
	}
	if err := registry.ValidateLabel("endpoint_id", r.EndpointID); err != nil {
		return err
	}
	switch {
	case math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0):
		return &registry.FieldError{Field: "cpu", Reason: fmt.Sprintf("%v is not a finite number", r.CPU)}
	case r.CPU < 0 || r.CPU > MaxCPU:
		return &registry.FieldError{Field: "cpu", Reason: fmt.Sprintf("%v is outside 0..%v", r.CPU, MaxCPU)}
	case r.Limit > MaxLimit:
		return &registry.FieldError{Field: "limit", Reason: fmt.Sprintf("%d is above %d", r.Limit, MaxLimit)}
	case r.Limit == 0 && r.InFlight != 0:
		return &registry.FieldError{Field: "limit", Reason: fmt.Sprintf("is 0 (in-flight unknown) but in_flight is %d; a limit is at least 1", r.InFlight)}
	case r.InFlight > MaxLimit:
		return &registry.FieldError{Field: "in_flight", Reason: fmt.Sprintf("%d is above %d", r.InFlight, MaxLimit)}
	case r.Interval < MinReportInterval || r.Interval > MaxReportInterval:
		return &registry.FieldError{Field: "interval_ms", Reason: fmt.Sprintf("%d is outside %d..%d", r.Interval.Milliseconds(), MinReportInterval.Milliseconds(), MaxReportInterval.Milliseconds())}
	case !(r.RPS >= 0 && r.RPS <= MaxRPS):
		return &registry.FieldError{Field: "rps", Reason: fmt.Sprintf("%v is outside 0..%g", r.RPS, float64(MaxRPS))}
	case !(r.EPS >= 0 && r.EPS <= r.RPS):
		return &registry.FieldError{Field: "eps", Reason: fmt.Sprintf("%v is outside 0..rps (%v): errors are a part of the requests", r.EPS, r.RPS)}
	case !(r.LatencyMs >= 0 && r.LatencyMs <= MaxLatencyMs):
		return &registry.FieldError{Field: "latency_ms", Reason: fmt.Sprintf("%v is outside 0..%g", r.LatencyMs, float64(MaxLatencyMs))}
	}
	return nil
}

// Record validates r and stores it as its endpoint's latest report,
// arrived at now. It returns the endpoint as the registry holds it, so
// the caller can check who owns it. Nothing is stored when it returns an
// error: a *registry.FieldError (wraps registry.ErrInvalid) or
// ErrUnknownEndpoint. check, when non-nil, is called with the endpoint
// before storing; its error is returned and nothing is stored.
func (t *UtilizationTable) Record(r UtilizationReport, now time.Time, check func(*registry.Endpoint) error) error {
	if err := ValidateUtilization(r); err != nil {
		t.Count(UtilizationInvalid)
		return err
	}
	svc, ok := t.store.Snapshot().Service(r.Service)
	var e *registry.Endpoint
	if ok {
		e, ok = svc.Endpoint(r.EndpointID)
	}
	if !ok {
		t.Count(UtilizationUnknownEndpoint)
		return fmt.Errorf("service %q endpoint %q: %w", r.Service, r.EndpointID, ErrUnknownEndpoint)
	}
	if check != nil {
		if err := check(e); err != nil {
			return err
		}
	}
	u := EndpointUtilization{ID: r.EndpointID, CPU: r.CPU, InFlight: r.InFlight, Limit: r.Limit,
		Utilization: UtilizationOf(r.CPU, r.InFlight, r.Limit), Reported: now, Interval: r.Interval,
		RPS: r.RPS, EPS: r.EPS, LatencyMs: r.LatencyMs}
	t.mu.Lock()
	m := t.entries[r.Service]
	if m == nil {
		m = map[string]EndpointUtilization{}
		t.entries[r.Service] = m
	}
	m[r.EndpointID] = u
	t.records++
	sweep := t.records >= 4096
	if sweep {
		t.records = 0
	}
	t.mu.Unlock()
	t.Count(UtilizationAccepted)
	if sweep {
		t.Prune(now)
	}
	return nil
}

// UtilizationOf is max(cpu, inFlight/limit), capped at 1; cpu alone
// when limit is 0.
func UtilizationOf(cpu float64, inFlight, limit uint32) float64 {
	u := cpu
	if limit > 0 {
		u = max(u, float64(inFlight)/float64(limit))
	}
	return min(u, 1)
}

// Utilizations returns the latest report of each of service's endpoints
// that is still in the registry and reported within UtilizationSilent of
// now, sorted by ID. Entries that fail either test are forgotten.
func (t *UtilizationTable) Utilizations(service string, now time.Time) []EndpointUtilization {
	svc, known := t.store.Snapshot().Service(service)
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.entries[service]
	out := make([]EndpointUtilization, 0, len(m))
	for id, u := range m {
		if !t.keep(svc, known, id, u, now) {
			delete(m, id)
			continue
		}
		out = append(out, u)
	}
	if len(m) == 0 {
		delete(t.entries, service)
	}
	slices.SortFunc(out, func(a, b EndpointUtilization) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// All returns Utilizations(service, now) of every service with a report,
// leaving out reports that arrived after now (a report recorded while the
// caller's now was being taken) and reports older than three of their
// intervals, which the owner would not use: what a replica sends its
// services' owners (exchange.SummarizeWith). Lists are sorted by ID.
func (t *UtilizationTable) All(now time.Time) map[string][]EndpointUtilization {
	snap := t.store.Snapshot()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]EndpointUtilization, len(t.entries))
	for name, m := range t.entries {
		svc, known := snap.Service(name)
		var us []EndpointUtilization
		for id, u := range m {
			if !t.keep(svc, known, id, u, now) {
				delete(m, id)
				continue
			}
			if !u.Reported.After(now) && now.Sub(u.Reported) <= staleAfter*u.Interval {
				us = append(us, u)
			}
		}
		if len(m) == 0 {
			delete(t.entries, name)
		}
		if len(us) > 0 {
			slices.SortFunc(us, func(a, b EndpointUtilization) int { return strings.Compare(a.ID, b.ID) })
			out[name] = us
		}
	}
	return out
}

func (t *UtilizationTable) keep(svc *registry.Service, known bool, id string, u EndpointUtilization, now time.Time) bool {
	if !known || now.Sub(u.Reported) > UtilizationSilent {
		return false
	}
	_, ok := svc.Endpoint(id)
	return ok
}

// Prune forgets the entries of endpoints gone from the registry and those
// silent for UtilizationSilent.
func (t *UtilizationTable) Prune(now time.Time) {
	snap := t.store.Snapshot()
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, m := range t.entries {
		svc, known := snap.Service(name)
		for id, u := range m {
			if !t.keep(svc, known, id, u, now) {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(t.entries, name)
		}
	}
}

// Len is the number of endpoints held.
func (t *UtilizationTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, m := range t.entries {
		n += len(m)
	}
	return n
}
