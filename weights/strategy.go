package weights

import (
	"time"

	"github.com/spillway/spillway/weights/pid"
	"github.com/spillway/spillway/weights/zoneaware"
)

// EndpointUtilization is one endpoint's latest utilization report, as the
// owner's table of backend reports holds it.
type EndpointUtilization struct {
	// ID is the registry endpoint ID.
	ID string
	// CPU is the share of the endpoint's CPU limit in use (1 = busy);
	// InFlight the RPCs in progress and Limit its in-flight limit (<= 0:
	// none). See pid.Utilization.
	CPU, InFlight, Limit float64
	// RPS and EPS are the requests and failed requests per second the
	// endpoint served, LatencyMs their mean latency; 0 when the backend
	// does not report them (pid.Endpoint: the error penalty and guard
	// leave it alone).
	RPS, EPS, LatencyMs float64
	// Reported is when the report was taken.
	Reported time.Time
}

// UtilizationSource gives the latest utilization report of each endpoint
// of a service that has one. It is called from the planner's cycle only.
type UtilizationSource interface {
	Utilizations(service string, now time.Time) []EndpointUtilization
}

// Strategy is what the planner needs of a service's configuration.
type Strategy struct {
	// PID computes per-endpoint weights with weights/pid: inside the zone
	// split when ZoneAware is true (zone-aware+pid), alone otherwise (pid).
	PID bool
	// ZoneAware: zone-aware locality weights. False with PID: a locality
	// weighs the sum of its endpoints' PID weights. False without PID:
	// zone-aware anyway (there is nothing else to weigh localities by).
	ZoneAware bool
	// PIDConfig tunes the controller; its Metric field is overridden by
	// Metric. Its ErrorPenalty and ErrorGuard (nil: on) are the
	// death-spiral brakes; both off is the controller on utilization
	// alone.
	PIDConfig pid.Config
	// Metric turns a report into a utilization (pid.Utilization).
	Metric pid.Metric
	// Blend, when non-nil, blends two strategies' endpoint weights.
	Blend *Blend
	// ZoneAwareConfig, when non-nil, replaces the planner's
	// Config.ZoneAware for this service (its own probe share, headroom,
	// slow start); nil uses the planner's.
	ZoneAwareConfig *zoneaware.Config
	// Subset gives clients subsets of the endpoints; the zero value
	// gives every client every endpoint.
	Subset SubsetConfig
}

// Blend moves a service between two strategies: the pushed endpoint
// weights are pid.Blend(from's weights, to's weights, Percent), see the
// package doc.
type Blend struct {
	// From and To are strategy names: "zone-aware", "pid",
	// "zone-aware+pid" or "static".
	From, To string
	// Percent of To, 0..100.
	Percent float64
}

// StrategySource gives each service's strategy. It is called from the
// planner's cycle only.
type StrategySource interface {
	Strategy(service string) Strategy
}

// StrategyFunc adapts a function to StrategySource.
type StrategyFunc func(service string) Strategy

// Strategy implements StrategySource.
func (f StrategyFunc) Strategy(service string) Strategy { return f(service) }

// UtilizationFunc adapts a function to UtilizationSource.
type UtilizationFunc func(service string, now time.Time) []EndpointUtilization

// Utilizations implements UtilizationSource.
func (f UtilizationFunc) Utilizations(service string, now time.Time) []EndpointUtilization {
	return f(service, now)
}

// EndpointWeight is one endpoint's pushed weight and why.
type EndpointWeight struct {
	// Zone of the endpoint.
	Zone string
	// Weight is the pushed load_balancing_weight, >= 1 (after Blend).
	Weight uint32
	// PIDWeight is the controller's weight before any blend.
	PIDWeight uint32
	// Utilization of the report used and its Age at the cycle (0: never
	// reported).
	Utilization float64
	Age         time.Duration
	// Status is the endpoint's pid.Status ("fresh", "missing", "new",
	// "held").
	Status string
	// Error and the P, I, D terms of the controller (pid.EndpointResult).
	Error, P, I, D float64
	// RPS, ErrorRate and LatencyMs of the report used (0: not reported,
	// or under the controller's MinRPS); Effective the utilization the
	// controller steered (Utilization + error penalty), 0 unless the
	// report has a request rate. Omitted from JSON when 0 (mesh plan
	// records of backends that report none stay as they were).
	RPS       float64 `json:",omitempty"`
	ErrorRate float64 `json:",omitempty"`
	LatencyMs float64 `json:",omitempty"`
	Effective float64 `json:",omitempty"`
	// Guard is why the error guard held the endpoint down this cycle
	// (pid.Guard: "errors", "latency"), or "".
	Guard string `json:",omitempty"`
}

// PIDExplain is a service's PID round as the plan holds it.
type PIDExplain struct {
	// Outcome is the pid.Outcome's name; Setpoint the utilization steered
	// to; Missing how many known endpoints had no fresh report.
	Outcome  string
	Setpoint float64
	Known    int
	Missing  int
	// MedianErrorRate and MedianLatencyMs are what the error guard
	// compared each endpoint with; Guarded how many it held down.
	MedianErrorRate float64 `json:",omitempty"`
	MedianLatencyMs float64 `json:",omitempty"`
	Guarded         int     `json:",omitempty"`
	// Blend is the blend applied, or nil.
	Blend *Blend
}

// strategyUsesPID reports whether a strategy name computes PID weights.
func strategyUsesPID(name string) bool { return name == "pid" || name == "zone-aware+pid" }
