package zoneaware

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Source says where a demand figure comes from.
type Source uint8

const (
	// SourceNone: no demand is known; weights follow capacity.
	SourceNone Source = iota
	// SourceLRS: request rates from load reports (Demand.RPS).
	SourceLRS
	// SourceClients: connected xDS clients (ClientCount.Count), used when
	// there are no load reports or they show no traffic.
	SourceClients
)

func (s Source) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourceLRS:
		return "lrs"
	case SourceClients:
		return "clients"
	}
	return fmt.Sprintf("Source(%d)", s)
}

// Fallback names why a vector is not the plain fill-local result from
// measured demand. The service-wide ones are in Result.Fallback; a Route
// carries the service-wide one, else its own.
type Fallback uint8

const (
	// FallbackNone: local first, from load-report demand.
	FallbackNone Fallback = iota
	// FallbackClientCounts: local first, but from connected client counts,
	// because there are no load reports or they show no traffic.
	FallbackClientCounts
	// FallbackNoDemand: no load reports and no connected clients;
	// capacity-proportional weights.
	FallbackNoDemand
	// FallbackStale: some load data is older than Config.StaleAfter report
	// intervals; fail open to capacity-proportional weights.
	FallbackStale
	// FallbackInconsistent: load data that cannot be right (negative or
	// non-finite rates, duplicate zones, demand that does not match the
	// upstream totals, timestamps in the future); fail open to
	// capacity-proportional weights.
	FallbackInconsistent
	// FallbackNoEndpoints: the service has no healthy endpoint; every
	// vector is empty.
	FallbackNoEndpoints
	// FallbackZoneless: the route for clients without a zone;
	// capacity-proportional.
	FallbackZoneless
	// FallbackUnknownDemand: other zones have demand figures but this
	// client zone has none; capacity-proportional.
	FallbackUnknownDemand
)

func (f Fallback) String() string {
	switch f {
	case FallbackNone:
		return "none"
	case FallbackClientCounts:
		return "no load data, client counts"
	case FallbackNoDemand:
		return "no demand data"
	case FallbackStale:
		return "stale load data"
	case FallbackInconsistent:
		return "inconsistent load data"
	case FallbackNoEndpoints:
		return "no healthy endpoints"
	case FallbackZoneless:
		return "client without zone"
	case FallbackUnknownDemand:
		return "no demand data for this zone"
	}
	return fmt.Sprintf("Fallback(%d)", f)
}

// Fallbacks lists every Fallback, for metrics that show each state.
func Fallbacks() []Fallback {
	return []Fallback{FallbackNone, FallbackClientCounts, FallbackNoDemand, FallbackStale,
		FallbackInconsistent, FallbackNoEndpoints, FallbackZoneless, FallbackUnknownDemand}
}

// Key is a short identifier of f for metric labels and JSON.
func (f Fallback) Key() string {
	switch f {
	case FallbackNone:
		return "none"
	case FallbackClientCounts:
		return "client_counts"
	case FallbackNoDemand:
		return "no_demand"
	case FallbackStale:
		return "stale"
	case FallbackInconsistent:
		return "inconsistent"
	case FallbackNoEndpoints:
		return "no_endpoints"
	case FallbackZoneless:
		return "zoneless"
	case FallbackUnknownDemand:
		return "unknown_demand"
	}
	return "unknown"
}

// FailOpen reports whether f gives capacity-proportional weights with no
// zone preference.
func (f Fallback) FailOpen() bool {
	switch f {
	case FallbackNoDemand, FallbackStale, FallbackInconsistent, FallbackZoneless, FallbackUnknownDemand:
		return true
	}
	return false
}

// Reasons detailing a Fallback (Result.Reason, Explain.Reason).
const (
	ReasonNoReports      = "no load reports"
	ReasonNoTraffic      = "load reports show no traffic"
	ReasonNegative       = "negative or non-finite value"
	ReasonDuplicate      = "zone reported twice"
	ReasonFuture         = "timestamp in the future"
	ReasonTotalsMismatch = "client demand does not match upstream totals"
	ReasonOld            = "report older than the staleness limit"
)

// ZoneInfo is the capacity model of one upstream zone and the estimated
// traffic landing on it.
type ZoneInfo struct {
	Zone string
	// Healthy is the raw capacity: healthy endpoints. SlowStarting of them
	// have not earned full trust yet; Trusted is the sum of their trust
	// (each in [SlowStartFraction, 1]).
	Healthy, SlowStarting int
	Trusted               float64
	// InFlightPerEndpoint is the zone's reported in-progress requests per
	// trusted endpoint; QueueFactor and ErrorFactor are the factors it and
	// ErrorRatio give this cycle (1 without load data).
	InFlightPerEndpoint float64
	ErrorRatio          float64
	QueueFactor         float64
	ErrorFactor         float64
	// Health is the factor applied: QueueFactor × ErrorFactor, at least
	// Config.CapacityFloor, its rise limited by Config.RecoveryRamp. 1 when
	// the load data is not used.
	Health float64
	// Capacity = Trusted × Health; CapacityShare is its share of the
	// service's total.
	Capacity, CapacityShare float64
	// Limit is what the zone is held at while it looks degraded, in
	// requests per second: Config.DegradedTarget × the successful rate it
	// showed when it last failed more than 1% of its requests; 0 when it
	// is not held.
	Limit float64
	// Demand is the raw demand of the clients in this zone (RPS or client
	// count, see Result.Source); DemandShare its share of the zoned demand.
	Demand, DemandShare float64
	// Load is the estimated share of the zoned demand that lands on this
	// zone under the returned vectors: Σ_z DemandShare_z × share_z→zone.
	Load float64
}

// ZoneShare is a share of a client zone's traffic sent to Zone.
type ZoneShare struct {
	Zone  string
	Share float64
}

// Explain says how a Route's vector came about. Its bools sit together
// (a Route then takes 176 bytes, and a result's 4 routes fit a 768-byte
// allocation); its JSON keeps the field order of earlier releases (see
// MarshalJSON).
type Explain struct {
	ClientZone string
	// Demand is the zone's raw demand (requests per second for SourceLRS,
	// clients for SourceClients) and DemandShare its share of the zoned
	// demand; HasDemand is false when the zone has no figure.
	Demand, DemandShare float64
	HasDemand           bool
	Source              Source
	// Fallback and Reason (and ReasonZone, the zone whose data was at
	// fault) say why the vector is not plain fill-local from load reports.
	Fallback Fallback
	// LocalFirst: the vector prefers the client's zone; else it is
	// capacity-proportional.
	LocalFirst bool
	// Held: the computed vector moved by at most Config.MoveThreshold, so
	// the previous one is kept (Route.Changed is false). Moved is the
	// largest share change the computed vector made against the previous
	// one; 1 when there was no comparable previous vector.
	Held       bool
	Reason     string
	ReasonZone string
	// DataAge is the age of the oldest load data (zero without any).
	DataAge time.Duration
	// Local is the share kept in the client's zone; Spill the shares sent
	// to the other zones that get any, sorted by zone.
	Local float64
	Spill []ZoneShare
	// Capacity is the capacity model of the client's own zone (zero
	// Healthy when it has no healthy endpoint; none for the zoneless
	// route): a reference to its entry in Result.Zones.
	Capacity ZoneRef
	Moved    float64
}

// explainJSON is Explain's JSON: its fields in the order earlier
// releases wrote them.
type explainJSON struct {
	ClientZone          string
	Demand, DemandShare float64
	HasDemand           bool
	Source              Source
	Fallback            Fallback
	Reason              string
	ReasonZone          string
	DataAge             time.Duration
	LocalFirst          bool
	Local               float64
	Spill               []ZoneShare
	Capacity            ZoneRef
	Held                bool
	Moved               float64
}

// MarshalJSON writes e with its fields in the order earlier releases
// wrote them, so replicas of either read the other's plans.
func (e Explain) MarshalJSON() ([]byte, error) {
	return json.Marshal(explainJSON{
		ClientZone: e.ClientZone, Demand: e.Demand, DemandShare: e.DemandShare, HasDemand: e.HasDemand,
		Source: e.Source, Fallback: e.Fallback, Reason: e.Reason, ReasonZone: e.ReasonZone, DataAge: e.DataAge,
		LocalFirst: e.LocalFirst, Local: e.Local, Spill: e.Spill, Capacity: e.Capacity, Held: e.Held, Moved: e.Moved,
	})
}

// UnmarshalJSON reads what MarshalJSON writes (and earlier releases
// wrote).
func (e *Explain) UnmarshalJSON(b []byte) error {
	var j explainJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Explain{
		ClientZone: j.ClientZone, Demand: j.Demand, DemandShare: j.DemandShare, HasDemand: j.HasDemand,
		Source: j.Source, Fallback: j.Fallback, Reason: j.Reason, ReasonZone: j.ReasonZone, DataAge: j.DataAge,
		LocalFirst: j.LocalFirst, Local: j.Local, Spill: j.Spill, Capacity: j.Capacity, Held: j.Held, Moved: j.Moved,
	}
	return nil
}

func (e *Explain) equal(o *Explain) bool {
	return e.ClientZone == o.ClientZone && e.Demand == o.Demand && e.DemandShare == o.DemandShare &&
		e.HasDemand == o.HasDemand && e.Source == o.Source && e.Fallback == o.Fallback &&
		e.Reason == o.Reason && e.ReasonZone == o.ReasonZone && e.DataAge == o.DataAge &&
		e.LocalFirst == o.LocalFirst && e.Local == o.Local && slices.Equal(e.Spill, o.Spill) &&
		e.Capacity.Equal(o.Capacity) && e.Held == o.Held && e.Moved == o.Moved
}

// ZoneRef refers to a ZoneInfo, in a Compute's Result the route's entry
// in Result.Zones: a route's explanation then holds a pointer instead of
// a copy of it (128 bytes a route, which a published plan held once more
// per route). The zero ZoneRef refers to none. Its JSON is the ZoneInfo's
// (a zero ZoneInfo's for none), as earlier releases wrote Explain's
// Capacity ZoneInfo, and it decodes theirs.
type ZoneRef struct {
	z *ZoneInfo
}

// RefTo returns a ZoneRef to z (none if z is nil). z must not change
// while the ZoneRef is in use.
func RefTo(z *ZoneInfo) ZoneRef { return ZoneRef{z} }

// Info returns the ZoneInfo r refers to, or a zero one.
func (r ZoneRef) Info() ZoneInfo {
	if r.z == nil {
		return ZoneInfo{}
	}
	return *r.z
}

// Equal reports whether r and o refer to equal ZoneInfos (none equals a
// zero one).
func (r ZoneRef) Equal(o ZoneRef) bool {
	if r.z == o.z {
		return true
	}
	return r.Info() == o.Info()
}

// MarshalJSON writes the ZoneInfo r refers to.
func (r ZoneRef) MarshalJSON() ([]byte, error) {
	return json.Marshal(r.Info())
}

// UnmarshalJSON reads a ZoneInfo into a ZoneRef of its own.
func (r *ZoneRef) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	z := new(ZoneInfo)
	if err := json.Unmarshal(b, z); err != nil {
		return err
	}
	r.z = z
	return nil
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// FallbackText is "none" or the fallback with its reason and data age, e.g.
// "stale load data (report older than the staleness limit, zone-b, age 45s)".
func (e *Explain) FallbackText() string {
	return fallbackText(e.Fallback, e.Reason, e.ReasonZone, e.DataAge)
}

func fallbackText(f Fallback, reason, zone string, age time.Duration) string {
	if f == FallbackNone {
		return "none"
	}
	var parts []string
	if reason != "" {
		parts = append(parts, reason)
	}
	if zone != "" {
		parts = append(parts, zone)
	}
	if f == FallbackStale || f == FallbackInconsistent {
		parts = append(parts, "age "+age.Round(time.Millisecond).String())
	}
	if len(parts) == 0 {
		return f.String()
	}
	return f.String() + " (" + strings.Join(parts, ", ") + ")"
}

// String is one line for humans (spillwayctl weights), e.g.
//
//	zone-a: demand 400 rps (lrs, 40.0%); own zone capacity 25.0% (3 healthy, 1 slow-starting, trust 2.05, queue ×1.00, errors ×1.00, health 1.00); local 62.5%, spill zone-b 25.0% zone-c 12.5%; fallback: none
func (e *Explain) String() string {
	var b strings.Builder
	zone := e.ClientZone
	if zone == "" {
		zone = `""`
	}
	b.WriteString(zone)
	b.WriteString(": demand ")
	switch {
	case !e.HasDemand:
		b.WriteString("unknown")
	case e.Source == SourceClients:
		fmt.Fprintf(&b, "%g clients (%s, %s)", e.Demand, e.Source, pct(e.DemandShare))
	default:
		fmt.Fprintf(&b, "%.4g rps (%s, %s)", e.Demand, e.Source, pct(e.DemandShare))
	}
	c := e.Capacity.Info()
	switch {
	case e.ClientZone == "":
		b.WriteString("; clients without a zone")
	case c.Healthy > 0:
		fmt.Fprintf(&b, "; own zone capacity %s (%d healthy, %d slow-starting, trust %.2f, queue ×%.2f, errors ×%.2f, health %.2f)",
			pct(c.CapacityShare), c.Healthy, c.SlowStarting, c.Trusted, c.QueueFactor, c.ErrorFactor, c.Health)
	default:
		b.WriteString("; no healthy endpoint in own zone")
	}
	if e.LocalFirst {
		fmt.Fprintf(&b, "; local %s", pct(e.Local))
	} else {
		fmt.Fprintf(&b, "; capacity-proportional, local %s", pct(e.Local))
	}
	if len(e.Spill) > 0 {
		b.WriteString(", spill")
		for _, s := range e.Spill {
			fmt.Fprintf(&b, " %s %s", s.Zone, pct(s.Share))
		}
	}
	if e.Held {
		fmt.Fprintf(&b, "; held (moved %s)", pct(e.Moved))
	}
	b.WriteString("; fallback: ")
	b.WriteString(e.FallbackText())
	return b.String()
}
