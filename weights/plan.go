package weights

import (
	"time"

	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/zoneaware"
)

// Plan is one service's zone-aware weights: what every stream and DNS
// answer of the service is built from until the next plan. A Plan and
// its Result are never modified once handed out.
type Plan struct {
	// Gen changes whenever the vectors a client gets change.
	Gen    uint64
	Result *zoneaware.Result
	// Source says where the plan came from.
	Source Source
	// Owner is the replica that computed a published plan ("" for a
	// local one).
	Owner string
	// Contributors are the replicas whose load reports the owner merged,
	// with the age of each one's summary when the plan was computed.
	Contributors []Contributor
	// Published is when the owner published it (zero for a local plan).
	Published time.Time
	// Reason says why this source was chosen over a better one; "" when
	// nothing better was available.
	Reason string
	// Endpoints are the per-endpoint weights by endpoint ID when the
	// service's strategy has PID (or a blend with it); nil otherwise, and
	// then every endpoint weighs its registry weight.
	Endpoints map[string]EndpointWeight
	// LocalityFromEndpoints: the strategy is PID without zone-aware; a
	// locality weighs the sum of its endpoints' weights and Result's
	// routes are not pushed.
	LocalityFromEndpoints bool
	// PID explains the PID round; nil when Endpoints is.
	PID *PIDExplain
	// Subsets, when the service's clients get subsets of its endpoints
	// (SubsetConfig), is every client slot's subset; nil otherwise.
	Subsets *subset.Assignment
}

// Contributor is one replica's share of a mesh-wide plan.
type Contributor struct {
	Replica string
	Age     time.Duration
}

// Source is where a plan came from.
type Source int

// Sources, best first.
const (
	// SourceMesh: computed by the service's owner from every replica's
	// load, published through the store.
	SourceMesh Source = iota + 1
	// SourceLocal: computed by this replica from its own load reports.
	SourceLocal
)

func (s Source) String() string {
	switch s {
	case SourceMesh:
		return "mesh"
	case SourceLocal:
		return "local"
	}
	return "unknown"
}
