package zoneaware

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Snapshot is what a State carries from one Compute to the next, in a form
// that survives JSON: restored into a fresh State (Restore), the next
// Compute gives the same Result as on the State it was taken from. It lets
// another process carry on a service's calculation: slow start, zone
// health and hysteresis do not start over.
type Snapshot struct {
	// Last is the time of the last Compute; zero before the first.
	Last time.Time `json:"last"`
	// Endpoints are the slow-start states, in the order of the last
	// Input's endpoints.
	Endpoints []EndpointSnapshot `json:"endpoints,omitempty"`
	// Zones are the health states, sorted by zone, unique.
	Zones []ZoneSnapshot `json:"zones,omitempty"`
	// Routes are the vectors last returned, which hysteresis compares the
	// next ones with, sorted by client zone ("" first), unique.
	Routes []RouteSnapshot `json:"routes,omitempty"`
}

// EndpointSnapshot is one endpoint's slow-start state.
type EndpointSnapshot struct {
	ID         string    `json:"id"`
	Registered time.Time `json:"registered"`
	// Progress of slow start, [0, 1].
	Progress float64 `json:"progress"`
	// Relief is how much of the slow-start discount it is spared, [0, 1].
	Relief float64 `json:"relief"`
	// Healthy at the last Compute.
	Healthy bool `json:"healthy"`
}

// ZoneSnapshot is one zone's health state.
type ZoneSnapshot struct {
	Zone string `json:"zone"`
	// Health factor, (0, 1]: at least the CapacityFloor it was computed
	// with.
	Health float64   `json:"health"`
	At     time.Time `json:"at"`
	// Limit is the most the zone is sent while degraded, requests per
	// second; 0 for none.
	Limit float64 `json:"limit,omitempty"`
	// History is the zone's previous load reports, newest first, at most
	// two (the queue signal pools three with the current one).
	History []LoadSample `json:"history,omitempty"`
}

// LoadSample is one load report of a zone, as the queue signal keeps it.
type LoadSample struct {
	InProgress float64 `json:"in_progress"`
	Issued     float64 `json:"issued"`
}

// RouteSnapshot is the vector last returned for a client zone.
type RouteSnapshot struct {
	ClientZone string `json:"client_zone"`
	// Fallback is the route's Fallback.Key().
	Fallback string           `json:"fallback"`
	Weights  []WeightSnapshot `json:"weights,omitempty"`
}

// WeightSnapshot is one ZoneWeight.
type WeightSnapshot struct {
	Zone   string  `json:"zone"`
	Weight uint32  `json:"weight"`
	Share  float64 `json:"share"`
}

// Bounds of a Snapshot that Restore accepts.
const (
	MaxSnapshotEndpoints = 1 << 16
	MaxSnapshotZones     = 1024
	maxZoneName          = 253
	maxEndpointID        = 1024
)

// ErrInvalidSnapshot is wrapped by the errors of Restore.
var ErrInvalidSnapshot = errors.New("invalid zone-aware state")

// Snapshot returns a copy of what st carries to the next Compute. It
// shares no memory with st.
func (st *State) Snapshot() Snapshot {
	s := Snapshot{Last: st.last}
	if len(st.eps) > 0 {
		s.Endpoints = make([]EndpointSnapshot, len(st.eps))
		for i, e := range st.eps {
			s.Endpoints[i] = EndpointSnapshot{ID: e.id, Registered: e.registered, Progress: e.progress, Relief: e.relief, Healthy: e.healthy}
		}
	}
	if len(st.health) > 0 {
		s.Zones = make([]ZoneSnapshot, len(st.health))
		for i, h := range st.health {
			z := ZoneSnapshot{Zone: h.zone, Health: h.h, At: h.at, Limit: h.limit}
			for k := range h.n {
				z.History = append(z.History, LoadSample{InProgress: h.hist[k].inProgress, Issued: h.hist[k].issued})
			}
			s.Zones[i] = z
		}
	}
	if len(st.pushed) > 0 {
		s.Routes = make([]RouteSnapshot, len(st.pushed))
		for i, p := range st.pushed {
			r := RouteSnapshot{ClientZone: p.zone, Fallback: p.fallback.Key()}
			for _, w := range p.w {
				r.Weights = append(r.Weights, WeightSnapshot{Zone: w.Zone, Weight: w.Weight, Share: w.Share})
			}
			s.Routes[i] = r
		}
	}
	return s
}

// Restore replaces st's carried state with s, after checking it: counts
// within bounds, finite values in range, zones and routes sorted and
// unique, endpoint ids unique. An error wraps ErrInvalidSnapshot, names
// the field, and leaves st as it was.
func (st *State) Restore(s Snapshot) error {
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidSnapshot, field, fmt.Sprintf(format, args...))
	}
	unit := func(v float64) bool { return v >= 0 && v <= 1 } // false for NaN
	if len(s.Endpoints) > MaxSnapshotEndpoints {
		return bad("endpoints", "%d, want at most %d", len(s.Endpoints), MaxSnapshotEndpoints)
	}
	if len(s.Zones) > MaxSnapshotZones {
		return bad("zones", "%d, want at most %d", len(s.Zones), MaxSnapshotZones)
	}
	if len(s.Routes) > MaxSnapshotZones+1 {
		return bad("routes", "%d, want at most %d", len(s.Routes), MaxSnapshotZones+1)
	}
	eps := make([]endpointState, len(s.Endpoints))
	ids := make(map[string]struct{}, len(s.Endpoints))
	for i, e := range s.Endpoints {
		field := fmt.Sprintf("endpoints[%d]", i)
		switch {
		case e.ID == "" || len(e.ID) > maxEndpointID:
			return bad(field+".id", "%d bytes, want 1..%d", len(e.ID), maxEndpointID)
		case !unit(e.Progress):
			return bad(field+".progress", "%v, want 0..1", e.Progress)
		case !unit(e.Relief):
			return bad(field+".relief", "%v, want 0..1", e.Relief)
		}
		if _, dup := ids[e.ID]; dup {
			return bad(field+".id", "%q appears twice", e.ID)
		}
		ids[e.ID] = struct{}{}
		eps[i] = endpointState{id: e.ID, registered: e.Registered, progress: e.Progress, relief: e.Relief, healthy: e.Healthy}
	}
	health := make([]zoneHealth, len(s.Zones))
	for i, z := range s.Zones {
		field := fmt.Sprintf("zones[%d]", i)
		switch {
		case len(z.Zone) > maxZoneName:
			return bad(field+".zone", "%d bytes, want at most %d", len(z.Zone), maxZoneName)
		case i > 0 && z.Zone <= s.Zones[i-1].Zone:
			return bad(field+".zone", "%q after %q, want sorted and unique", z.Zone, s.Zones[i-1].Zone)
		case !(z.Health > 0 && z.Health <= 1):
			return bad(field+".health", "%v, want (0, 1]", z.Health)
		case !finite(z.Limit):
			return bad(field+".limit", "%v, want a finite rate >= 0", z.Limit)
		case len(z.History) > queueReports-1:
			return bad(field+".history", "%d samples, want at most %d", len(z.History), queueReports-1)
		}
		h := zoneHealth{zone: z.Zone, h: z.Health, at: z.At, limit: z.Limit, n: len(z.History)}
		for k, l := range z.History {
			switch {
			case !finite(l.InProgress):
				return bad(fmt.Sprintf("%s.history[%d].in_progress", field, k), "%v, want finite >= 0", l.InProgress)
			case !finite(l.Issued):
				return bad(fmt.Sprintf("%s.history[%d].issued", field, k), "%v, want finite >= 0", l.Issued)
			}
			h.hist[k] = loadSample{inProgress: l.InProgress, issued: l.Issued}
		}
		health[i] = h
	}
	pushed := make([]pushedRoute, len(s.Routes))
	for i, r := range s.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		switch {
		case len(r.ClientZone) > maxZoneName:
			return bad(field+".client_zone", "%d bytes, want at most %d", len(r.ClientZone), maxZoneName)
		case i > 0 && r.ClientZone <= s.Routes[i-1].ClientZone:
			return bad(field+".client_zone", "%q after %q, want sorted and unique", r.ClientZone, s.Routes[i-1].ClientZone)
		case len(r.Weights) > MaxSnapshotZones:
			return bad(field+".weights", "%d, want at most %d", len(r.Weights), MaxSnapshotZones)
		}
		fb, ok := fallbackByKey(r.Fallback)
		if !ok {
			return bad(field+".fallback", "unknown %q", r.Fallback)
		}
		p := pushedRoute{zone: r.ClientZone, fallback: fb, w: make([]ZoneWeight, len(r.Weights))}
		for k, w := range r.Weights {
			wf := fmt.Sprintf("%s.weights[%d]", field, k)
			switch {
			case len(w.Zone) > maxZoneName:
				return bad(wf+".zone", "%d bytes, want at most %d", len(w.Zone), maxZoneName)
			case w.Weight < 1 || w.Weight > maxScale:
				return bad(wf+".weight", "%d, want 1..%d", w.Weight, maxScale)
			case !unit(w.Share):
				return bad(wf+".share", "%v, want 0..1", w.Share)
			}
			p.w[k] = ZoneWeight{Zone: w.Zone, Weight: w.Weight, Share: w.Share}
		}
		pushed[i] = p
	}
	st.last = s.Last
	st.eps, st.health, st.pushed = eps, health, pushed
	return nil
}

// finite reports whether v is a finite number >= 0.
func finite(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

func fallbackByKey(key string) (Fallback, bool) {
	for _, f := range Fallbacks() {
		if f.Key() == key {
			return f, true
		}
	}
	return 0, false
}
