package zoneaware

import (
	"time"
)

// State is what one service carries from one Compute to the next: the
// previous vectors, slow-start progress per endpoint, the health factor per
// zone, and (with Compute, not ComputeWith) scratch memory. The zero State
// is ready; use one per service.
type State struct {
	last time.Time

	eps    []endpointState
	health []zoneHealth
	pushed []pushedRoute

	// scratch is what a Compute works in; ComputeWith lends it a
	// Scratch's for the call, so the State keeps none between calls.
	scratch
}

// Scratch is memory to compute in (ComputeWith), shared by the States of
// many services: a State that Compute alone runs on keeps its own, about
// 2.3 KiB for a service of 3 zones and 20 endpoints (zone scratch, and
// the buffers its endpoints, zone health and vectors are built in before
// they are copied into the State; BenchmarkPlannerHeldRegion in
// weights). The zero Scratch is ready; one ComputeWith uses it at a time.
type Scratch struct{ scratch }

// scratch is valid during one Compute; nothing in it is read before it
// is written in that Compute.
type scratch struct {
	zones  []zone
	epZone []int32
	share  []float64
	epIdx  map[string]int
	// The next eps, health and pushed are built here, then copied into
	// the State's own (reading the State's while they are built).
	epsNext    []endpointState
	healthNext []zoneHealth
	pushedNext []pushedRoute
}

type endpointState struct {
	id         string
	registered time.Time
	progress   float64 // [0, 1]
	// relief is how much of the slow-start discount the endpoint is
	// spared, [0, 1]: set when it (re)starts, from how cold the service
	// is then (see coldRelief).
	relief  float64
	healthy bool // healthy at the previous cycle
	fresh   bool // first seen this cycle
}

type zoneHealth struct {
	zone string
	h    float64
	at   time.Time
	// limit is the most the zone is sent while it looks degraded, in
	// requests per second: DegradedTarget × its measured capacity; 0 when
	// none.
	limit float64
	// hist is the zone's previous load reports, newest first, n of them:
	// the queue signal pools them with the current one.
	hist [queueReports - 1]loadSample
	n    int
}

type loadSample struct{ inProgress, issued float64 }

// saturatedErrors is the error ratio above which a zone is taken to be
// at its capacity: its successful rate is what it can serve.
const saturatedErrors = 0.01

type pushedRoute struct {
	zone     string
	fallback Fallback
	w        []ZoneWeight
}

// zone is the per-cycle scratch of one zone.
type zone struct {
	name string
	load int // index in Input.Loads, -1 if none

	healthy, slow      int
	prevTrust, trusted float64

	inflight, latency, errRatio, qf, ef, health float64
	capacity, C                                 float64
	limit                                       float64 // see zoneHealth.limit
	hidx                                        int     // index in State.health after this cycle, -1 if none
	prev                                        int     // index in State.health, -1 if none
	pIn, pIss, pN                               float64 // pooled in progress, issued, reports (queue signal)
	cIn, cIss                                   float64 // this report's in progress, issued
	capped                                      bool

	demandRow bool // has a Demand row (seen by checkLoads)
	demand    float64
	hasDemand bool
	D, L      float64
	spare     float64
	loadEst   float64
}

// find returns the index of zone name, or -1.
func (st *State) find(name string) int {
	zs := st.zones
	if len(zs) <= 8 {
		for i := range zs {
			if zs[i].name == name {
				return i
			}
		}
		return -1
	}
	lo, hi := 0, len(zs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if zs[m].name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(zs) && zs[lo].name == name {
		return lo
	}
	return -1
}

// addZone inserts name into the sorted zone list.
func (st *State) addZone(name string) {
	zs := st.zones
	i := len(zs)
	for i > 0 && zs[i-1].name > name {
		i--
	}
	if i > 0 && zs[i-1].name == name {
		return
	}
	st.zones = append(st.zones, zone{})
	copy(st.zones[i+1:], st.zones[i:])
	st.zones[i] = zone{name: name, load: -1}
}

func (st *State) buildZones(in *Input) {
	st.zones = st.zones[:0]
	last := "\x00none"
	for i := range in.Endpoints {
		if z := in.Endpoints[i].Zone; z != last {
			st.addZone(z)
			last = z
		}
	}
	for i := range in.Demand {
		if z := in.Demand[i].ClientZone; z != "" {
			st.addZone(z)
		}
	}
	for i := range in.Clients {
		if z := in.Clients[i].Zone; z != "" {
			st.addZone(z)
		}
	}
	st.epZone = st.epZone[:0]
	lastIdx := -1
	for i := range in.Endpoints {
		z := in.Endpoints[i].Zone
		if lastIdx < 0 || st.zones[lastIdx].name != z {
			lastIdx = st.find(z)
		}
		st.epZone = append(st.epZone, int32(lastIdx))
	}
}

// matchEndpoints aligns st.eps with in.Endpoints, keeping the state of
// endpoints seen before.
func (st *State) matchEndpoints(in *Input) {
	eps := in.Endpoints
	same := len(st.eps) == len(eps)
	if same {
		for i := range eps {
			if s := &st.eps[i]; s.id != eps[i].ID || !s.registered.Equal(eps[i].Registered) {
				same = false
				break
			}
		}
	}
	if same {
		for i := range st.eps {
			st.eps[i].fresh = false
		}
		return
	}
	if st.epIdx == nil {
		st.epIdx = make(map[string]int, len(st.eps))
	}
	clear(st.epIdx)
	for i := range st.eps {
		st.epIdx[st.eps[i].id] = i
	}
	next := st.epsNext[:0]
	for i := range eps {
		e := &eps[i]
		if j, ok := st.epIdx[e.ID]; ok && st.eps[j].registered.Equal(e.Registered) {
			s := st.eps[j]
			s.fresh = false
			next = append(next, s)
			continue
		}
		next = append(next, endpointState{id: e.ID, registered: e.Registered, fresh: true})
	}
	st.epsNext = next[:0]
	st.eps = append(st.eps[:0], next...)
}
