package meshweights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/zoneaware"
)

// Ownership is this replica's view of shard ownership (package
// replica/ownership). All methods are safe for concurrent use and
// cheap: the publisher calls them every cycle.
type Ownership interface {
	// Owns reports whether this replica owns service's shard now.
	Owns(service string) bool
	// Shard is service's shard, the same on every replica.
	Shard(service string) int
	// Epoch is this replica's hold of shard: an epoch that grows with
	// every new hold of that shard by any replica; ok false when this
	// replica does not hold it.
	Epoch(shard int) (epoch int64, ok bool)
	// LiveMembers are the ids of the replicas seen live, sorted.
	LiveMembers() []string
}

// MergedLoad is the owner's mesh-wide load table (package replica/exchange).
type MergedLoad interface {
	// Acked reports whether a summary from replica that arrived after
	// since lists (shard, epoch): replica routes the shard's load to this
	// owner under that hold.
	Acked(replica string, shard int, epoch int64, since time.Time) bool
	// Contributors are the replicas whose load the merged table holds
	// for service, with the age of each one's summary at now.
	Contributors(service string, now time.Time) []weights.Contributor
}

// Planner is a weights.Planner over the merged load, restricted to the
// services this replica owns. The publisher calls it from one goroutine.
type Planner interface {
	// Cycle runs one planning cycle at now.
	Cycle(now time.Time)
	// Plan is service's current plan, or nil.
	Plan(service string) *weights.Plan
	// ExportState returns service's calculation state (slow-start
	// progress, health, hysteresis), ok false when it has none.
	ExportState(service string) ([]byte, bool)
	// ImportState replaces service's calculation state with one that
	// ExportState returned (on this replica or another one).
	ImportState(service string, b []byte) error
}

// LocalPlans is this replica's own planner, computing from the load
// reports this replica receives.
type LocalPlans interface {
	Plan(service string) *weights.Plan
}

// Store keys.
const (
	Prefix      = "weights/"
	PlanPrefix  = Prefix + "plan/"
	ShardPrefix = Prefix + "shard/"
	StatePrefix = Prefix + "state/"
)

// DefaultShards is the shard count when Config.Shards is zero.
const DefaultShards = 16

// Limits on decoded records: the store is shared, so its bytes are not
// trusted.
const (
	MaxRecordBytes  = 256 << 10
	MaxZones        = 256
	MaxContributors = 1024
	maxName         = 253
	shareTolerance  = 1e-3
	recordVersion   = 1
)

// ErrBadRecord is wrapped by every decode error.
var ErrBadRecord = errors.New("bad mesh record")

// PlanKey is the store key of service's published plan.
func PlanKey(service string) string { return PlanPrefix + service }

// StateKey is the store key of service's state checkpoint.
func StateKey(service string) string { return StatePrefix + service }

// ShardKey is the store key of shard's heartbeat.
func ShardKey(shard int) string { return fmt.Sprintf("%s%02d", ShardPrefix, shard) }

// parseShardKey returns the shard of a heartbeat key.
func parseShardKey(key string) (int, error) {
	s, ok := strings.CutPrefix(key, ShardPrefix)
	if !ok {
		return 0, fmt.Errorf("key: %q is not under %s: %w", key, ShardPrefix, ErrBadRecord)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || len(s) < 2 || n >= 1<<16 {
		return 0, fmt.Errorf("key: %q does not end in a shard number: %w", key, ErrBadRecord)
	}
	return n, nil
}

// PlanRecord is what an owner stores under PlanKey: the zone-aware result
// it computed, who computed it, and from whose load.
//
// Result is zoneaware.Result's JSON encoding (its Go field names); a change
// to those types that breaks old readers needs a new V.
type PlanRecord struct {
	V            int               `json:"v"`
	Service      string            `json:"service"`
	Owner        string            `json:"owner"`
	Epoch        int64             `json:"epoch"`
	Shard        int               `json:"shard"`
	Published    time.Time         `json:"published"`
	Contributors []ContributorJSON `json:"contributors,omitempty"`
	Result       *zoneaware.Result `json:"result"`
	// Endpoints, LocalityFromEndpoints and PID are the plan's per-endpoint
	// (PID) weights (weights.Plan); omitted without them, so records of
	// services without PID are what earlier releases read.
	Endpoints             map[string]weights.EndpointWeight `json:"endpoints,omitempty"`
	LocalityFromEndpoints bool                              `json:"locality_from_endpoints,omitempty"`
	PID                   *weights.PIDExplain               `json:"pid,omitempty"`
	// Subsets are the clients' subsets (weights.Plan.Subsets), by
	// replica and client zone; omitted for a service without them, so
	// records of services without subsets are what earlier releases
	// read, and earlier releases ignore the field (their clients get
	// every endpoint).
	Subsets *subset.Assignment `json:"subsets,omitempty"`
}

// ContributorJSON is one weights.Contributor in a record.
type ContributorJSON struct {
	Replica string `json:"replica"`
	AgeMS   int64  `json:"age_ms"`
}

// Heartbeat is what an owner stores under ShardKey every cycle while it
// holds the shard.
type Heartbeat struct {
	V     int       `json:"v"`
	Owner string    `json:"owner"`
	Epoch int64     `json:"epoch"`
	Cycle uint64    `json:"cycle"`
	At    time.Time `json:"at"`
}

func encodeContributors(cs []weights.Contributor) []ContributorJSON {
	if len(cs) == 0 {
		return nil
	}
	out := make([]ContributorJSON, len(cs))
	for i, c := range cs {
		out[i] = ContributorJSON{Replica: c.Replica, AgeMS: c.Age.Milliseconds()}
	}
	return out
}

func (r *PlanRecord) contributors() []weights.Contributor {
	if len(r.Contributors) == 0 {
		return nil
	}
	out := make([]weights.Contributor, len(r.Contributors))
	for i, c := range r.Contributors {
		out[i] = weights.Contributor{Replica: c.Replica, Age: time.Duration(c.AgeMS) * time.Millisecond}
	}
	return out
}

func decodeStrict(b []byte, v any) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("value: %d bytes, over the limit of %d: %w", len(b), MaxRecordBytes, ErrBadRecord)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("value: %v: %w", err, ErrBadRecord)
	}
	if dec.More() {
		return fmt.Errorf("value: trailing data after the record: %w", ErrBadRecord)
	}
	return nil
}

func checkName(field, s string, empty bool) error {
	if s == "" && !empty {
		return fmt.Errorf("%s: is empty: %w", field, ErrBadRecord)
	}
	if len(s) > maxName {
		return fmt.Errorf("%s: %d bytes, over the limit of %d: %w", field, len(s), maxName, ErrBadRecord)
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// DecodePlan decodes and validates a plan record stored under key. The
// error wraps ErrBadRecord and names the field.
func DecodePlan(key string, b []byte) (*PlanRecord, error) {
	var r PlanRecord
	if err := decodeStrict(b, &r); err != nil {
		return nil, err
	}
	if r.V != recordVersion {
		return nil, fmt.Errorf("v: %d, want %d: %w", r.V, recordVersion, ErrBadRecord)
	}
	if want := strings.TrimPrefix(key, PlanPrefix); r.Service != want {
		return nil, fmt.Errorf("service: %q under key %q: %w", r.Service, key, ErrBadRecord)
	}
	if err := checkName("owner", r.Owner, false); err != nil {
		return nil, err
	}
	if r.Epoch < 0 {
		return nil, fmt.Errorf("epoch: %d is negative: %w", r.Epoch, ErrBadRecord)
	}
	if r.Shard < 0 || r.Shard >= 1<<16 {
		return nil, fmt.Errorf("shard: %d out of range: %w", r.Shard, ErrBadRecord)
	}
	if r.Published.IsZero() {
		return nil, fmt.Errorf("published: is missing: %w", ErrBadRecord)
	}
	if len(r.Contributors) > MaxContributors {
		return nil, fmt.Errorf("contributors: %d, over the limit of %d: %w", len(r.Contributors), MaxContributors, ErrBadRecord)
	}
	for i, c := range r.Contributors {
		if err := checkName(fmt.Sprintf("contributors[%d].replica", i), c.Replica, false); err != nil {
			return nil, err
		}
		if c.AgeMS < 0 {
			return nil, fmt.Errorf("contributors[%d].age_ms: %d is negative: %w", i, c.AgeMS, ErrBadRecord)
		}
	}
	if r.Result == nil {
		return nil, fmt.Errorf("result: is missing: %w", ErrBadRecord)
	}
	if err := checkResult(r.Result); err != nil {
		return nil, fmt.Errorf("result.%w", err)
	}
	if len(r.Endpoints) > maxRecordEndpoints {
		return nil, fmt.Errorf("endpoints: %d, want at most %d: %w", len(r.Endpoints), maxRecordEndpoints, ErrBadRecord)
	}
	for id, w := range r.Endpoints {
		if id == "" || w.Weight < 1 {
			return nil, fmt.Errorf("endpoints[%q].weight: %d, want an id and a weight >= 1: %w", id, w.Weight, ErrBadRecord)
		}
	}
	if (r.PID == nil) != (r.Endpoints == nil) {
		return nil, fmt.Errorf("pid: present without endpoints or missing with them: %w", ErrBadRecord)
	}
	return &r, nil
}

// maxRecordEndpoints bounds a record's endpoint weights.
const maxRecordEndpoints = 1 << 20

// planKey is vectorKey with the plan's endpoint weights: two plans with
// the same key push the same EDS and SRV weights.
// subsetKey is a compact form of a plan's subsets for planKey's users.
func subsetKey(a *subset.Assignment) string {
	if a == nil {
		return ""
	}
	return "|subsets" + strconv.FormatUint(a.Fingerprint(), 16)
}

func planKey(res *zoneaware.Result, eps map[string]weights.EndpointWeight, fromEndpoints bool) string {
	k := vectorKey(res)
	if eps == nil {
		return k
	}
	ids := make([]string, 0, len(eps))
	for id := range eps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	b.WriteString(k)
	b.WriteString("|endpoints")
	if fromEndpoints {
		b.WriteString("-only")
	}
	for _, id := range ids {
		b.WriteByte(';')
		b.WriteString(id)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(uint64(eps[id].Weight), 10))
	}
	return b.String()
}

// checkResult validates what the selector serves from: routes sorted by
// client zone, vectors sorted by zone with weights >= 1 and shares that sum
// to 1, bounded sizes, finite figures.
func checkResult(res *zoneaware.Result) error {
	if len(res.Routes) == 0 || len(res.Routes) > MaxZones {
		return fmt.Errorf("routes: %d routes, want 1 to %d: %w", len(res.Routes), MaxZones, ErrBadRecord)
	}
	if len(res.Zones) > MaxZones {
		return fmt.Errorf("zones: %d, over the limit of %d: %w", len(res.Zones), MaxZones, ErrBadRecord)
	}
	for i := range res.Routes {
		rt := &res.Routes[i]
		if err := checkName(fmt.Sprintf("routes[%d].ClientZone", i), rt.ClientZone, true); err != nil {
			return err
		}
		if i > 0 && rt.ClientZone <= res.Routes[i-1].ClientZone {
			return fmt.Errorf("routes[%d].ClientZone: %q not after %q: %w", i, rt.ClientZone, res.Routes[i-1].ClientZone, ErrBadRecord)
		}
		if len(rt.Weights) > MaxZones || len(rt.Explain.Spill) > MaxZones {
			return fmt.Errorf("routes[%d].Weights: over %d zones: %w", i, MaxZones, ErrBadRecord)
		}
		sum := 0.0
		for j, w := range rt.Weights {
			f := fmt.Sprintf("routes[%d].Weights[%d]", i, j)
			// "" is the zone of endpoints registered without one, a zone
			// like any other (zoneaware.Endpoint.Zone).
			if err := checkName(f+".Zone", w.Zone, true); err != nil {
				return err
			}
			if j > 0 && w.Zone <= rt.Weights[j-1].Zone {
				return fmt.Errorf("%s.Zone: %q not after %q: %w", f, w.Zone, rt.Weights[j-1].Zone, ErrBadRecord)
			}
			if w.Weight < 1 {
				return fmt.Errorf("%s.Weight: is 0: %w", f, ErrBadRecord)
			}
			if !finite(w.Share) || w.Share < 0 || w.Share > 1 {
				return fmt.Errorf("%s.Share: %v not in [0, 1]: %w", f, w.Share, ErrBadRecord)
			}
			sum += w.Share
		}
		if len(rt.Weights) > 0 && math.Abs(sum-1) > shareTolerance {
			return fmt.Errorf("routes[%d].Weights: shares sum to %v, want 1: %w", i, sum, ErrBadRecord)
		}
	}
	for i, z := range res.Zones {
		if err := checkName(fmt.Sprintf("zones[%d].Zone", i), z.Zone, true); err != nil {
			return err
		}
	}
	if !finite(res.SameZone) || !finite(res.Optimum) {
		return fmt.Errorf("SameZone: not finite: %w", ErrBadRecord)
	}
	return nil
}

// DecodeHeartbeat decodes and validates a heartbeat stored under key and
// returns its shard.
func DecodeHeartbeat(key string, b []byte) (int, *Heartbeat, error) {
	shard, err := parseShardKey(key)
	if err != nil {
		return 0, nil, err
	}
	var h Heartbeat
	if err := decodeStrict(b, &h); err != nil {
		return 0, nil, err
	}
	if h.V != recordVersion {
		return 0, nil, fmt.Errorf("v: %d, want %d: %w", h.V, recordVersion, ErrBadRecord)
	}
	if err := checkName("owner", h.Owner, false); err != nil {
		return 0, nil, err
	}
	if h.Epoch < 0 {
		return 0, nil, fmt.Errorf("epoch: %d is negative: %w", h.Epoch, ErrBadRecord)
	}
	if h.At.IsZero() {
		return 0, nil, fmt.Errorf("at: is missing: %w", ErrBadRecord)
	}
	return shard, &h, nil
}

// vectorKey is a compact form of every route's weights: two results with
// the same key give every client the same vectors.
func vectorKey(res *zoneaware.Result) string {
	if res == nil {
		return "\x00nil"
	}
	var b strings.Builder
	for _, rt := range res.Routes {
		b.WriteString(rt.ClientZone)
		b.WriteByte('>')
		for _, w := range rt.Weights {
			b.WriteString(w.Zone)
			b.WriteByte('=')
			b.WriteString(strconv.FormatUint(uint64(w.Weight), 10))
			b.WriteByte(',')
		}
		b.WriteByte(';')
	}
	return b.String()
}

// validService reports whether service can be a store key.
func validService(service string) error {
	return systemstore.ValidateKey(PlanKey(service))
}
